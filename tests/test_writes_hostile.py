"""Issue 24: every file trustmh writes goes through one writer (files.py): an exclusively created
random temporary name in the target's folder, never following a link or opening a FIFO, renamed over a
target that is absent or a regular file. `report -o` / `compare --html` never name a run's own files.
Each test here failed on the code before the change (a user's file overwritten through a planted link, a
run hanging on a FIFO, the store replaced by a report, a device turned into a file)."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_quiet, run_spec
from test_cli import assert_user_error


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("finished") / "run"
    run_quiet(run_spec(models=["baseline/counselor"], suite="sample", tasks="ethics", n_boot=0), run)
    return run


@pytest.fixture
def run_dir(finished, tmp_path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(finished, dest)
    return dest


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rescore(run: Path):
    from trustmh.engine import load_spec, run as engine_run
    return engine_run(load_spec(run), run, generate=False)


# --- fixed temp names are gone: a planted link or FIFO is never opened ---------------------------------

@pytest.mark.parametrize("name", ["samples.jsonl.tmp", "results.json.tmp"])
def test_a_link_at_an_old_temp_name_never_reaches_the_user_s_file(run_dir, tmp_path, name):
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's own file\n")
    os.symlink(precious, run_dir / name)
    rescore(run_dir)
    assert precious.read_text() == "the user's own file\n"  # before: overwritten with samples.jsonl's rows
    for f in ("samples.jsonl", "results.json"):
        assert (run_dir / f).is_file() and not (run_dir / f).is_symlink()  # before: a link to precious.txt
    assert os.path.islink(run_dir / name)  # left as it was: not ours to remove


def test_a_fifo_at_an_old_temp_name_does_not_hang_a_run(run_dir):
    os.mkfifo(run_dir / "samples.jsonl.tmp")
    os.mkfifo(run_dir / "results.json.tmp")
    # In a process of its own, so that the old code's hang (open() of a FIFO with no reader) cannot stop the
    # suite: the bound is a guard against that hang, not a measure of speed.
    code = ("import sys; from pathlib import Path; from trustmh.engine import load_spec, run\n"
            "p = Path(sys.argv[1]); run(load_spec(p), p, generate=False)\n")
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the run hung on a FIFO")
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "samples.jsonl").is_file()


def test_validate_judge_writes_through_the_writer(tmp_path):
    from trustmh.validation.judge import ValidateSpec, validate_judge
    out, spec = tmp_path / "v", ValidateSpec(judge="rules", suite="sample", n_boot=0)
    validate_judge(spec, out)
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    for name in ("samples.jsonl.tmp", "results.json.tmp"):
        os.symlink(precious, out / name)
    validate_judge(spec, out)
    assert precious.read_text() == "keep me\n"
    assert (out / "results.json").is_file() and not (out / "results.json").is_symlink()
    assert (out / "samples.jsonl").is_file() and not (out / "samples.jsonl").is_symlink()


def test_a_link_or_fifo_as_a_run_s_own_file_is_refused_not_followed(run_dir, tmp_path):
    from trustmh.errors import UserError
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    (run_dir / "results.json").unlink()
    os.symlink(precious, run_dir / "results.json")
    with pytest.raises(UserError, match="symbolic link"):
        rescore(run_dir)
    assert precious.read_text() == "mine\n"
    (run_dir / "results.json").unlink()
    (run_dir / "run.lock").unlink(missing_ok=True)  # a finished run removes it; a killed one leaves it
    os.mkfifo(run_dir / "run.lock")  # opening it for writing blocked forever
    with pytest.raises(UserError, match="run.lock"):
        rescore(run_dir)


def test_a_planted_write_probe_link_is_not_followed(tmp_path):
    from trustmh.files import open_run_dir
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.lock").write_text("")  # a run folder
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    os.symlink(precious, out / ".write-test")
    open_run_dir(out)
    assert precious.read_text() == "mine\n"  # before: truncated to nothing


def test_a_failed_write_leaves_no_temp_and_the_old_file(tmp_path):
    from trustmh.files import atomic_open
    target = tmp_path / "report.html"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as fh:
            fh.write("half")
            raise RuntimeError("disk full")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


# --- what -o / --html may name -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["store.sqlite", "results.json", "samples.jsonl", "run.lock"])
def test_report_never_replaces_a_run_s_own_file(cli, run_dir, name):
    before = {p.name: digest(p) for p in run_dir.iterdir()}
    assert_user_error(cli("report", run_dir, "-o", run_dir / name), "a run's own file", name)
    assert {p.name: digest(p) for p in run_dir.iterdir()} == before  # before: exit 0, the store replaced


def test_compare_html_never_replaces_a_run_s_own_file(cli, run_dir, tmp_path):
    before = digest(run_dir / "store.sqlite")
    hard = tmp_path / "alias.sqlite"
    os.link(run_dir / "store.sqlite", hard)  # another name for the same file is still the store
    for target in (run_dir / "store.sqlite", hard):
        assert_user_error(cli("compare", run_dir, "--format", "json", "--html", target), "a run's own file")
    assert digest(run_dir / "store.sqlite") == before


def test_output_targets_that_are_not_regular_files_are_refused(cli, run_dir, tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    link = tmp_path / "link.html"
    os.symlink(precious, link)
    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    for target, why in ((link, "symbolic link"), (fifo, "FIFO"), (folder, "directory"),
                        (Path("/dev/null"), "character device"), ("", "empty")):
        assert_user_error(cli("report", run_dir, "-o", target, cwd=tmp_path), why)
    assert link.is_symlink() and precious.read_text() == "mine\n"  # before: the link replaced by the report
    assert Path("/dev/null").is_char_device()
    ok = cli("report", run_dir, "-o", tmp_path / "fine.html")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "fine.html").stat().st_size > 0
