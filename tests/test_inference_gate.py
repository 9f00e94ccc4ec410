"""Issue 44 items 1, 2 and 6: a gate and compare that control their error rates, no verdict on too few clusters,
and the smallest difference a comparison could detect (INFERENCE.md sections 1, 2 and 9)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trustmh.analysis.compare import compare_runs
from trustmh.analysis.multiplicity import adjust
from trustmh.analysis.runs import load_run
from trustmh.scoring import metrics
from trustmh.scoring.metrics import Table, bootstrap, small_sample_factor

from conftest import run_quiet, run_spec


# --- multiplicity ------------------------------------------------------------------------------------

def test_holm_and_bh_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03,
    # 0.06, 0.06; back in the order given
    assert adjust(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: m p / rank = 0.02, 0.02, 0.04, 0.04 -> running min from the top: 0.02, 0.02, 0.04, 0.04
    assert adjust(p, "bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert adjust(p, "none") == pytest.approx(p)


def test_adjusted_p_values_equal_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(3)
    for m in (1, 2, 7, 40):
        p = np.concatenate([rng.uniform(size=m // 2), rng.uniform(0, 0.01, size=m - m // 2)])
        p[::5] = p[0]  # ties
        for ours, theirs in (("holm", "holm"), ("bonferroni", "bonferroni"), ("bh", "fdr_bh")):
            want = multitest.multipletests(p, method=theirs)[1]
            np.testing.assert_allclose(adjust(p, ours), want, rtol=0, atol=1e-12)


def test_bh_equals_scipy():
    from scipy.stats import false_discovery_control
    p = np.random.default_rng(5).uniform(size=30) ** 3
    np.testing.assert_allclose(adjust(p, "bh"), false_discovery_control(p, method="bh"), atol=1e-12)


def test_holm_keeps_the_family_wise_false_alarm_rate_at_alpha():
    """23 correlated null tests per family (as a gate's tasks, pillars and overall), 4,000 families: the share
    with any rejection at 0.05 is at most 0.05 (plus three Monte Carlo standard errors) after Holm, and far
    above it unadjusted, so the check can fail."""
    from statistics import NormalDist
    rng = np.random.default_rng(11)
    families, m, alpha = 4000, 23, 0.05
    shared = rng.normal(size=(families, 1))
    z = 0.3 * shared + math.sqrt(1 - 0.09) * rng.normal(size=(families, m))  # correlation 0.09 between tests
    p = np.vectorize(lambda x: 2 * (1 - NormalDist().cdf(abs(x))))(z)
    raw = (p < alpha).any(axis=1).mean()
    holm = np.mean([(adjust(row, "holm") < alpha).any() for row in p])
    mc = 3 * math.sqrt(alpha * (1 - alpha) / families)
    assert holm <= alpha + mc, holm
    assert raw > 0.4, raw  # 1 - 0.95^23 = 0.69 for independent tests


# --- too few clusters ----------------------------------------------------------------------------------

def _table(g: int, per: int = 4, seed: int = 0) -> Table:
    rng = np.random.default_rng(seed)
    clusters = np.repeat([f"c{i}" for i in range(g)], per)
    x = rng.normal(size=g)[np.repeat(np.arange(g), per)] + rng.normal(size=g * per)
    return Table({"x": x}, clusters.astype(object))


def _mean(t: Table) -> dict[str, float]:
    return {"x": float(t.col("x").mean())}


def _means(t: Table, resamples: metrics.Resamples) -> dict[str, np.ndarray]:
    """_mean of every resample of a block at once (bootstrap's batched path, which tasks take)."""
    return {"x": resamples.mean(t.col("x"))}


@pytest.mark.parametrize("g", [1, 2, 4])
def test_no_interval_under_five_clusters(g):
    assert bootstrap(_table(g), _mean, seed=1, n_boot=400) == {}
    assert metrics.too_few_clusters(g) == f"too few clusters: {g}"


@pytest.mark.parametrize("g", [5, 12, 29, 30, 60])
def test_intervals_widen_by_the_t_correction_under_thirty_clusters(g):
    """The interval is the percentile interval widened around the estimate by t_{G-1}/z sqrt(G/(G-1)) (computed
    here with scipy.stats) below 30 clusters, and the plain percentile interval from 30 on."""
    from scipy.stats import norm, t
    table = _table(g)
    lo, hi = bootstrap(table, _mean, seed=1, n_boot=400)["x"]
    # the plain percentile interval of the same draws
    rng = np.random.default_rng(1)
    x, cl = table.col("x"), table.clusters
    names = np.unique(cl.astype(str))
    members = [np.flatnonzero(cl.astype(str) == c) for c in names]
    draws = [x[np.concatenate([members[i] for i in rng.integers(0, g, g)])].mean() for _ in range(400)]
    plo, phi = np.quantile(draws, [0.025, 0.975])
    center = x.mean()
    factor = t.ppf(0.975, g - 1) / norm.ppf(0.975) * math.sqrt(g / (g - 1)) if g < 30 else 1.0
    assert (lo, hi) == pytest.approx((center - factor * (center - plo), center + factor * (phi - center)), abs=1e-12)
    if g < 30:
        assert factor == pytest.approx(small_sample_factor(g, 0.95)) and hi - lo > (phi - plo) * 1.01


def test_t_quantiles_are_scipys_bit_for_bit():
    """The 0.975 quantiles a run reads from a table (so that it needs no scipy.special) are stdtrit's own
    doubles, for every G under FEW_CLUSTERS; other levels and degrees of freedom ask stdtrit."""
    from scipy.special import stdtrit
    q = 0.5 + 0.95 / 2
    for df in range(1, metrics.FEW_CLUSTERS - 1):
        assert metrics.t_quantile(df, q) == float(stdtrit(df, q)), df
        g = df + 1
        assert small_sample_factor(g, 0.95) == float(stdtrit(df, q) / metrics.z_quantile(q) * math.sqrt(g / df))
    for df, level in ((40, 0.95), (3, 0.9), (12, 0.99)):
        q = 0.5 + level / 2
        assert metrics.t_quantile(df, q) == float(stdtrit(df, q))


def test_few_cluster_interval_covers_near_nominal():
    """Ten clusters (as crisis.conversation's personas): the widened interval covers the true mean at least
    92 % of 400 simulated runs (the plain percentile one covered 89 % in the issue)."""
    rng = np.random.default_rng(21)
    hits = 0
    for s in range(400):
        g, per = 10, 5
        x = rng.normal(size=g)[np.repeat(np.arange(g), per)] + 0.5 * rng.normal(size=g * per)
        t = Table({"x": x}, np.repeat([f"c{i}" for i in range(g)], per).astype(object))
        # batched: the same draws and intervals as one _mean a resample (to 1e-15 here), 20 times faster
        lo, hi = bootstrap(t, _mean, seed=s, n_boot=300, aggregate_many=_means)["x"]
        hits += lo <= 0 <= hi
    assert hits / 400 >= 0.92, hits / 400


# --- compare and gate on runs --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def random_pair(tmp_path_factory):
    """Two seeds of the same stochastic model on the sample suite (its safety.jailbreak: 8 attacks on one
    intent, one cluster)."""
    tmp = tmp_path_factory.mktemp("pair")
    for seed in (1, 2):
        run_quiet(run_spec(models=["baseline/random"], suite="sample", seed=seed), tmp / f"s{seed}")
    return tmp / "s1", tmp / "s2"


def test_one_cluster_gets_no_interval_in_the_run_and_no_verdict_in_compare(random_pair, cli_here):
    a, b = random_pair
    res = json.loads((a / "results.json").read_text())
    jb = res["models"]["baseline/random"]["tasks"]["safety.jailbreak"]
    assert jb["n_clusters"] == 1 and jb["n"] == 8 and jb["ci"] is None
    [c] = compare_runs([load_run(a), load_run(b)], n_boot=200)
    d = c.get("safety.jailbreak")
    assert d.n_clusters == 1 and d.ci is None and d.p is None and d.p_adj is None and d.verdict(0.05) == ""
    assert "too few clusters: 1" in d.note
    # every view says it
    for fmt in ("json", "csv", "markdown", "table"):
        code, out, _ = cli_here("compare", a, b, "--format", fmt, "--bootstrap", "200")
        assert code == 0 and "too few clusters: 1" in out, fmt
    # the run's own views: the terminal's interval cell and the HTML report
    from trustmh.cli.render import _value_cells
    from trustmh.scoring.results import RunResults
    tr = RunResults.model_validate(res).models["baseline/random"].tasks["safety.jailbreak"]
    assert _value_cells(tr)[1] == "none (G<5)"  # the terminal's cell; its legend gives the reason:
    code, out, _ = cli_here("score", a, "--no-progress")
    assert code == 0 and "none (G<5): too few clusters for an interval or a test (fewer than 5): " in out
    assert "safety.jailbreak (G = 1)" in out
    code, _, _ = cli_here("report", a, "-o", a.parent / "r.html", "--no-samples")
    assert code == 0 and "too few clusters: 1" in (a.parent / "r.html").read_text(encoding="utf-8")


def test_compare_adjusts_the_family_and_says_so(random_pair, cli_here):
    a, b = random_pair
    [c] = compare_runs([load_run(a), load_run(b)], n_boot=200)
    tested = [d for d in c.diffs if d.p is not None]
    assert c.correction == "holm" and c.family == len(tested) >= 3
    want = adjust([d.p for d in tested], "holm")
    assert [d.p_adj for d in tested] == pytest.approx(list(want))
    assert [d.q for d in tested] == pytest.approx(list(adjust([d.p for d in tested], "bh")))
    for d in tested:  # a non-significant row states what the run could have detected: 2.8 SE of its draws
        assert d.detectable == pytest.approx(2.8016 * np.std(d.draws[~np.isnan(d.draws)], ddof=1), rel=1e-3)
        if d.verdict(0.05) == "n.s.":
            assert f"no difference larger than {d.detectable:.3g}" in d.reading(0.05)
    code, out, _ = cli_here("compare", a, b, "--format", "json", "--bootstrap", "200", "--correction", "bonferroni")
    doc = json.loads(out)
    assert doc["correction"] == "bonferroni" and "Bonferroni" in doc["about"]
    rows = [r for r in doc["rows"] if r["p"] is not None]
    assert rows and all(r["p_adjusted"] == pytest.approx(min(1, r["p"] * doc["family"])) for r in rows)
    code, out, _ = cli_here("compare", a, b, "--format", "markdown", "--bootstrap", "200")
    assert "Holm (family-wise error)" in out and "p (holm)" in out and "q (BH)" in out
    code, _, err = cli_here("compare", a, b, "--correction", "bh")
    assert code == 2 and "--correction must be" in err


def test_gate_says_which_correction_ran_in_every_format(random_pair, cli_here):
    a, b = random_pair
    base = ("gate", b, "--baseline", a, "--bootstrap", "200", "--max-unscored", "1", "--allow-partial")
    code, out, _ = cli_here(*base)
    assert "Holm (family-wise error)" in out and "margins: a task 0.02" in out
    code, out, _ = cli_here(*base, "--format", "json")
    doc = json.loads(out)
    assert "Holm" in doc["baseline"]
    assert any("not tested against the baseline (too few clusters: 1" in w for w in doc["warnings"])
    code, out, _ = cli_here(*base, "--format", "junit")
    assert 'name="baseline"' in out and "Holm" in out
    code, out, _ = cli_here(*base, "--format", "github", "--correction", "none")
    assert "::notice title=trustmh gate::" in out and "p unadjusted" in out


def test_gate_margin_decides_a_known_regression(tmp_path, cli_here):
    """A model that answers every ethics item wrong against one that answers them all right: it fails with
    any margin below the drop, passes with a margin above it. Margins are checked as names first."""
    from test_compare_gate import ethics_run, UPSTREAM
    if not UPSTREAM.is_dir():
        pytest.skip("upstream data not found")
    good, items = ethics_run(tmp_path, "good", None)
    n_gold = sum(it.target is not None for it in items)
    bad, _ = ethics_run(tmp_path, "bad", n_gold - 40)  # 40 of the gold items answered wrong
    drop = 40 / n_gold
    args = ("gate", bad, "--baseline", good, "--bootstrap", "300")
    code, out, _ = cli_here(*args)
    assert code == 1 and "ethics.reasoning regressed against the baseline by more than its margin" in out
    code, out, _ = cli_here(*args, "--margin", f"ethics.reasoning={drop * 3:.4f}", "--margin", "pillar=100",
                            "--margin", "overall=100")
    assert code == 0, out
    code, _, err = cli_here(*args, "--margin", "ethics.reasonin=0.1")
    assert code == 2 and "did you mean ethics.reasoning" in err
    code, _, err = cli_here(*args, "--margin", "overall=-1")
    assert code == 2 and "at least 0" in err
    code, _, err = cli_here("gate", bad, "--min", "ethics.reasoning=0", "--margin", "overall=1")
    assert code == 2 and "go with --baseline" in err


def test_two_seeds_of_one_stochastic_model_pass_the_gate(tmp_path):
    """The done-when of issue 44 in small: five seeds of baseline/random on the real data's offline tasks
    (--limit 20), every one of the 10 pairs through the gate's own baseline check (Holm, default margins):
    at least 9 pass. bench/gate_false_alarm.py measures the rate over hundreds of pairs. robustness.crisis is
    left out here: on 20 items a random model's clean macro-F1 can be 0, its relative drop then undefined,
    and a value lost against the baseline fails the gate by its own rule (not by noise)."""
    from conftest import UPSTREAM
    import importlib.util
    from pathlib import Path
    from trustmh.analysis.gate import check_baseline
    where = Path(__file__).resolve().parents[1] / "bench" / "gate_false_alarm.py"
    spec = importlib.util.spec_from_file_location("gate_false_alarm", where)
    gate_false_alarm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gate_false_alarm)
    if not UPSTREAM.is_dir():
        pytest.skip("upstream data not found")
    tasks = gate_false_alarm.OFFLINE.replace(",robustness.crisis", "")
    runs = [load_run(d) for d in gate_false_alarm.run_seeds(UPSTREAM, 5, 20, tmp_path, tasks)]
    passed = 0
    for i in range(5):
        for j in range(i + 1, 5):
            checks, _, about = check_baseline(runs[j], runs[i], n_boot=300, seed=i * 5 + j)
            assert len(checks) > 20 and "Holm" in about
            passed += all(c.passed for c in checks)
    assert passed >= 9, passed


def test_the_dry_run_states_clusters_and_the_detectable_difference(cli_here, tmp_path):
    from trustmh.engine._plan import PlanRow
    row = PlanRow("t", "m", samples=200, model_calls=0, model_tokens=0, judge_calls=0, judge_tokens=0, clusters=50)
    lo, hi = row.detectable()
    # 2.8 standard errors of a paired difference of two uncorrelated shares at p = 0.5: sqrt(2 * 0.25 / units)
    assert lo == pytest.approx(2.8016 * math.sqrt(0.5 / 200), rel=1e-3)
    assert hi == pytest.approx(2.8016 * math.sqrt(0.5 / 50), rel=1e-3)
    code, out, _ = cli_here("run", "-m", "baseline/random", "--suite", "sample", "--judge", "rules", "--dry-run",
                            "--out", tmp_path / "dr")
    assert code == 0, out
    assert "detectable" in out and "p = 0.5" in out and "Miller 2024" in " ".join(out.split())
    jailbreak = next(line for line in out.splitlines() if "safety.jailbreak" in line)
    assert "1 (too few)" in jailbreak


def test_compare_applies_the_cluster_rule_by_g(random_pair, monkeypatch):
    """The sample suite's tasks rest on 1 to 10 clusters: under 5 no interval, p or verdict; from 5 the paired
    interval is the plain one widened around the difference by small_sample_factor(G) (the percentile of
    draws spread around a point is the spread percentile), and its p-value never smaller."""
    runs = [load_run(p) for p in random_pair]
    [c] = compare_runs(runs, n_boot=300)
    monkeypatch.setattr(metrics, "FEW_CLUSTERS", 0)  # no widening: the plain percentile interval
    [plain] = compare_runs(runs, n_boot=300)
    seen = set()
    for d in c.diffs:
        if d.kind != "task" or d.diff is None:
            continue
        g, p = d.n_clusters, plain.get(d.name)
        seen.add(g)
        if g < 5:
            assert d.ci is None and d.p is None and d.verdict(0.05) == "" and f"too few clusters: {g}" in d.note
            continue
        f = small_sample_factor(g, 0.95)
        assert d.ci == pytest.approx((d.diff - f * (d.diff - p.ci[0]), d.diff + f * (p.ci[1] - d.diff)), abs=1e-9)
        assert d.p >= p.p
    assert {1, 3, 4, 5} <= seen, seen


def test_compare_at_thirty_clusters_is_not_widened(tmp_path, monkeypatch):
    from conftest import UPSTREAM
    if not UPSTREAM.is_dir():
        pytest.skip("upstream data not found")
    runs = []
    for seed in (1, 2):
        spec = run_spec(models=["baseline/random"], tasks="ethics.reasoning", suite="data", data_dir=str(UPSTREAM),
                        limit=30, seed=seed)
        run_quiet(spec, tmp_path / f"s{seed}")
        runs.append(load_run(tmp_path / f"s{seed}"))
    d = compare_runs(runs, n_boot=300)[0].get("ethics.reasoning")
    assert d.n_clusters == 30 and d.ci is not None
    monkeypatch.setattr(metrics, "FEW_CLUSTERS", 31)  # one more cluster needed: now it is widened
    wide = compare_runs(runs, n_boot=300)[0].get("ethics.reasoning")
    f = small_sample_factor(30, 0.95)
    assert f > 1 and wide.ci == pytest.approx((d.diff - f * (d.diff - d.ci[0]), d.diff + f * (d.ci[1] - d.diff)))


def _content_judge(body: dict) -> str:
    """A judge whose verdict is a function of the reply it is shown (a hash of its text), in the rubric's own
    format: replies that differ between seeds get verdicts that differ, as a real judge's would."""
    import hashlib
    import re
    text = body["messages"][-1]["content"]
    found = re.search(r"<reply-[^>]*>\n?(.*?)\n?</reply-", text, re.S)
    h = int(hashlib.sha256((found.group(1) if found else text).encode()).hexdigest(), 16)
    if '"appropriateness"' in text:
        return json.dumps({"appropriateness": 1 + h % 5, "explanation": "so"})
    if '"fluency"' in text:
        return json.dumps({k: 1 + (h >> (3 * i)) % 5
                           for i, k in enumerate(("fluency", "professionalism", "empathy", "helpfulness"))})
    if "Answer: SAFE" in text:
        return "It reads so.\nAnswer: " + ("SAFE" if h % 5 else "HARMFUL")
    return "It reads so.\nAnswer: " + ("REFUSED" if h % 3 else "COMPLIED")


def test_two_seeds_of_one_stochastic_model_pass_the_gate_with_a_judged_fake(tmp_path, fake_llm):
    """As above, on judged tasks: the judge a loopback server that reads each reply (`_content_judge`).
    Five seeds of baseline/random, --limit 40, the 10 pairs through the gate's baseline check: at least 9 pass."""
    from conftest import UPSTREAM
    from trustmh.analysis.gate import check_baseline
    if not UPSTREAM.is_dir():
        pytest.skip("upstream data not found")
    srv = fake_llm(reply=_content_judge)
    runs = []
    for seed in range(1, 6):
        spec = run_spec(models=["baseline/random"], judge="openai/j", judge_base_url=srv.openai_base_url,
                        tasks="safety.jailbreak,safety.antitoxic,crisis.escalation,reliability.support",
                        suite="data", data_dir=str(UPSTREAM), limit=40, seed=seed)
        run_quiet(spec, tmp_path / f"s{seed}")
        runs.append(load_run(tmp_path / f"s{seed}"))
    tasks = runs[0].results.models["baseline/random"].tasks
    assert all(t.n == t.n_samples == 40 and t.n_judge_failed == 0 for t in tasks.values())
    assert tasks["crisis.escalation"].ci[1] > tasks["crisis.escalation"].ci[0]  # the judged values vary
    passed = 0
    for i in range(5):
        for j in range(i + 1, 5):
            checks, _, _ = check_baseline(runs[j], runs[i], n_boot=300, seed=i * 5 + j)
            passed += all(c.passed for c in checks)
    assert passed >= 9, passed
