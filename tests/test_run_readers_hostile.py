"""Readers of run folders (report, compare, gate, panel, view) against crafted samples.jsonl lines (issue 38,
L1): each line is type-checked and what is skipped is counted and shown; a reader that rests a verdict on the
lines (the gate) refuses a file with skipped lines. Before: `RecursionError` at `view`'s start on a
100,000-deep line, `TypeError: unhashable type` for a model or task that is a list, and `compare` failing
with `'<' not supported` on a sample missing its group label or holding a number there."""

from __future__ import annotations

import json

import pytest

from conftest import run_quiet, run_spec
from test_compare_gate import crafted
from trustmh.analysis.runs import load_run, read_rows, sample_problem


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("readers") / "run"
    run_quiet(run_spec(models=["baseline/counselor", "baseline/refuse"], suite="sample",
                       tasks="ethics,fairness", n_boot=0), run)
    return run


def _edit(n_lines: int, change):
    """samples.jsonl with `change(record)` applied to its first n_lines lines of a grouped task."""
    def edit(text: str) -> str:
        out, done = [], 0
        for line in text.splitlines():
            rec = json.loads(line)
            if done < n_lines and rec["model"] == "baseline/counselor" and rec.get("labels"):
                rec = change(rec)
                done += 1
            out.append(rec if isinstance(rec, str) else json.dumps(rec))
        return "\n".join(out) + "\n"
    return edit


def _label_missing(rec):
    rec["labels"].pop(sorted(rec["labels"])[0])
    return rec


def _label_number(rec):
    rec["labels"][sorted(rec["labels"])[0]] = 7
    return rec


CASES = {
    "model-list": (_edit(1, lambda r: dict(r, model=["baseline/counselor"])), "field 'model' must be a text"),
    "task-list": (_edit(1, lambda r: dict(r, task=["ethics.reasoning"])), "field 'task' must be a text"),
    "label-number": (_edit(2, _label_number), "labels must be texts"),
    "label-missing": (_edit(2, _label_missing), "labels missing"),
    "deep": (lambda t: t + "[" * 100_000 + "]" * 100_000 + "\n", "unreadable JSON"),
    "deep-900": (_edit(1, lambda r: dict(r, parsed=json.loads("[" * 900 + "]" * 900))), "nested deeper than"),
    "value-nan": (lambda t: t.replace('"correct": 1.0', '"correct": NaN', 1), "values must be finite numbers"),
    "value-1e309": (lambda t: t.replace('"correct": 1.0', '"correct": 1e309', 1), "values must be finite numbers"),
    "value-400-digits": (lambda t: t.replace('"correct": 1.0', '"correct": 1' + "0" * 400, 1),
                         "values must be finite numbers"),
    "judge-text": (_edit(1, lambda r: dict(r, judge="yes")), "field 'judge' must be a JSON object"),
    "notes-int": (_edit(1, lambda r: dict(r, notes=3)), "field 'notes' must be a JSON array"),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_report_compare_and_panel_skip_and_count_a_crafted_line_the_gate_refuses(cli_here, base_run, tmp_path, case, capsys):
    edit, reason = CASES[case]
    run = crafted(base_run, tmp_path / case, samples=edit)
    for args in (("report", run, "-o", tmp_path / "r.html"), ("compare", run, "--bootstrap", "100"),
                 ("compare", run, "--format", "json", "--bootstrap", "100")):
        code, out, err = cli_here(*args)
        assert code == 0, (args, err[-2000:])
        text = " ".join((out + err).split())
        assert "samples.jsonl" in text and "skipped" in text and reason in text, (args, text[-600:])
    code, out, err = cli_here("gate", run, "--baseline", base_run, "--allow-partial", "--bootstrap", "100")
    assert code == 2 and reason in " ".join(err.split()), (code, err[-600:])
    loaded = load_run(run)
    read_rows(loaded)
    assert sum(loaded.skipped.values()) >= 1 and any(reason in k for k in loaded.skipped)


def test_sample_problem_types_every_field_a_reader_walks_into():
    good = {"model": "m", "task": "t", "item_id": "1", "variant": "", "values": {"x": 1.0}, "labels": {"g": "a"},
            "judge": {"text": "ok", "reason": None}, "notes": ["n"], "messages": [{"role": "user", "content": "q"}],
            "unscored": {"y": "why"}, "error": None, "response": "r", "cluster": "1"}
    assert sample_problem(good) is None
    assert sample_problem(dict(good, item_id=3)) is None
    for bad, why in ((dict(good, item_id=[1]), "item_id"), (dict(good, variant=3), "variant"),
                     (dict(good, values={"x": True}), "finite numbers"), (dict(good, values={"x": "1"}), "finite"),
                     (dict(good, response=["r"]), "response"), (dict(good, messages=[3]), "messages"),
                     (dict(good, judge={"text": 3}), "judge"), (dict(good, unscored={"y": 3}), "unscored"),
                     (dict(good, error=3), "error"), (dict(good, cluster=[1]), "cluster"),
                     (dict(good, notes=[{"a": 1}]), "notes"), ([1, 2], "not a sample record")):
        assert why in (sample_problem(bad) or ""), (bad, sample_problem(bad))


@pytest.mark.parametrize("levels", [62, 63, 64, 65, 200])
@pytest.mark.parametrize("braces_in_text", [0, 100])
def test_depth_is_judged_from_the_text_as_from_a_walk(levels, braces_in_text):
    """parse_sample walks a record for its depth only when its text has more opening brackets than MAX_DEPTH;
    it must find the same as a walk of every record, at the limit and with brackets inside its texts."""
    from trustmh.analysis.runs import MAX_DEPTH, parse_sample
    from trustmh.data.loaders import nested_deeper_than
    rec = {"model": "m", "task": "t", "item_id": "1", "values": {"correct": 1.0},
           "response": "{[" * braces_in_text, "parsed": json.loads("[" * levels + "]" * levels)}
    line = json.dumps(rec)
    walked = "nested deeper than" in (sample_problem(json.loads(line)) or "")
    assert walked == nested_deeper_than(rec, MAX_DEPTH) == (levels + 1 > MAX_DEPTH)
    assert ("nested deeper than" in (parse_sample(line)[1] or "")) == walked
    assert ("nested deeper than" in (parse_sample(line.encode())[1] or "")) == walked
