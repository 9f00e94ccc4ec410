"""The calibrated (PPI++) estimator against known truth: simulated human labels and a biased judge.

Coverage is checked with Monte Carlo error stated: with R simulated runs, the share of intervals holding
the true mean has standard error sqrt(p (1 - p) / R); an interval passes when its coverage is at least
nominal - 3 standard errors (at R = 200 and 95%: 0.95 - 0.046), and the judge-only interval, checked the
same way, must fail it. Every simulation is seeded and vectorised (the S values of one simulated run
share its bootstrap replicates, as a task's criteria do), a few seconds in all."""

import math

import numpy as np
import pytest

from trustmh.scoring.metrics import Table, bootstrap
from trustmh.validation.calibration import calibrated_mean, power_lambda, ppboot, ppi_mean, small_sample_factor
from trustmh.validation.design import FrameRow, draw

LEVEL = 0.95
RHOS = (0.0, 0.3, 0.6, 0.9)
BIAS = 0.5  # the judge rates everything half a standard deviation high


def floor(reps: int, level: float = LEVEL) -> float:
    """Coverage below this fails: nominal minus 3 Monte Carlo standard errors."""
    return level - 3 * math.sqrt(level * (1 - level) / reps)


def judge_of(y: np.ndarray, rho: float, noise: np.ndarray) -> np.ndarray:
    """A judge correlated rho with the human value, off by BIAS."""
    return rho * y + math.sqrt(1 - rho * rho) * noise + BIAS


def covers(ci, truth: float) -> bool:
    return ci is not None and ci[0] <= truth <= ci[1]


@pytest.mark.parametrize("n", [20, 50, 200])
def test_coverage_is_nominal_for_every_correlation_and_judge_only_is_not(n):
    reps, big_n = (240, 2 * n) if n < 200 else (200, n)
    m = n + big_n
    rng = np.random.default_rng(n)
    rated = np.arange(m) < n  # items are i.i.d.: the first n are a uniform random subset
    hit = np.zeros(len(RHOS))
    judge_hit = np.zeros(len(RHOS))
    for r in range(reps):
        y = rng.normal(0.0, 1.0, m)
        noise = rng.normal(0.0, 1.0, m)
        f = np.stack([judge_of(y, rho, noise) for rho in RHOS])
        ests = calibrated_mean(f, np.broadcast_to(y, f.shape), rated, np.arange(m), seed=r, n_boot=200)
        hit += [covers(e.ci, 0.0) for e in ests]
        if r < 30:  # the judge-only interval: the run's own bootstrap of the judge's mean over all items
            for i in range(len(RHOS)):
                t = Table({"v": f[i]}, np.arange(m).astype(object))
                ci = bootstrap(t, lambda t: {"v": float(t.col("v").mean())}, seed=r, n_boot=200,
                               aggregate_many=lambda t, res: {"v": res.mean(t.col("v"))})["v"]
                judge_hit[i] += covers(ci, 0.0)
    coverage, judge_coverage = hit / reps, judge_hit / 30
    assert (coverage >= floor(reps)).all(), dict(zip(RHOS, coverage))
    assert (judge_coverage < floor(30)).all(), dict(zip(RHOS, judge_coverage))


def test_lambda_zero_is_the_human_only_interval_exactly():
    rng = np.random.default_rng(1)
    m, n = 120, 30
    clusters = np.repeat(np.arange(60), 2).astype(str)  # pairs of items, as a dialogue's turns
    rated = np.zeros(m, bool)
    rated[rng.choice(m, n, replace=False)] = True
    y, f = rng.normal(size=m), rng.normal(size=m) + 2
    est = calibrated_mean(f, y, rated, clusters, seed=5, n_boot=500, lam=0.0)
    # the human-only estimate: the run's cluster bootstrap over the rated items alone, same seed
    human = Table({"y": y[rated]}, clusters[rated].astype(object))
    ci = bootstrap(human, lambda t: {"y": float(t.col("y").mean())}, seed=5, n_boot=500,
                   aggregate_many=lambda t, res: {"y": res.mean(t.col("y"))})["y"]
    k = len(set(clusters[rated]))
    widen = small_sample_factor(k, LEVEL)
    mean = y[rated].mean()
    assert est.lam == 0.0 and est.value == pytest.approx(mean, abs=1e-15)
    # metrics.bootstrap widens an interval on fewer than 30 clusters by the same factor (issue 44), around the
    # same estimate: the intervals are one
    assert k < 30 and widen > 1 and est.ci == pytest.approx(ci, abs=1e-12)
    assert est.ci == pytest.approx(est.human_only_ci, abs=1e-12)
    # closed form: the classical interval mean +- z s / sqrt(n)
    closed = ppi_mean(y[rated], f[rated], f[~rated], lam=0.0)
    half = 1.959963984540054 * y[rated].std(ddof=1) / math.sqrt(n)
    assert closed.ci == pytest.approx((mean - half, mean + half), abs=1e-12)


def test_perfect_judge_gives_the_human_interval_on_all_items():
    rng = np.random.default_rng(2)
    n, big_n = 400, 3600
    y = rng.normal(size=n + big_n)
    rated = np.arange(n + big_n) < n
    closed = ppi_mean(y[:n], y[:n], y[n:])
    # lambda = Cov(Y, f) / ((1 + n/N) Var(f)) with f = Y: N / (N + n), up to the two variance estimates
    assert closed.lam == pytest.approx(big_n / (big_n + n) * y[:n].var() / y.var(ddof=1), abs=1e-12)
    assert closed.lam == pytest.approx(big_n / (big_n + n), rel=0.1)
    everyone = ppi_mean(y, y, y[:0], lam=0.0)  # every item human-rated
    assert closed.value == pytest.approx(y.mean(), abs=0.01)
    width, full = closed.ci[1] - closed.ci[0], everyone.ci[1] - everyone.ci[0]
    assert width == pytest.approx(full, rel=0.05)
    boot = calibrated_mean(y, y, rated, np.arange(n + big_n), seed=3, n_boot=1000)
    assert boot.value == pytest.approx(y.mean(), abs=0.01)
    assert boot.ci[1] - boot.ci[0] == pytest.approx(full, rel=0.1)
    assert boot.effective_n == pytest.approx(n + big_n, rel=0.2)


def test_noise_judge_gets_lambda_near_zero_and_human_width():
    rng = np.random.default_rng(3)
    n, big_n = 200, 2000
    y, f = rng.normal(size=n + big_n), rng.normal(size=n + big_n)
    rated = np.arange(n + big_n) < n
    est = calibrated_mean(f, y, rated, np.arange(n + big_n), seed=4, n_boot=1000)
    assert est.lam < 0.1
    human = ppi_mean(y[:n], f[:n], f[n:], lam=0.0)
    assert est.ci[1] - est.ci[0] == pytest.approx(human.ci[1] - human.ci[0], rel=0.1)


def test_a_constant_added_to_the_judge_changes_nothing():
    rng = np.random.default_rng(4)
    n, m = 50, 400
    y = rng.normal(size=m)
    f = judge_of(y, 0.7, rng.normal(size=m))
    rated = np.arange(m) < n
    clusters = (np.arange(m) // 4).astype(str)
    a = calibrated_mean(f, y, rated, clusters, seed=9, n_boot=500)
    b = calibrated_mean(f + 3.0, y, rated, clusters, seed=9, n_boot=500)
    assert b.value == pytest.approx(a.value, abs=1e-12) and b.lam == pytest.approx(a.lam, abs=1e-12)
    assert b.ci == pytest.approx(a.ci, abs=1e-9)
    assert ppi_mean(y[:n], f[:n] + 3, f[n:] + 3).value == pytest.approx(ppi_mean(y[:n], f[:n], f[n:]).value, abs=1e-12)


def test_clustered_items_item_level_interval_undercovers_cluster_one_covers():
    """Dialogues of 10 turns sharing a dialogue effect (intra-class correlation 0.5). Resampling turns as if
    independent gives intervals far too narrow; resampling dialogues, as the run does, covers."""
    reps, k, size, n_clusters_rated = 150, 40, 8, 20
    rng = np.random.default_rng(5)
    clusters = np.repeat(np.arange(k), size).astype(str)
    item_level = np.arange(k * size).astype(str)
    m = k * size
    hit = np.zeros(2)
    for r in range(reps):
        effect = np.repeat(rng.normal(size=k), size)
        y = effect + rng.normal(size=m)
        f = 0.8 * y + 0.6 * rng.normal(size=m) + BIAS
        chosen = rng.choice(k, n_clusters_rated, replace=False)
        rated = np.isin(np.repeat(np.arange(k), size), chosen) & (rng.random(m) < 0.5)
        for j, cl in enumerate((clusters, item_level)):
            hit[j] += covers(calibrated_mean(f, y, rated, cl, seed=r, n_boot=200).ci, 0.0)
    cluster_cov, item_cov = hit / reps
    assert cluster_cov >= floor(reps), cluster_cov
    assert item_cov < floor(reps) - 0.1, item_cov


def test_golden_values_match_ppi_py():
    ppi_py = pytest.importorskip("ppi_py", reason="ppi-python (dev dependency) not installed")
    rng = np.random.default_rng(6)
    for n, big_n, rho in ((30, 300, 0.5), (100, 1000, 0.9), (25, 60, 0.1)):
        y = rng.binomial(1, 0.3, n + big_n).astype(float)  # a rate, as most judged values are
        f = np.clip(np.round(rho * y + rng.normal(0, 0.4, n + big_n) + 0.2), 0, 1)
        ours = ppi_mean(y[:n], f[:n], f[n:], level=0.9, ddof=0)
        lo, hi = ppi_py.ppi_mean_ci(y[:n], f[:n], f[n:], alpha=0.1)
        point = ppi_py.ppi_mean_pointestimate(y[:n], f[:n], f[n:])
        assert ours.value == pytest.approx(float(np.ravel(point)[0]), abs=1e-12)
        assert ours.ci == pytest.approx((float(np.ravel(lo)[0]), float(np.ravel(hi)[0])), abs=1e-12)
        # lambda fixed at 1 is PPI
        lo1, hi1 = ppi_py.ppi_mean_ci(y[:n], f[:n], f[n:], alpha=0.1, lam=1.0)
        assert ppi_mean(y[:n], f[:n], f[n:], lam=1.0, level=0.9, ddof=0).ci == pytest.approx(
            (float(np.ravel(lo1)[0]), float(np.ravel(hi1)[0])), abs=1e-12)
    # the run's estimator (no clusters, uniform) gives ppi_py's point estimate and lambda too
    n, big_n = 60, 500
    y = rng.normal(size=n + big_n)
    f = judge_of(y, 0.6, rng.normal(size=n + big_n))
    boot = calibrated_mean(f, y, np.arange(n + big_n) < n, np.arange(n + big_n), n_boot=200)
    assert boot.value == pytest.approx(float(np.ravel(ppi_py.ppi_mean_pointestimate(y[:n], f[:n], f[n:]))[0]), abs=1e-12)
    assert boot.lam == pytest.approx(power_lambda(y[:n], f[:n], f[n:]), abs=1e-12)


@pytest.mark.parametrize("case,reason", [
    ("constant", "same value"), ("one", "too few human ratings"), ("all", "every item is rated")])
def test_degenerate_inputs_give_a_reason_never_a_number(case, reason):
    rng = np.random.default_rng(7)
    m = 50
    y, f = rng.normal(size=m), rng.normal(size=m)
    rated = np.arange(m) < 10
    if case == "constant":
        f = np.full(m, 3.0)
    if case == "one":
        rated = np.arange(m) < 1
    if case == "all":
        rated = np.ones(m, bool)
    for est in (calibrated_mean(f, y, rated, np.arange(m)), ppi_mean(y[rated], f[rated], f[~rated])):
        assert est.value is None and est.ci is None and reason in est.reason
    t = Table({"v": f}, np.arange(m).astype(object))
    h = Table({"v": np.where(rated, y, np.nan)}, np.arange(m).astype(object))
    got = ppboot(t, h, rated, lambda t, r: {"v": r.mean(t.col("v"))}, judge_value="v", n_boot=50)["v"]
    assert got.value is None and reason in got.reason


def test_pp_bootstrap_of_a_pearson_r_covers_and_lambda_zero_is_human_only():
    """A metric that is not a mean: Pearson r of a 0-5 rating with an item feature (0-6), the judge a point
    high and noisy. The true r is that of a million simulated items."""
    from trustmh.scoring.metrics import pearson, pearson_many

    def items(rng, m):
        x = rng.integers(0, 7, m)
        y = np.clip(np.round(0.5 * x + rng.normal(0, 1.2, m)), 0, 5)
        f = np.clip(np.round(y + rng.normal(0, 0.8, m)) + 1, 0, 6)
        return x.astype(float), y, f

    x, y, _ = items(np.random.default_rng(0), 1_000_000)
    truth = pearson(x, y)
    reps, n, big_n = 60, 60, 180
    m = n + big_n
    rng = np.random.default_rng(8)
    hit = 0

    def r_of(t, res):
        return {"r": pearson_many(t.col("x"), t.col("v"), res)}
    for r in range(reps):
        x, y, f = items(rng, m)
        judge = Table({"v": f, "x": x}, np.arange(m).astype(object))
        human = Table({"v": y, "x": x}, np.arange(m).astype(object))
        est = ppboot(judge, human, np.arange(m) < n, r_of, judge_value="v", seed=r, n_boot=150, n_pilot=40)["r"]
        hit += covers(est.ci, truth)
        if r == 0:
            zero = ppboot(judge, human, np.arange(m) < n, r_of, lam=0.0, n_boot=150)["r"]
            assert zero.value == pytest.approx(pearson(x[:n], y[:n]), abs=1e-12) and zero.ci == zero.human_only_ci
    assert hit / reps >= floor(reps), hit / reps


def test_unequal_inclusion_probabilities_are_weighted_away():
    """A design that rates half the replies the judge called harmful and 1 in 20 of the others (as a
    verdict-stratified or active draw may): with 1/pi weights the estimate covers; the unweighted mean of
    the rated items is far off."""
    rng = np.random.default_rng(9)
    reps, m = 150, 1000
    verdict = (np.arange(m) < 100).astype(float)
    truth = 0.1 * 0.6 + 0.9 * 0.1
    hit, naive_hit = 0, 0
    for r in range(reps):
        y = np.where(verdict == 1, rng.random(m) < 0.6, rng.random(m) < 0.1).astype(float)
        rated = np.zeros(m, bool)
        rated[rng.choice(100, 50, replace=False)] = True
        rated[100 + rng.choice(900, 45, replace=False)] = True
        weights = np.where(verdict == 1, 100 / 50, 900 / 45)
        est = calibrated_mean(verdict, y, rated, np.arange(m), weights=weights, seed=r, n_boot=200)
        hit += covers(est.ci, truth)
        naive_hit += covers(ppi_mean(y[rated], verdict[rated], verdict[~rated], lam=0.0).ci, truth)
    assert hit / reps >= floor(reps), hit / reps
    assert naive_hit / reps < floor(reps), naive_hit / reps


def test_draw_is_seeded_and_records_inclusion_probabilities():
    frame = [FrameRow(mo, "t", str(i), "", str(i % 4 == 0)) for mo in ("a", "b") for i in range(100)]
    one, two = draw(frame, 20, "uniform", 1), draw(frame, 20, "uniform", 1)
    # 20 of the 100 items, each with both models' replies: every reply has probability 0.2
    assert one == two and len(one) == 40 and all(d.pi == pytest.approx(20 / 100) for d in one)
    assert {d.row.item_id for d in one if d.row.model == "a"} == {d.row.item_id for d in one if d.row.model == "b"}
    assert draw(frame, 20, "uniform", 2) != one
    strat = draw(frame, 40, "stratified", 1)
    sizes = {h: sum(1 for d in strat if d.stratum == h) for h in {d.stratum for d in strat}}
    # 25 "True" and 75 "False" items per model: 5 of each at least, the other 20 in proportion (3 : 7)
    assert sorted(sizes.values()) == [7, 7, 13, 13]
    for d in strat:
        assert d.pi == pytest.approx(7 / 25 if d.row.verdict == "True" else 13 / 75)
