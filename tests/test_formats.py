"""One registry of output formats (cli/formats.py) for report, compare and gate: each --format's help
lists the registry's formats, each registered writer exists, and an unknown or unsupported format is a
one-line error naming the ones that command can write, never a silent fall-back to another."""

import json

import pytest

from trustmh.cli.formats import COMPARE, GATE, RANKS, REGISTRY, REPORT


def test_every_registered_writer_exists_and_each_help_lists_its_formats(cli_here):
    for formats in REGISTRY.values():
        for fmt, target in formats.writers.items():
            if target:
                assert callable(formats.writer(fmt)), (formats.what, fmt)
    for command, formats in (("report", REPORT), ("compare", COMPARE), ("gate", GATE)):
        code, out, _ = cli_here(command, "--help")
        assert code == 0 and "One of: " + ", ".join(formats.names) in " ".join(out.split()), command


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from conftest import run_quiet, run_spec
    out = tmp_path_factory.mktemp("fmt") / "run"
    run_quiet(run_spec(models=["baseline/counselor"], tasks="ethics,privacy.awareness_tier1", n_boot=0), out)
    return out


@pytest.mark.parametrize("args, allowed", [
    (("report", "--format", "json"), REPORT), (("compare", "--format", "latex"), COMPARE),
    (("compare", "--ranks", "--format", "json"), RANKS), (("compare", "--ranks", "--format", "table"), RANKS),
    (("gate", "--min", "overall=0", "--format", "csv"), GATE)])
def test_an_unsupported_format_is_one_line_naming_what_the_command_writes(cli_here, run_dir, args, allowed):
    code, out, err = cli_here(args[0], run_dir, *args[1:])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (out, err)
    assert allowed.listed() in err and "Traceback" not in err


def test_compare_ranks_writes_the_format_asked_for(cli_here, run_dir):
    """--ranks used to print Markdown for anything but csv (json and latex included)."""
    code, latex, _ = cli_here("compare", run_dir, "--ranks", "--format", "latex")
    assert code == 0 and "\\begin{table}" in latex
    code, md, _ = cli_here("compare", run_dir, "--ranks")
    assert code == 0 and md.lstrip().startswith("|")
    code, csv, _ = cli_here("compare", run_dir, "--ranks", "--format", "csv")
    assert code == 0 and "," in csv.splitlines()[0] and "\\begin" not in csv and not csv.startswith("|")
    code, doc, _ = cli_here("compare", run_dir, run_dir, "--format", "json", "--bootstrap", "100")
    assert code == 0 and isinstance(json.loads(doc), (dict, list))
