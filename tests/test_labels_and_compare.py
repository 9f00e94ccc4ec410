"""A model's label from the models file on every surface a person reads (issue 34, item 5): the terminal summary
and leaderboard, report.html (in Chromium), the rank table, `compare` in each format, the viewer (in
Chromium) and the gate's lines; without a label, the spec. And `compare`'s title, columns and sign saying
the same thing (item 6): a is the reference, every difference is b − a."""

import csv
import io
import json
import os
import re
import threading

import pytest

from conftest import run_cli
from trustmh.analysis.runs import load_run
from trustmh.testing.browser import chromium_tab

LABELS = {"baseline/counselor": "Counselor [warm] v2", "baseline/refuse": "Refuser"}
TASKS = "ethics,privacy.awareness_tier1,safety.jailbreak"


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """`trustmh run --models models.toml` of two labelled baselines and one without a label, on the sample suite;
    returns (run dir, the terminal's output)."""
    tmp = tmp_path_factory.mktemp("labels")
    listing = tmp / "models.toml"
    listing.write_text("".join(f'[[model]]\nspec = "{m}"\nlabel = "{v}"\n\n' for m, v in LABELS.items())
                       + '[[model]]\nspec = "baseline/random"\n', encoding="utf-8")
    done = run_cli("run", "--models", listing, "--suite", "sample", "--tasks", TASKS, "--out", tmp / "run",
                   "--no-progress", env={**os.environ, "COLUMNS": "160"})
    assert done.returncode == 0, done.stderr
    return tmp / "run", done.stdout


def names() -> dict[str, str]:
    return LABELS | {"baseline/random": "baseline/random"}


def test_the_terminal_names_models_by_label(labelled):
    run, text = labelled
    for spec, label in LABELS.items():
        assert f"{label} ({spec}): pillars" in text  # the spec once, in the model's own tables
    assert "baseline/random: pillars" in text  # no label: the spec
    board = text[text.index("leaderboard (0-100 trust"):].splitlines()
    rows = [line for line in board if re.match(r"\s+\d", line)]
    assert len(rows) == 3
    for label in names().values():
        assert sum(label in line for line in rows) == 1
    assert not any(spec in line for line in rows for spec in LABELS)


def test_the_gate_names_models_by_label(cli_here, labelled, capsys):
    run, _ = labelled
    code, out, _ = cli_here("gate", run, "--min", "ethics.reasoning=0.99", "--allow-partial", "--max-unscored", "1")
    assert code == 1, out
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert {line.split(": ")[0].removeprefix("FAIL ") for line in fails} <= set(names().values())
    assert any(line.startswith("FAIL Refuser: ethics.reasoning") for line in fails), fails


def test_compare_names_models_by_label_and_says_b_minus_a(cli_here, labelled, capsys):
    run, _ = labelled
    res = load_run(run).results.models
    # the terminal's table: the title names a (the first model, the reference) first, the columns name their model
    code, out, _ = cli_here("compare", run, "--bootstrap", "200")
    assert code == 0, out
    assert "a = Counselor [warm] v2 (reference), b = Refuser: b − a" in " ".join(out.split())
    table = out[out.index("a = Counselor"):out.index("a = Counselor", out.index("a = Counselor") + 1)]
    header = [line for line in table.splitlines() if "┃" in line]
    cols = [" ".join(parts) for parts in zip(*[[c.strip() for c in line.split("┃")[1:-1]] for line in header])]
    assert [c.strip() for c in cols[1:4]] == ["a Counselor [warm] v2", "b Refuser", "b − a"]
    overall = next(line for line in table.splitlines() if line.startswith("│ overall"))
    a, b, diff = (float(x) for x in [c.strip() for c in overall.split("│")[2:5]])
    assert a == pytest.approx(res["baseline/counselor"].trust_score, abs=1e-3)
    assert b == pytest.approx(res["baseline/refuse"].trust_score, abs=1e-3)
    assert diff == pytest.approx(b - a, abs=0.01) and diff < 0  # the refuser is worse: b − a is negative (values to 0.01)
    # csv and json: a is the reference's label, value_a its value, diff = value_b − value_a on every row
    code, out, _ = cli_here("compare", run, "--format", "csv", "--bootstrap", "200")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {(r["a"], r["b"]) for r in rows} == {("Counselor [warm] v2", "Refuser"),
                                                ("Counselor [warm] v2", "baseline/random")}
    for r in rows:
        if r["diff"] and r["kind"] == "overall":
            assert float(r["diff"]) == pytest.approx(float(r["value_b"]) - float(r["value_a"]), abs=0.01)
    code, out, _ = cli_here("compare", run, "--format", "json", "--bootstrap", "200")
    doc = json.loads(out)
    assert {r["a"] for r in doc["rows"]} == {"Counselor [warm] v2"}
    # markdown: the heading and the header row
    code, out, _ = cli_here("compare", run, "--format", "markdown", "--bootstrap", "200")
    out = re.sub(r"\\(.)", r"\1", out)  # as Markdown renders it: a name's characters are escaped (escaping.py)
    assert "### a = Counselor [warm] v2 (reference), b = Refuser: b − a" in out
    assert "| name | a: Counselor [warm] v2 | b: Refuser | b − a |" in out


def test_report_and_viewer_name_models_by_label_in_chromium(cli_here, chromium, labelled, tmp_path, capsys):
    from trustmh.report.viewer import make_server
    run, _ = labelled
    code, _, err = cli_here("compare", run, "--html", tmp_path / "cmp.html", "--bootstrap", "200")
    assert code == 0, err
    server = make_server([load_run(run)], 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with chromium_tab(chromium) as tab:
            page = tab.page
            page.goto((tmp_path / "cmp.html").as_uri())
            board = [x.strip() for x in page.locator("table.board td.model").all_inner_texts()]
            assert sorted(x.splitlines()[0].strip() for x in board) == sorted(names().values())
            heads = page.locator("table.paper-ranks th.model-col").all_inner_texts()
            assert sorted(heads) == sorted(names().values())
            assert page.locator("table.paper-ranks th.model-col[title='Refuser (baseline/refuse)']").count() == 1
            titles = page.locator("h3.cmp-title").all_inner_texts()
            assert titles[0] == "a = Counselor [warm] v2 (reference), b = Refuser: b − a"
            first = page.locator("table.cmp").first.locator("th").all_inner_texts()
            assert first[1:4] == ["a: Counselor [warm] v2", "b: Refuser", "b − a"]
            page.goto(server.url)  # with the session's token
            page.locator("body[data-ready='1']").wait_for(state="attached")
            options = page.locator("#f-model option").all_inner_texts()
            assert sorted(options[1:]) == sorted(names().values())
            shown = set(page.locator("#v-rows tr.sample td:nth-child(3)").all_inner_texts())
            assert shown and shown <= set(names().values())
            assert tab.errors == []
    finally:
        server.shutdown()
        server.server_close()
