"""A rating plan that reaches a number (issue 47 item 4): `annotate --n` over four tasks of unequal size gives
each task the rated items a calibrated value needs, or says at draw time (terminal and page) which will not;
two raters who rate everything then get a calibrated value for every other task; `score --ratings` reads
`annotate --export`'s output; every calibrated view says it is calibrated and why a value is missing."""

import hashlib
import importlib.util
import json
import shutil
import threading

import pytest
from playwright.sync_api import expect

from conftest import run_quiet, run_spec
from trustmh.analysis.runs import load_run
from trustmh.testing.browser import chromium_tab
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.validation import annotate
from trustmh.validation.calibration import MIN_RATED

SIZES = {"plan.big": 60, "plan.mid": 30, "plan.small": 15, "plan.tiny": 8}
TASK_SRC = '''
import json
from pathlib import Path
from trustmh.scoring.metrics import mean
from trustmh.tasks import TASKS, MetricSpec, Rubric, Task, register
from trustmh.types import Item, Score
from trustmh.validation.rating_forms import Criterion, RatingForm


def make(task_id, n_items):
    class Warmth(Task):
        id = task_id
        pillar = "ethics"
        title = "Warmth (test task " + task_id + ")"
        dataset = "test"
        files = ()
        metric = MetricSpec("warmth", True, 0.0, 5.0, "mean warmth rating")
        primary_value = "warmth"
        rubrics = (Rubric("judge", (str(Path(__file__).parent / "warmth.j2"),)),)
        rating_form = RatingForm("How warm is the reply?", "judge",
                                 (Criterion("warmth", "Warmth, 0-5", tuple((v, "") for v in range(6))),),
                                 lambda a: json.dumps(a), {"warmth": "warmth"})

        def load(self, data, ctx):
            return [Item(f"{task_id}-{n:03d}", {"q": f"{task_id} question {n}"}) for n in range(n_items)]

        def prompt(self, item, ctx):
            return [{"role": "user", "content": item.input["q"]}]

        def judge_messages(self, sample, reply, ctx):
            return [{"role": "user", "content": "RATE WARMTH of: " + reply}]

        def score(self, sample, reply, judged, ctx):
            sc = Score(values={})
            if judged.text is None:
                sc.unscored["warmth"] = judged.reason
                return sc
            sc.values["warmth"] = float(json.loads(judged.text)["warmth"])
            return sc

        def aggregate(self, table, ctx):
            return {"warmth": mean(table.col("warmth"))}
    return Warmth


for task_id, n in SIZES.items():
    if task_id not in TASKS:
        register(make(task_id, n))
'''


def warmth(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:6], 16) % 6


def reply(body):
    text = body["messages"][-1]["content"]
    if text.startswith("RATE WARMTH"):
        return json.dumps({"warmth": min(5, warmth(text.split(" of: ", 1)[1]) + 1)})  # a point warm
    return f"reply to {text}"


@pytest.fixture(scope="module")
def four_tasks(tmp_path_factory):
    from trustmh.tasks import TASKS
    tmp = tmp_path_factory.mktemp("plan")
    (tmp / "warmth.j2").write_text("unused")
    path = tmp / "plan_tasks.py"
    path.write_text(f"SIZES = {SIZES!r}\n" + TASK_SRC)
    spec = importlib.util.spec_from_file_location("plan_tasks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with FakeLLMServer(reply=reply) as srv:
        run_quiet(run_spec(models=["openai/m"], judge="openai/j", base_url=srv.openai_base_url,
                           judge_base_url=srv.openai_base_url, tasks=",".join(SIZES)), tmp / "run")
    yield tmp / "run"
    for t in SIZES:
        TASKS.pop(t, None)


def fresh(run_dir, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    (out / "annotation.json").unlink(missing_ok=True)
    return out


def rate_all(run_dir):
    """Two raters rate every drawn item: the clinicians' warmth, dr-b a point lower on every third."""
    ann = annotate.read_annotation(run_dir)
    reply_of = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        rec = json.loads(line)
        reply_of[(rec["task"], rec["item_id"])] = rec["response"]
    for k, u in enumerate(ann.units):
        w = warmth(reply_of[(u["task"], u["item_id"])])
        ann.rate(u["id"], "dr-a", {"warmth": w})
        ann.rate(u["id"], "dr-b", {"warmth": max(0, w - (k % 3 == 0))})
    ann.save()


@pytest.mark.parametrize("n", [40, 100])
def test_each_task_drawn_reaches_a_calibrated_value_or_is_named_at_the_start(four_tasks, tmp_path, cli, n):
    run_dir = fresh(four_tasks, tmp_path)
    got = cli("annotate", run_dir, "--n", n, "--export", tmp_path / "none.csv")
    assert got.returncode == 0, got.stderr
    ann = annotate.read_annotation(run_dir)
    per_task = {t: sum(u["task"] == t for u in ann.units) for t in SIZES}
    # 40 over 60/30/15/8 items drawn in proportion gave about 21/11/5/3: two tasks short, said nowhere
    assert all(per_task[t] >= MIN_RATED for t in ("plan.big", "plan.mid", "plan.small")), per_task
    assert sum(per_task.values()) == min(n, sum(SIZES.values()))
    # the tiny task (8 items) cannot reach one: said when the draw is made
    assert "note: plan.tiny of run will not reach a calibrated value: the task has 8 items" in got.stderr
    assert dict(annotate.plan_notes(ann)).keys() == {"plan.tiny"}
    rate_all(run_dir)
    scored = cli("score", run_dir, "--no-progress")
    assert scored.returncode == 0, scored.stderr
    res = json.loads((run_dir / "results.json").read_text())
    for t in SIZES:
        cal = res["models"]["openai/m"]["tasks"][t]["calibrated"]
        if t == "plan.tiny":
            assert cal["value"] is None and "too few human ratings: 8" in cal["reason"]
        else:
            assert cal["value"] is not None and cal["ci"][0] <= cal["value"] <= cal["ci"][1], (t, cal)
            assert cal["n_raters"] == 2


def test_score_reads_the_export_and_every_calibrated_view_says_so(four_tasks, tmp_path, cli):
    run_dir = fresh(four_tasks, tmp_path)
    annotate.open_annotation(load_run(run_dir), 40, "uniform", 0)
    rate_all(run_dir)
    for suffix in ("csv", "jsonl"):
        export = tmp_path / f"rated.{suffix}"
        assert cli("annotate", run_dir, "--export", export).returncode == 0
        got = cli("score", run_dir, "--ratings", export, "--no-progress")
        assert got.returncode == 0, got.stderr
        assert "3 of 4 judged values anchored to 40 rated items (dr-a, dr-b)" in got.stdout, got.stdout
        res = json.loads((run_dir / "results.json").read_text())
        assert res["calibration"]["file"] == str(export) and res["calibration"]["n_ratings"] == 80
    md = cli("report", run_dir, "--format", "markdown", "--calibrated")
    assert md.returncode == 0, md.stderr
    assert "calibrated" in md.stdout.lower() and "too few human ratings: 8" in md.stdout
    gate = cli("gate", run_dir, "--calibrated", "--min", "plan.big=0", "--min", "plan.tiny=0", "--format", "text")
    lines = [x for x in gate.stdout.splitlines() if "plan." in x]
    assert lines and all("calibrated" in x for x in lines), (gate.stdout, gate.stderr)
    assert any("plan.tiny" in x and "too few human ratings: 8" in x for x in lines), gate.stdout


def test_the_page_shows_progress_per_set_and_what_will_not_reach_a_value(chromium, four_tasks, tmp_path):
    run_dir = fresh(four_tasks, tmp_path)
    run = load_run(run_dir)
    ann = annotate.open_annotation(run, 40, "uniform", 0)
    server = annotate.make_server([run], [ann], 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with chromium_tab(chromium) as tab:
            page = tab.page
            page.goto(annotate.url(server))
            plan = page.locator("#a-plan")
            # before anyone starts: four sets, the short one named with its reason; no task id on the page
            expect(plan).to_contain_text("Will not reach a calibrated value: the task has 8 items")
            assert plan.locator("li").count() == 4 and "plan." not in page.content()
            assert plan.locator("li", has_text="0 of 10 items rated").count() == 4
            page.fill("#a-rater", "dr-a")
            page.click("#a-begin")
            page.wait_for_selector("#a-item:not([hidden])")
            page.check('input[name="c-warmth"][value="3"]')
            page.click("#a-save")
            expect(plan.locator("li", has_text="1 of 10 items rated")).to_have_count(1)
    finally:
        server.shutdown()
        server.server_close()


def test_an_n_too_small_for_every_task_is_said_with_what_to_do(four_tasks, tmp_path):
    run_dir = fresh(four_tasks, tmp_path)
    ann = annotate.open_annotation(load_run(run_dir), 20, "uniform", 0)
    notes = dict(annotate.plan_notes(ann))
    assert notes["plan.tiny"].startswith("the task has 8 items")
    for t in ("plan.big", "plan.mid", "plan.small"):
        assert notes[t] == "5 items drawn, fewer than the 10 a calibrated value needs: draw again with a larger --n"
