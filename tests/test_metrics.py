"""The bootstrap against a naive reference implementation, and the trust-score mapping."""

import numpy as np
import pytest

from trustmh.metrics import Table, bootstrap, mean, pearson, trust_score


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
    from trustmh.tasks.reliability import LabelledTask
    rng = np.random.default_rng(5)
    checked = 0
    for cls in TASKS.values():
        if not issubclass(cls, LabelledTask):
            continue
        task = cls()
        labels = list(task.label_set)
        gold = rng.choice(labels, 60).astype(object)
        pred = rng.choice(labels, 60).astype(object)
        pred[:5] = gold[:5] = ""  # unscored rows carry empty labels
        rows = [{"correct": float(g == p)} if g else {} for g, p in zip(gold, pred)]
        table = Table.from_rows(rows, [str(i) for i in range(60)], {"gold": list(gold), "pred": list(pred)})
        ctx = RunContext()
        assert task.primary_metric(table, ctx) == pytest.approx(task.aggregate(table, ctx)[task.metric.name])
        checked += 1
    assert checked >= 3
