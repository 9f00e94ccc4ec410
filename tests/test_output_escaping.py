"""Terminal, CSV, Markdown and HTML output through one escaping layer (issue 38, M1, M2, M4 and bidi in
report.html): what a person sees of a hostile model name, group or criterion is that text, made visible,
never a terminal command, a spreadsheet formula, rich markup or a reversed line.

The run folder is a received one: two models answered by the loopback server, then their names in
results.json and samples.jsonl replaced by hostile ones (ESC, BEL, C1, RLO; a formula; rich markup), as a
crafted folder would hold them, and groups given on the command line."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re

import pytest

from conftest import run_cli
from trustmh.testing.fake_server import FakeLLMServer

ENV = {"OPENAI_API_KEY": "sk-test"}
# what must never reach a terminal or a file raw: C0 but tab and newline, DEL, C1, bidi controls
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
NAME_1 = '=HYPERLINK("http://evil.example/","click")\x1b]0;owned\x07\x9b31m\u202eevil'
NAME_2 = "-2+3[/x] [bold]b|c"
GROUP_1 = "@SUM(1+1)\u202eg"
GROUP_2 = "+cmd\x1b[2J"
FORMULA = ("=", "+", "-", "@", "\t", "\r")


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("escaping")
    with FakeLLMServer(reply=lambda body: "Answer: A") as srv:
        proc = run_cli("run", "--model", "openai/m1", "--model", "openai/m2", "--base-url", srv.openai_base_url,
                   "--judge", "rules", "--suite", "sample", "--tasks", "ethics,privacy.awareness_tier1",
                   "--bootstrap", "100", "--out", root / "run", "--no-progress", cwd=root, env_extra=ENV)
    assert proc.returncode == 0, proc.stderr
    for name in ("samples.jsonl", "results.json"):  # the folder's own checksum of samples.jsonl kept true
        path = root / "run" / name
        text = path.read_text()
        for old, new in (("openai/m1", NAME_1), ("openai/m2", NAME_2)):
            text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
        if name == "results.json":
            doc = json.loads(text)
            doc["outputs"]["samples_sha256"] = hashlib.sha256((root / "run" / "samples.jsonl").read_bytes()).hexdigest()
            text = json.dumps(doc)
        path.write_text(text)
    (root / "run" / "report.html").unlink()
    return root / "run"


def _groups():
    return ["--group", f"{NAME_1}={GROUP_1}", "--group", f"{NAME_2}={GROUP_2}"]


def _no_raw(text: str, where: str) -> None:
    found = RAW.findall(text)
    assert not found, (where, found[:5])


def _csv_safe(text: str, where: str) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(text)))
    for row in rows:
        for cell in row:
            if cell.startswith(FORMULA):
                try:
                    float(cell)  # a number we wrote, such as -0.5, is a number
                except ValueError:
                    pytest.fail(f"{where}: formula cell {cell!r}")
    return rows


@pytest.mark.parametrize("args", [("report", "--format", "csv"), ("report", "--format", "markdown"),
                                  ("compare", "--ranks"), ("compare", "--ranks", "--format", "csv"),
                                  ("compare", "--format", "csv"), ("compare", "--format", "markdown"),
                                  ("compare",)], ids=" ".join)
def test_names_reach_no_output_raw(cli, hostile_run, args):
    """M1: ESC, BEL, C1 and RLO in model names or groups reached the terminal raw from report --format
    csv|markdown and compare --ranks; M2: CSV cells such as =HYPERLINK(...), @SUM(...), +cmd and -2+3 were
    written as they are."""
    extra = ["--bootstrap", "100"] if args[0] == "compare" and "--ranks" not in args else []
    proc = cli(*args[:1], hostile_run, *args[1:], *_groups(), *extra, cwd=hostile_run.parent)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    _no_raw(proc.stdout + proc.stderr, " ".join(args))
    shown = proc.stdout
    markdown = "markdown" in args or args == ("compare", "--ranks")
    seen = re.sub(r"\\(.)", r"\1", shown) if markdown else shown  # what Markdown renders: escapes undone
    assert "\\x1b]0;owned\\x07" in seen and "\\u202e" in seen  # made visible, not dropped
    if "csv" in args:
        rows = _csv_safe(shown, " ".join(args))
        cells = {c for r in rows for c in r}
        assert any(c.startswith("'=HYPERLINK(") for c in cells) and any(c.startswith("'-2+3") for c in cells)
        if "--ranks" in args or args[0] == "report":
            assert any(c.startswith("'@SUM(1+1)") for c in cells) and any(c.startswith("'+cmd") for c in cells)
    elif markdown:
        table = [line for line in shown.splitlines() if line.startswith("|")]
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in table}
        assert len(widths) == 1, widths  # a | in a name does not add a column
        assert "b\\|c" in shown
    else:  # the terminal table: the markup in a name is printed as text
        assert "[/x]" in shown and "[bold]b" in shown


def test_bidi_in_groups_and_names_is_escaped_in_report_html(cli, hostile_run, tmp_path):
    """Bidi overrides in a group rendered unescaped in report.html: a name that reads other than it is."""
    out = tmp_path / "r.html"
    proc = cli("report", hostile_run, "-o", out, *_groups(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text(encoding="utf-8")
    _no_raw(page, "report.html")
    assert "\\u202e" in page


def test_rich_markup_in_names_is_text_everywhere(cli, tmp_path):
    """M4: `run -m 'openai/m[/x]'` raised MarkupError (exit 1, results.json but no report.html); so did a panel
    judge, score --judge, panel, validate-judge and a criterion '[/x]'; `openai/m[bold]x` printed as
    `openai/mx`."""
    ratings = tmp_path / "r.jsonl"
    ratings.write_text("".join(json.dumps({"item": f"i{i}", "context": "seeker: hi", "reply": f"reply {i}",
                                           "criterion": "[/x]", "rater": r, "rating": (i + k) % 5 + 1}) + "\n"
                               for i in range(6) for k, r in enumerate(("a", "b"))))
    rubric = tmp_path / "rubric.j2"
    rubric.write_text("Rate {{ reply }} on {{ criteria | join(', ') }}; answer JSON.")
    verdict = json.dumps({"appropriateness": 3, "[/x]": 4, "empathy": 3})
    with FakeLLMServer(reply=lambda body: verdict if "Rate" in str(body) or "judge" in body["model"]
                       else "Answer: A") as srv:
        url = srv.openai_base_url
        common = ["--suite", "sample", "--bootstrap", "100", "--no-progress"]
        for name in ("openai/m[/x]", "openai/m[bold]x"):
            run = tmp_path / re.sub(r"\W", "_", name)
            proc = cli("run", "--model", name, "--base-url", url, "--judge", "rules", "--tasks", "ethics", *common,
                       "--out", run, cwd=tmp_path, env_extra=ENV)
            assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
            assert name in proc.stdout + proc.stderr and (run / "report.html").is_file()
        run = tmp_path / "judged"
        proc = cli("run", "--model", "baseline/counselor", "--judge", f"openai/j[/x]@{url}",
                   "--judge", f"openai/judge2@{url}", "--tasks", "crisis.escalation", *common, "--out", run,
                   cwd=tmp_path, env_extra=ENV)
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr
        assert "openai/j[/x]" in proc.stdout + proc.stderr
        one = tmp_path / "one"
        proc = cli("run", "--model", "baseline/counselor", "--judge", "openai/judge[/y]", "--judge-base-url", url,
                   "--tasks", "crisis.escalation", *common, "--out", one, cwd=tmp_path, env_extra=ENV)
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr
        proc = cli("score", one, "--judge", f"openai/j[/x]@{url}", "--out", tmp_path / "rescored", "--no-progress",
                   cwd=tmp_path, env_extra=ENV)
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr
        proc = cli("panel", one, tmp_path / "rescored", "--bootstrap", "100", cwd=tmp_path)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "openai/j[/x]" in proc.stdout and "openai/judge[/y]" in proc.stdout
        proc = cli("validate-judge", "--judge", "openai/j[/x]", "--judge-base-url", url, "--ratings", ratings,
                   "--rubric", rubric, "--scale", "1-5", "--bootstrap", "100", "--out", tmp_path / "vj",
                   "--no-progress", cwd=tmp_path, env_extra=ENV)
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr
        assert "[/x]" in proc.stdout and "openai/j[/x]" in proc.stdout + proc.stderr
