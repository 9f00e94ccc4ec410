"""Judge panels inside one run (several --judge): three loopback judges with known verdicts judge one run.
The panel's value is checked against the mean / strict majority computed here from three one-judge runs of
the same replies (each judge alone, the ordinary path), ties and too few verdicts as judge failures with
their reasons, alpha against the krippendorff package; a fourth judge added to the finished run costs
exactly its own calls, and swapping the panel back costs none."""

import collections
import json

import numpy as np
import pytest

from conftest import assert_user_error, run_spec
from trustmh.engine import Limits, load_spec, run
from trustmh.engine.judge._roles import set_judges
from trustmh.files import copy_run
from trustmh.testing.fake_server import FakeLLMServer
from test_panel import verdict  # the three judges' known verdicts, shared with the panel-of-runs tests

JUDGES = ("openai/j1", "openai/j2", "openai/j3", "openai/j4")
TASKS = "crisis.escalation,safety.jailbreak,safety.over_refusal"
COLUMNS = {"crisis.escalation": ("rating", "score"), "safety.jailbreak": ("refused", "label"),
           "safety.over_refusal": ("refused", "label")}


def counting(calls):
    """A fake judge server's reply function: each judge's known verdict (test_panel.verdict), counted."""
    def reply(body):
        calls[body["model"]] += 1
        return verdict(body["model"], body["messages"][-1]["content"])
    return reply


def lines(run_dir, task):
    return [rec for rec in map(json.loads, (run_dir / "samples.jsonl").read_text().splitlines()) if rec["task"] == task]


def values(run_dir, task, column):
    return {(r["item_id"], r["variant"]): r["values"].get(column) for r in lines(run_dir, task)}


def rescore(run_dir, judges, url, out=None):
    """`trustmh score RUN --judge ... [--out]` from Python: the tested model is never called."""
    spec = load_spec(run_dir)
    set_judges(spec, [(j, url) for j in judges])
    target = copy_run(run_dir, out) if out is not None else run_dir
    return run(spec, target, limits=Limits(max_connections=4), generate=False)[1]


@pytest.fixture(scope="module")
def panel_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("panel_run")
    calls = collections.Counter()
    with FakeLLMServer(reply=counting(calls)) as srv:
        url = srv.openai_base_url
        spec = run_spec(models=["baseline/counselor"], tasks=TASKS, suite="sample", n_boot=200)
        set_judges(spec, [(j, url) for j in JUDGES[:3]])
        _, results, _ = run(spec, root / "panel", limits=Limits(max_connections=4))
        first = dict(calls)
        alone = {}
        for j in JUDGES[:3]:  # each judge alone on the same replies: the stored verdicts, no new call
            rescore(root / "panel", [j], url, root / j[-2:])
            alone[j] = root / j[-2:]
        after_alone = dict(calls)
        four = rescore(root / "panel", JUDGES, url, root / "four")
        after_four = dict(calls)
        back = rescore(root / "four", JUDGES[:3], url, root / "back")
        after_back = dict(calls)
    return root, results, alone, first, after_alone, after_four, after_back, four, back


def test_every_judgement_is_asked_of_every_judge_once(panel_run):
    _, _, _, first, after_alone, after_four, after_back, _, _ = panel_run
    assert first["j1"] == first["j2"] == first["j3"] > 0 and "j4" not in first
    assert after_alone == first  # each judge alone reads its stored verdicts
    assert {m: n - first.get(m, 0) for m, n in after_four.items()} == {"j1": 0, "j2": 0, "j3": 0, "j4": first["j1"]}
    assert after_back == after_four  # swapping the panel back costs nothing


def expected(given, kind):
    usable = [v for v in given if v is not None]
    if 2 * len(usable) <= len(given):
        return None, f"only {len(usable)} of {len(given)} judges gave a usable verdict"
    if kind == "score":
        return sum(usable) / len(usable), None
    ones = sum(usable)
    if 2 * ones > len(usable):
        return 1.0, None
    if 2 * (len(usable) - ones) > len(usable):
        return 0.0, None
    return None, "no strict majority among the judges (0, 1 tied)"


def test_panel_value_is_the_mean_or_majority_of_the_judges_alone(panel_run):
    root, results, alone, *_ = panel_run
    krippendorff = pytest.importorskip("krippendorff")
    tasks = results.models["baseline/counselor"].tasks
    n_failed = collections.Counter()
    for task, (column, kind) in COLUMNS.items():
        by_judge = [values(alone[j], task, column) for j in JUDGES[:3]]
        keys = list(by_judge[0])
        combined = {k: expected([b[k] for b in by_judge], kind) for k in keys}
        t = tasks[task]
        panel_lines = {(r["item_id"], r["variant"]): r for r in lines(root / "panel", task)}
        for k, (v, why) in combined.items():
            assert panel_lines[k]["values"].get(column) == (pytest.approx(v) if v is not None else None)
            if why is not None:
                assert panel_lines[k]["judge_failed"] == f"judge panel: {why}"
                n_failed[why] += 1
        usable = [v for v, _ in combined.values() if v is not None]
        assert t.n == len(usable)
        assert t.value == pytest.approx(np.mean(usable), abs=1e-12)
        failures = collections.Counter(f"judge panel: {why}" for _, why in combined.values() if why is not None)
        assert t.judge_failed_reasons == dict(failures) and t.n_judge_failed == sum(failures.values())
        # each judge's own value is what that judge alone gives
        own = {j: json.loads((alone[j] / "results.json").read_text())["models"]["baseline/counselor"]["tasks"][task]
               for j in JUDGES[:3]}
        assert t.panel.judges == list(JUDGES[:3])
        for j in JUDGES[:3]:
            assert t.panel.judge_values[j].value == pytest.approx(own[j]["value"])
            assert t.panel.judge_values[j].n == own[j]["n"]
        matrix = np.array([[np.nan if b[k] is None else b[k] for k in keys] for b in by_judge], dtype=float)
        level = "nominal" if kind == "label" else "interval"
        agreement = t.panel.agreement[column]
        assert agreement.level == level
        assert agreement.alpha == pytest.approx(krippendorff.alpha(reliability_data=matrix,
                                                                   level_of_measurement=level))
        assert agreement.ci is not None and agreement.ci[0] <= agreement.alpha <= agreement.ci[1]
        assert (column in t.panel.low_agreement) == (agreement.alpha < 0.667)
        assert "resource" not in t.panel.agreement  # found in the reply: the same for every judge
    assert n_failed["only 1 of 3 judges gave a usable verdict"] > 0
    assert n_failed["no strict majority among the judges (0, 1 tied)"] > 0
    assert "rating" in tasks["crisis.escalation"].panel.low_agreement  # three independent raters: alpha near 0


def test_a_fourth_judge_joins_the_panel(panel_run):
    *_, four, back = panel_run
    t = four.models["baseline/counselor"].tasks["crisis.escalation"]
    assert t.panel.judges == list(JUDGES) and set(t.panel.judge_values) == set(JUDGES)
    assert back.models["baseline/counselor"].tasks["crisis.escalation"].panel.judges == list(JUDGES[:3])


def test_one_judge_writes_no_panel(panel_run):
    root, _, alone, *_ = panel_run
    doc = json.loads((alone["openai/j1"] / "results.json").read_text())
    assert "panel" not in json.dumps(doc["models"]) and "panel_judges" not in doc["spec"]["options"]
    assert all("panel" not in r for r in lines(alone["openai/j1"], "crisis.escalation"))


def test_a_one_judge_spec_keeps_its_run_id():
    spec = run_spec(models=["baseline/counselor"], judge="openai/j1", judge_base_url="http://127.0.0.1:9/v1")
    before = spec.run_id()
    set_judges(spec, [("openai/j1", "http://127.0.0.1:9/v1")])
    assert spec.run_id() == before and "panel_judges" not in spec.options
    set_judges(spec, [("openai/j1", None), ("openai/j2", "http://u:secret@127.0.0.1:9/v1")])
    assert spec.run_id() != before
    assert "secret" not in json.dumps(spec.to_json())


@pytest.mark.parametrize("judges, message", [
    ([("openai/j1", None), ("openai/j1", None)], "given twice"),
    ([("openai/j1", None), ("rules", None)], "cannot be part of a panel"),
    ([("openai/j1", None), ("openai/j2", "ftp://x")], "http:// or https://"),
])
def test_bad_panels_are_one_line_errors(judges, message):
    from trustmh.errors import UserError
    spec = run_spec(models=["baseline/counselor"])
    with pytest.raises(UserError, match=message):
        set_judges(spec, judges)


def test_cli_panel_from_the_models_file_then_score_adds_a_judge(tmp_path, cli):
    calls = collections.Counter()
    with FakeLLMServer(reply=counting(calls)) as srv:
        url = srv.openai_base_url
        models = tmp_path / "models.toml"
        models.write_text('judge = [%s]\n\n[[model]]\nspec = "baseline/counselor"\n'
                          % ", ".join(f'"{j}@{url}"' for j in JUDGES[:3]))
        out = tmp_path / "run"
        result = cli("run", "--models", models, "--tasks", TASKS, "--suite", "sample", "--bootstrap", "50",
                     "--out", out, "--no-progress")
        assert result.returncode in (0, 2), result.stderr  # 2: the panel's ties exceed --max-judge-failed
        assert "judge panel" in result.stdout and "judges disagree!" in result.stdout
        first = dict(calls)
        assert first["j1"] == first["j2"] == first["j3"] > 0
        spec = json.loads((out / "results.json").read_text())["spec"]
        assert spec["judge"] == "openai/j1" and [j["judge"] for j in spec["options"]["panel_judges"]] == list(JUDGES[1:3])
        result = cli("score", out, *[a for j in JUDGES for a in ("--judge", f"{j}@{url}")], "--no-progress",
                     "--out", tmp_path / "four", "--min-judge-alpha", "-1")
        assert result.returncode in (0, 2), result.stderr
        assert {m: n - first.get(m, 0) for m, n in calls.items()} == {"j1": 0, "j2": 0, "j3": 0, "j4": first["j1"]}
        doc = json.loads((tmp_path / "four" / "results.json").read_text())
        t = doc["models"]["baseline/counselor"]["tasks"]["crisis.escalation"]
        assert t["panel"]["judges"] == list(JUDGES) and t["panel"]["min_alpha"] == -1 and not t["panel"]["low_agreement"]
        both = cli("run", "--models", models, "--judge", "openai/j4", "--out", tmp_path / "x")
        assert_user_error(both, "error: ", "give the judges one way")


def test_report_shows_the_panel_and_marks_low_agreement(panel_run):
    from trustmh.report import write_report
    root, results, *_ = panel_run
    html = write_report([root / "panel"], root / "panel.html").read_text()
    assert '<section id="judge-panel">' in html
    section = html.split('<section id="judge-panel">')[1].split("</section>")[0]
    for j in JUDGES[:3]:
        assert f"<code>{j}</code>" in section
    t = results.models["baseline/counselor"].tasks["crisis.escalation"]
    assert f"{t.panel.agreement['rating'].alpha:.3f}" in section and "judges disagree" in section
    alone = write_report([root / "j1"], root / "j1.html").read_text()
    assert 'id="judge-panel"' not in alone and "judges disagree" not in alone


def test_dry_run_counts_every_judge_of_the_panel(tmp_path):
    from trustmh.engine import context
    from trustmh.engine._plan import plan
    from trustmh.engine.prepare import prepare
    from trustmh.engine._prices import load_prices, plan_costs
    spec = run_spec(models=["baseline/counselor"], tasks="crisis.escalation", suite="sample")
    set_judges(spec, [("openai/j1", "http://127.0.0.1:9/v1")])
    ctx = context(spec)
    one = plan(spec, ctx, prepare(spec, ctx)[0], tmp_path / "none")
    set_judges(spec, [(j, "http://127.0.0.1:9/v1") for j in JUDGES[:3]])
    three = plan(spec, ctx, prepare(spec, ctx)[0], tmp_path / "none")
    assert sum(r.judge_calls for r in three) == 3 * sum(r.judge_calls for r in one) > 0
    lines = {line.spec: line.calls for line in plan_costs(three, spec, load_prices(None)) if line.role == "judge"}
    assert lines == {j: sum(r.judge_calls for r in one) for j in JUDGES[:3]}


@pytest.mark.parametrize("bad", ["openai/j2", [{"base_url": None}], [{"judge": 5}], [{"judge": "openai/j2", "base_url": 3}],
                                 [{"judge": "openai/j2", "base_url": "file:///etc"}]])
def test_a_hostile_stored_panel_is_a_one_line_error(bad):
    from trustmh.errors import UserError
    with pytest.raises(UserError, match="panel_judges|--judge-base-url"):
        run_spec(models=["baseline/counselor"], judge="openai/j1", panel_judges=bad)


def test_a_judge_failing_everything_changes_no_alpha_whatever_its_place(panel_run, tmp_path):
    """H3 (issue 38) inside a run: with a judge answering HTTP 500 to every call listed first, every alpha
    read 1.0 and nothing was marked; listed last, j2's and j3's own alphas, marked. Every order gives those
    now, per value (non-primary values included), with the same marks."""
    from trustmh.testing.fake_server import Fault
    root, *_ = panel_run
    calls = collections.Counter()
    fail_x = lambda n, body: Fault("status", status=500) if body["model"] == "jx" else None  # noqa: E731
    agreement = {}
    with FakeLLMServer(reply=counting(calls), faults=fail_x) as srv:
        url = srv.openai_base_url
        for order in (("openai/jx", *JUDGES[1:3]), (*JUDGES[1:3], "openai/jx"), JUDGES[1:3]):
            spec = load_spec(root / "panel")
            set_judges(spec, [(j, url) for j in order])
            out = tmp_path / "-".join(j[-2:] for j in order)
            results = run(spec, copy_run(root / "panel", out), limits=Limits(max_connections=4, max_retries=0),
                          generate=False)[1]
            tasks = results.models["baseline/counselor"].tasks
            agreement[order] = {(task, column): (a.alpha, column in tasks[task].panel.low_agreement)
                                for task in COLUMNS for column, a in tasks[task].panel.agreement.items()}
    first, last, pair = agreement.values()
    assert pair and any(low for _, low in pair.values())
    for got in (first, last):
        assert got.keys() == pair.keys()
        for key, (alpha, low) in pair.items():
            assert got[key][0] == pytest.approx(alpha, abs=1e-12) and got[key][1] == low, key
