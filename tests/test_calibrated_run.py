"""Calibrated values of a real run: a task's judge rates every reply one point too high; clinicians rate a
uniform draw of the replies (annotation.json, as `trustmh annotate` writes it); `trustmh score` then gives
every judged value a calibrated block, the same number the estimator gives on the same items, that the
report shows beside the judge's value and that `gate --calibrated` and the rank table use."""

import importlib.util
import json
import math

import numpy as np
import pytest

from conftest import run_cli, run_quiet, run_spec
from trustmh.analysis.runs import load_run
from trustmh.scoring.metrics import derived_seed
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.validation import annotate
from trustmh.validation.calibration import MIN_RATED, calibrated_mean

N = 150
TASK_ID = "testcal.warmth"
TASK_SRC = '''
import json
from pathlib import Path
from trustmh.scoring.metrics import mean, pearson
from trustmh.tasks import TASKS, MetricSpec, Rubric, Task, register
from trustmh.types import Item, Score
from trustmh.validation.rating_forms import Criterion, RatingForm


class Warmth(Task):
    id = "testcal.warmth"
    pillar = "ethics"
    title = "Warmth of a reply (test task)"
    dataset = "test"
    files = ()
    metric = MetricSpec("warmth", True, 0.0, 5.0, "mean warmth rating")
    primary_value = "warmth"
    rubrics = (Rubric("judge", (str(Path(__file__).parent / "warmth.j2"),)),)
    rating_form = RatingForm("How warm is the reply?", "judge",
                             (Criterion("warmth", "Warmth, 0-5", tuple((v, "") for v in range(6))),),
                             lambda a: json.dumps(a), {"warmth": "warmth", "warmth_x_r": None})

    def load(self, data, ctx):
        return [Item(f"i{n:03d}", {"q": f"question {n}", "x": n % 7}) for n in range(N_ITEMS)]

    def prompt(self, item, ctx):
        return [{"role": "user", "content": item.input["q"]}]

    def judge_messages(self, sample, reply, ctx):
        return [{"role": "user", "content": "RATE WARMTH of: " + reply}]

    def cluster(self, sample):
        return sample.item.id[:3]  # ten items to a cluster, as a dialogue's turns

    def score(self, sample, reply, judged, ctx):
        sc = Score(values={"x": float(sample.item.input["x"])})
        if judged.text is None:
            sc.unscored["warmth"] = judged.reason
            return sc
        sc.values["warmth"] = float(json.loads(judged.text)["warmth"])
        return sc

    def aggregate(self, table, ctx):
        return {"warmth": mean(table.col("warmth")), "warmth_x_r": pearson(table.col("x"), table.col("warmth"))}


if "testcal.warmth" not in TASKS:
    register(Warmth)
'''.replace("N_ITEMS", str(N))


def human_warmth(n: int, model: str = "m") -> int:
    """The clinicians' rating: model w is a point warmer than m on every second item."""
    return (n * 7) % 5 + (model == "w" and n % 2 == 0)


def judge_warmth(n: int, model: str = "m") -> int:
    """The judge: one point too warm on m's replies, on w's only every third: it finds w the colder."""
    return human_warmth(n, model) + (model == "m" or n % 3 == 0)


def rated_value(n: int, model: str = "m") -> float:
    """An item's human value: dr-a's rating, averaged with dr-b's (a point lower) on every fourth item."""
    h = human_warmth(n, model)
    return h if n % 4 else (h + max(0, h - 1)) / 2


def reply(body):
    text = body["messages"][-1]["content"]
    if text.startswith("RATE WARMTH"):
        n, model = text.split("reply to question ")[1].split(" from ")
        return json.dumps({"warmth": judge_warmth(int(n), model)})
    return f"reply to {text} from {body['model']}"


@pytest.fixture(scope="module")
def rated_run(tmp_path_factory):
    from trustmh.tasks import TASKS
    tmp = tmp_path_factory.mktemp("cal")
    (tmp / "warmth.j2").write_text("unused")
    path = tmp / "warmth_task.py"
    path.write_text(TASK_SRC)
    spec = importlib.util.spec_from_file_location("warmth_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with FakeLLMServer(reply=reply) as srv:
        run_quiet(run_spec(models=["openai/m", "openai/w"], judge="openai/j", base_url=srv.openai_base_url,
                           judge_base_url=srv.openai_base_url, tasks=TASK_ID), tmp / "run")
    run = load_run(tmp / "run")
    ann = annotate.open_annotation(run, 40, "uniform", 3)
    for u in ann.units:  # two clinicians; the second rates every fourth item, one point lower
        n, model = int(u["item_id"][1:]), u["model"].split("/")[1]
        ann.rate(u["id"], "dr-a", {"warmth": human_warmth(n, model)})
        if n % 4 == 0:
            ann.rate(u["id"], "dr-b", {"warmth": max(0, human_warmth(n, model) - 1)})
    ann.save()
    got = run_cli("score", tmp / "run", "--no-progress")  # the cli fixture is per test; this fixture per module
    assert got.returncode == 0, got.stderr
    # 2 models x (warmth, warmth_x_r), all with a value
    assert "calibrated: 4 of 4 judged values anchored to 80 rated items (dr-a, dr-b)" in got.stdout
    yield tmp / "run", ann
    TASKS.pop(TASK_ID, None)


def test_score_adds_the_calibrated_value_the_estimator_gives(rated_run):
    run_dir, ann = rated_run
    res = json.loads((run_dir / "results.json").read_text())
    tr = res["models"]["openai/m"]["tasks"][TASK_ID]
    cal = tr["calibrated"]
    assert tr["metrics"]["warmth"]["calibrated"] == cal
    # the same estimate, assembled by hand from what the items are
    rated = {int(u["item_id"][1:]) for u in ann.units}
    assert rated == {int(u["item_id"][1:]) for u in ann.units if u["model"] == "openai/w"}  # the same items
    ns = np.arange(N)
    f = np.array([judge_warmth(n) for n in ns], float)
    y = np.array([rated_value(n) for n in ns])
    mask = np.isin(ns, sorted(rated))
    clusters = np.array([f"i{n:03d}"[:3] for n in ns], dtype=object)
    # each rater's values: the interval resamples the two raters with the items (a two-way bootstrap)
    per_rater = np.array([[human_warmth(n) if m else np.nan,
                           max(0, human_warmth(n) - 1) if m and n % 4 == 0 else np.nan] for n, m in zip(ns, mask)])
    want = calibrated_mean(f, y, mask, clusters, seed=derived_seed(0, f"calibrated|openai/m|{TASK_ID}|warmth"),
                           n_boot=res["bootstrap"]["n_boot"], min_rated=MIN_RATED, per_rater=per_rater)
    assert cal["value"] == pytest.approx(want.value, abs=1e-12) and cal["ci"] == pytest.approx(list(want.ci), abs=1e-12)
    assert cal["n_raters"] == 2 and "two-way bootstrap" in cal["interval"]
    assert cal["lam"] == pytest.approx(want.lam) and cal["effective_n"] == pytest.approx(want.effective_n)
    assert cal["n_human"] == 40 and cal["n_judge_only"] == N - 40 and cal["method"] == "PPI++ (mean)"
    assert cal["design"] == "uniform draw, seed 3"
    # the judge is one point high; the calibrated value is not, and its interval holds the clinicians' mean
    truth = y.mean()
    assert tr["value"] == pytest.approx(f.mean()) and not (tr["ci"][0] <= truth <= tr["ci"][1])
    assert cal["ci"][0] <= truth <= cal["ci"][1]
    # a metric that is not a mean: the prediction-powered bootstrap
    r = tr["metrics"]["warmth_x_r"]["calibrated"]
    assert r["method"] == "prediction-powered bootstrap" and r["value"] is not None and r["ci"][0] < r["value"] < r["ci"][1]
    assert res["calibration"]["raters"] == ["dr-a", "dr-b"] and res["calibration"]["n_rated"] == 80


def test_compare_gives_the_paired_calibrated_difference(rated_run):
    """The judge sees no difference between the models; the clinicians see w a point warmer."""
    from trustmh.analysis.compare import compare
    from trustmh.analysis.runs import entries, read_rows
    run_dir, ann = rated_run
    run = load_run(run_dir)
    a, b = entries([run])
    rows = read_rows(run)
    d = compare(a, b, rows, rows, n_boot=300).get(TASK_ID)
    assert d.diff < 0 and d.ci[1] < 0  # the judge finds w colder
    cal = d.calibrated
    rated = sorted({int(u["item_id"][1:]) for u in ann.units})
    both = np.array([rated_value(n, "w") - rated_value(n, "m") for n in rated])
    assert cal.n_human == 40 and cal.human_only == pytest.approx(both.mean(), abs=1e-12)
    assert cal.value is not None and cal.ci[0] > 0  # the clinicians find it warmer, and so does the estimate
    assert cal.n_raters == 2  # each rater's own difference: the raters resampled with the items
    truth = np.mean([rated_value(n, "w") - rated_value(n, "m") for n in range(N)])
    assert cal.ci[0] <= truth <= cal.ci[1]
    assert f"calibrated b - a {cal.value:.3f}" in d.note


def test_report_gate_and_rank_table_show_the_same_numbers(rated_run, tmp_path, cli):
    run_dir, _ = rated_run
    res = json.loads((run_dir / "results.json").read_text())
    tr = res["models"]["openai/m"]["tasks"][TASK_ID]
    cal, judge = tr["calibrated"], tr["value"]
    html = (run_dir / "report.html").read_text()
    section = html[html.index('<section id="calibrated">'):]
    section = section[:section.index("</section>")]
    assert f"{judge:.3f} [{tr['ci'][0]:.3f}, {tr['ci'][1]:.3f}]" in section
    assert f"<b>{cal['value']:.3f} [{cal['ci'][0]:.3f}, {cal['ci'][1]:.3f}]</b>" in section
    assert "the judge rates this higher than clinicians do" in section
    # the gate reads the calibrated value with --calibrated, the judge's without
    between = (judge + cal["value"]) / 2
    plain = cli("gate", run_dir, "--min", f"{TASK_ID}={between}", merged=True)
    calibrated = cli("gate", run_dir, "--min", f"{TASK_ID}={between}", "--calibrated")
    assert "openai/m" not in plain.stdout, plain.stdout
    assert calibrated.returncode == 1, calibrated.stderr
    assert f"openai/m: {TASK_ID} (calibrated) = {cal['value']:.4g} <" in calibrated.stdout, calibrated.stdout
    table = cli("report", run_dir, "--format", "csv", "--calibrated")
    assert table.returncode == 0, table.stderr
    # the CSV says on every row what its values are (issue 47: only the Markdown and LaTeX rules said it)
    import csv
    import io
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    assert rows and all(r["values"].startswith("calibrated") for r in rows)
    plain_csv = cli("report", run_dir, "--format", "csv")
    assert "values" not in next(csv.reader(io.StringIO(plain_csv.stdout)))


def test_invalid_draws_and_too_few_ratings_give_reasons(rated_run, tmp_path):
    import shutil
    from trustmh.validation.calibrated import calibrate, with_ratings
    run_dir, ann = rated_run
    run = load_run(run_dir)
    few = annotate.read_annotation(run_dir)
    few.ratings = few.ratings[:5]
    got = calibrate(run, few, seed=0, n_boot=100).models["openai/m"].tasks[TASK_ID].calibrated
    assert got.value is None and "too few human ratings" in got.reason
    moved = annotate.read_annotation(run_dir)
    moved.design["strata"]["all"]["size"] += 1  # drawn from another set of judged samples than the run's
    got = calibrate(run, moved, seed=0, n_boot=100).models["openai/m"].tasks[TASK_ID].calibrated
    assert got.value is None and "draw again" in got.reason
    forged = annotate.read_annotation(run_dir)
    for u in forged.units[:20]:  # probabilities that are not the draw's: those items' ratings are left out
        u["pi"] = 0.5
    out = calibrate(run, forged, seed=0, n_boot=100)
    assert out.calibration["ratings_left_out"] == {"the item's inclusion probability is not the one its draw gives":
                                                   sum(r["unit"] in {u["id"] for u in forged.units[:20]}
                                                       for r in forged.ratings)}
    # a draw stratified by the judge's verdict: unequal probabilities, weighted back; the primary value is the
    # post-stratified mean (the judge's value is constant within each stratum), a non-mean gets no value
    copy = tmp_path / "strat"
    shutil.copytree(run_dir, copy)
    (copy / "annotation.json").unlink()
    strat_run = load_run(copy)
    strat = annotate.open_annotation(strat_run, 44, "stratified", 3)  # 4 or 5 of each of the 10 strata of 30
    for u in strat.units:
        strat.rate(u["id"], "dr-a", {"warmth": human_warmth(int(u["item_id"][1:]), u["model"].split("/")[1])})
    res = calibrate(strat_run, strat, seed=0, n_boot=100)
    unequal = 0
    for model in ("openai/m", "openai/w"):
        out = res.models[model].tasks[TASK_ID]
        pis = {u["pi"] for u in strat.units if u["model"] == model}
        unequal += len(pis) > 1
        assert out.calibrated.value is not None and ("weighted 1/pi" in out.calibrated.design) == (len(pis) > 1)
        assert out.calibrated.method.startswith("post-stratified mean") and out.calibrated.lam is None
        assert out.calibrated.effective_n is None
        # the clinicians give one value to every reply the judge gave one value (on m): no stratum varies, and
        # the interval is the strata's exact bounds, never [2, 2]
        assert out.calibrated.ci[0] < out.calibrated.value < out.calibrated.ci[1]
        if len(pis) > 1:
            r = out.metrics["warmth_x_r"].calibrated
            assert r.value is None and "unequal" in r.reason
    assert unequal and "Clopper-Pearson" in res.models["openai/m"].tasks[TASK_ID].calibrated.interval
    # ratings given from elsewhere: a copy of the annotation file
    shutil.copy(run_dir / "annotation.json", tmp_path / "ratings.json")
    again = with_ratings(run_dir, run.results, tmp_path / "ratings.json")
    assert again.models["openai/m"].tasks[TASK_ID].calibrated.value is not None
    assert math.isfinite(again.models["openai/m"].tasks[TASK_ID].calibrated.lam)
