"""The bootstrap against a naive reference implementation, the trust-score mapping, and weighted kappa
against hand-computed values and sklearn."""

import numpy as np
import pytest

import math

from sklearn.metrics import cohen_kappa_score

from trustmh.scoring.metrics import Table, bootstrap, mean, pearson, trust_score, weighted_kappa


def naive_bootstrap(values, clusters, seed, n_boot, level=0.95):
    """Resample clusters with replacement the slow, obvious way and take percentile intervals."""
    rng = np.random.default_rng(seed)
    uniq, inverse = np.unique(np.array(clusters, dtype=str), return_inverse=True)
    members = [np.flatnonzero(inverse == i) for i in range(len(uniq))]
    draws = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(uniq), len(uniq))
        idx = np.concatenate([members[i] for i in pick])
        draws.append(np.nanmean(values[idx]))
    a = (1 - level) / 2
    return np.quantile(draws, a), np.quantile(draws, 1 - a)


@pytest.mark.parametrize("cluster_size", [1, 3])
def test_cluster_bootstrap_matches_naive_reference(cluster_size):
    rng = np.random.default_rng(0)
    n = 90
    values = rng.normal(size=n)
    clusters = [str(i // cluster_size) for i in rng.permutation(n)]  # clusters scattered over rows
    table = Table.from_rows([{"v": float(v)} for v in values], clusters)
    ci = bootstrap(table, lambda t: {"m": mean(t.col("v"))}, seed=11, n_boot=300)["m"]
    assert ci == pytest.approx(naive_bootstrap(values, clusters, 11, 300), abs=1e-12)


def test_bootstrap_drops_metrics_undefined_in_most_resamples():
    table = Table.from_rows([{"x": 1.0, "y": 1.0}, {"x": 2.0, "y": 1.0}], ["a", "b"])
    cis = bootstrap(table, lambda t: {"r": pearson(t.col("x"), t.col("y"))}, seed=0, n_boot=100)
    assert "r" not in cis  # y is constant: r is never defined, so no interval is claimed


@pytest.mark.parametrize("value, lo, hi, higher, expected", [
    (0.8, 0, 1, True, 80.0), (0.8, 0, 1, False, 20.0), (-0.3, 0, 1, True, 0.0), (3.0, 1, 5, True, 50.0),
    (float("nan"), 0, 1, True, None), (None, 0, 1, True, None)])
def test_trust_score(value, lo, hi, higher, expected):
    assert trust_score(value, lo, hi, higher) == expected


def test_cheap_primary_metric_equals_full_aggregate():
    """Classification tasks override primary_metric for speed; it must agree with aggregate()."""
    from trustmh.tasks import TASKS, RunContext
    rng = np.random.default_rng(5)
    checked = 0
    for cls in TASKS.values():
        if not getattr(cls, "label_set", None):  # classification tasks only
            continue
        task = cls()
        labels = list(task.label_set)
        gold = rng.choice(labels, 60).astype(object)
        pred = rng.choice(labels, 60).astype(object)
        pred[:5] = gold[:5] = ""  # unscored rows carry empty labels
        rows = [{"correct": float(g == p)} if g else {} for g, p in zip(gold, pred)]
        table = Table.from_rows(rows, [str(i) for i in range(60)], {"gold": list(gold), "pred": list(pred)})
        ctx = RunContext()
        assert task.method(ctx).primary_metric(table, ctx) == pytest.approx(task.method(ctx).aggregate(table, ctx)[task.metric.name])
        checked += 1
    assert checked >= 3


# --- weighted kappa ------------------------------------------------------------------------------------
# a = [1, 2, 3, 3], b = [1, 3, 3, 2] over labels 1..3. Observed counts (rows a, columns b):
# [[1,0,0],[0,0,1],[0,1,1]]; both marginals are (1, 1, 2), so expected = outer / 4 =
# [[.25,.25,.5],[.25,.25,.5],[.5,.5,1]]. Quadratic weights (i-j)^2: observed disagreement 1 + 1 = 2,
# expected 2.25 + 0.75 + 2.5 = 5.5, kappa = 1 - 2/5.5 = 7/11. Linear |i-j|: 2 vs 1.25 + 0.75 + 1.5 = 3.5,
# kappa = 1 - 2/3.5 = 3/7.
HAND_A, HAND_B = [1, 2, 3, 3], [1, 3, 3, 2]


@pytest.mark.parametrize("weights, expected", [("quadratic", 7 / 11), ("linear", 3 / 7)])
def test_weighted_kappa_hand_computed(weights, expected):
    a, b = np.array(HAND_A, float), np.array(HAND_B, float)
    assert weighted_kappa(a, b, (1, 2, 3), weights) == pytest.approx(expected, abs=1e-12)
    # Missing ratings and ratings outside the label set are left out, not counted as disagreement.
    a2, b2 = np.append(a, [np.nan, 2.0, 9.0]), np.append(b, [1.0, np.nan, 1.0])
    assert weighted_kappa(a2, b2, (1, 2, 3), weights) == pytest.approx(expected, abs=1e-12)


def test_weighted_kappa_edge_cases():
    same = np.array([1.0, 2.0, 3.0, 2.0])
    assert weighted_kappa(same, same, (1, 2, 3)) == 1.0
    # Complete reversal of two categories: observed = 2 disagreements of weight 1, expected = 1 -> -1.
    assert weighted_kappa(np.array([1.0, 2.0]), np.array([2.0, 1.0]), (1, 2)) == pytest.approx(-1.0)
    assert math.isnan(weighted_kappa(np.array([3.0]), np.array([3.0]), (1, 2, 3)))  # one row
    assert math.isnan(weighted_kappa(np.array([3.0, 3.0]), np.array([3.0, 3.0]), (1, 2, 3)))  # one category
    with pytest.raises(ValueError):
        weighted_kappa(same, same, (1, 2, 3), "cubic")


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("weights", ["linear", "quadratic"])
def test_weighted_kappa_matches_sklearn(seed, weights):
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 6, 80)
    b = np.clip(a + rng.integers(-2, 3, 80), 1, 5)  # correlated raters, as real ones are
    ours = weighted_kappa(a.astype(float), b.astype(float), (1, 2, 3, 4, 5), weights)
    assert ours == pytest.approx(cohen_kappa_score(a, b, labels=[1, 2, 3, 4, 5], weights=weights), abs=1e-12)


def test_spearman_is_scipys_to_the_last_bit():
    """metrics.spearman ranks with numpy and correlates as scipy.stats.spearmanr does: the same float, with
    ties, NaN rows, constants and sizes from 2 up."""
    from scipy.stats import rankdata, spearmanr
    from trustmh.scoring.metrics import _average_ranks, spearman
    rng = np.random.default_rng(0)
    compared = 0
    for n in [*range(2, 13)] * 40 + [57, 200, 1000]:
        x = rng.integers(1, 6, n).astype(float)
        y = np.where(rng.random(n) < 0.5, x, rng.normal(size=n).round(int(rng.integers(0, 3))))
        x[rng.random(n) < 0.1] = np.nan
        assert np.array_equal(_average_ranks(y), rankdata(y))
        ok = ~(np.isnan(x) | np.isnan(y))
        a, b = x[ok], y[ok]
        if len(a) < 2 or len(set(a)) < 2 or len(set(b)) < 2:
            assert math.isnan(spearman(x, y))
            continue
        assert spearman(x, y) == float(spearmanr(a, b).statistic), (a, b)
        compared += 1
    assert compared > 300
