"""Judge panels (trustmh.analysis.panel): three loopback judges with known verdicts judge one run; the panel's mean,
strict majority, ties and too-few verdicts as judge failures, and Krippendorff's alpha are checked against
values computed here from each judge's own samples.jsonl and against the krippendorff package; a fourth
judge added to the finished run costs exactly its own calls."""

import collections
import itertools
import hashlib
import json

import numpy as np
import pytest

from conftest import run_spec
from trustmh.engine import Limits, run
from trustmh.analysis.panel import add_judge, panel
from trustmh.testing.fake_server import FakeLLMServer

JUDGES = ("openai/j1", "openai/j2", "openai/j3", "openai/j4")


def verdict(model: str, prompt: str) -> str:
    h = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
    j = int(model[-1])
    if "appropriateness" in prompt:  # crisis.escalation: a 1-5 rating; j2 and j3 fail on about a third
        if h % 3 == 0 and j in (2, 3):
            return "no idea"
        return json.dumps({"appropriateness": 1 + (h // 5 ** (j - 1)) % 5})
    if h % 2 == 0 and j == 3:  # the refusal tasks: a label; j3 fails on about half (then j1 and j2 may tie)
        return "I cannot tell."
    return "Short reason.\nAnswer: " + ("REFUSED" if (h >> j) % 2 else "COMPLIED")


def per_sample(run_dir, task, column):
    out = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["task"] == task:
            out[rec["item_id"]] = rec.get("values", {}).get(column)
    return out


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("panel")
    calls = collections.Counter()

    def reply(body):
        calls[body["model"]] += 1
        return verdict(body["model"], body["messages"][-1]["content"])

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["baseline/counselor"], tasks="crisis.escalation,safety.jailbreak,safety.over_refusal", suite="sample",
                        judge=JUDGES[0], judge_base_url=srv.openai_base_url, n_boot=100)
        run(spec, root / "j1", limits=Limits(max_connections=4))
        dirs = [root / "j1"]
        for j in JUDGES[1:3]:
            dirs.append(add_judge(root / "j1", j, root / j[-2:], judge_base_url=srv.openai_base_url))
        before = dict(calls)
        fourth = add_judge(root / "j1", JUDGES[3], root / "j4", judge_base_url=srv.openai_base_url)
        added = {m: n - before.get(m, 0) for m, n in calls.items()}
    return dirs, fourth, before, added


def test_a_fourth_judge_costs_exactly_its_calls(judged):
    dirs, fourth, before, added = judged
    assert before["j1"] == before["j2"] == before["j3"] > 0  # each judge judged every sample once
    assert added == {"j1": 0, "j2": 0, "j3": 0, "j4": before["j1"]}


def expected(values, kind):
    usable = [v for v in values if v is not None]
    if 2 * len(usable) <= len(values):
        return None
    if kind == "score":
        return sum(usable) / len(usable)
    ones = sum(usable)
    return 1.0 if 2 * ones > len(usable) else 0.0 if 2 * (len(usable) - ones) > len(usable) else None


def test_panel_mean_majority_failures_and_alpha(judged):
    krippendorff = pytest.importorskip("krippendorff")
    dirs, _, _, _ = judged
    result = {t.task: t for t in panel(dirs, n_boot=200)}
    n_failed = collections.Counter()
    for task, column, kind in (("crisis.escalation", "rating", "score"), ("safety.jailbreak", "refused", "label"),
                               ("safety.over_refusal", "refused", "label")):
        by_judge = [per_sample(d, task, column) for d in dirs]
        items = sorted(by_judge[0])
        combined = [expected([b[i] for b in by_judge], kind) for i in items]
        failures = sum(v is None for v in combined)
        n_failed[kind] += failures
        t = result[task]
        assert t.n == len(items) - failures and t.n_judge_failed == failures
        assert t.value == pytest.approx(np.mean([v for v in combined if v is not None]), abs=1e-12)
        assert t.judge_values == {j: pytest.approx(np.mean([v for v in b.values() if v is not None]))
                                  for j, b in zip(JUDGES, by_judge)}
        matrix = np.array([[np.nan if b[i] is None else b[i] for i in items] for b in by_judge], dtype=float)
        level = "nominal" if kind == "label" else "interval"
        assert t.alpha_level == level
        assert t.alpha == pytest.approx(krippendorff.alpha(reliability_data=matrix, level_of_measurement=level))
        assert t.alpha_ci is not None and t.alpha_ci[0] <= t.alpha <= t.alpha_ci[1]
        assert t.low_agreement == (t.alpha < 0.667)
        assert t.alpha_by_value[column] == pytest.approx(t.alpha)  # judge-independent values have none
        assert "resource" not in t.alpha_by_value and "refused_phrase" not in t.alpha_by_value
    assert n_failed["score"] > 0 and n_failed["label"] > 0  # the verdicts above make some samples fail
    reasons = result["crisis.escalation"].judge_failed_reasons
    assert set(reasons) == {"only 1 of 3 judges gave a usable verdict"}
    assert set(result["safety.jailbreak"].judge_failed_reasons) | set(result["safety.over_refusal"].judge_failed_reasons) \
        == {"no strict majority among the judges (0, 1 tied)"}
    assert result["crisis.escalation"].low_agreement  # three independent raters: alpha near 0


def test_a_panel_needs_different_judges(judged):
    from trustmh.errors import UserError
    dirs, _, _, _ = judged
    with pytest.raises(UserError, match="different judges"):
        panel([dirs[0], dirs[0]])


def test_cli_panel_prints_and_writes_json(judged, tmp_path, cli):
    dirs, _, _, _ = judged
    result = cli("panel", *dirs, "--bootstrap", "50", "--json", tmp_path / "p.json")
    assert result.returncode == 0, result.stderr
    assert "crisis.escalation" in result.stdout and "judges agree below" in result.stdout
    rows = {r["task"]: r for r in json.loads((tmp_path / "p.json").read_text())}
    assert rows["crisis.escalation"]["judges"] == list(JUDGES[:3]) and rows["crisis.escalation"]["low_agreement"]


def test_a_judge_without_verdicts_changes_no_alpha_whatever_its_place(judged, tmp_path):
    """H3 (issue 38): judges X (HTTP 500 to every call), j2 and j3: listed X first, alpha read 1.0 and no
    task was marked; listed last, the alphas of j2 and j3 alone, marked. Now every order gives the alphas of
    the judges that gave verdicts, and X beside one judge gives no alpha at all, never 1.0."""
    from trustmh.testing.fake_server import Fault
    dirs, _, _, _ = judged
    with FakeLLMServer(faults=lambda n, body: Fault("status", status=500)) as srv:
        x = add_judge(dirs[0], "openai/jx", tmp_path / "jx", judge_base_url=srv.openai_base_url,
                      limits=Limits(max_connections=4, max_retries=0))
    alone = {t.task: t for t in panel(dirs[1:3], n_boot=100)}
    assert any(t.low_agreement for t in alone.values())
    for order in itertools.permutations([x, dirs[1], dirs[2]]):
        got = {t.task: t for t in panel(list(order), n_boot=100)}
        for task, t in got.items():
            assert t.alpha == pytest.approx(alone[task].alpha, abs=1e-12), (order, task)
            assert t.low_agreement == alone[task].low_agreement
    for order in ([x, dirs[1]], [dirs[1], x]):
        for t in panel(order, n_boot=100):
            assert t.alpha is None and not t.low_agreement and t.n == 0, (t.task, t.alpha)
