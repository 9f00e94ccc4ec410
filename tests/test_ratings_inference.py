"""Human ratings done right (issues 44 item 7 and 47): validate-judge's verdict needs a ceiling that can carry
one, an undefined ceiling says why, and many raters cost linearly."""

import math
import time

import numpy as np
import pytest

from trustmh.scoring import agreement
from trustmh.scoring.agreement import (NO_CEILING, NO_CEILING_NO_VARIANCE, WITHIN, criterion_agreement,
                                       judge_and_ceiling, judge_and_ceiling_many, rater_pairs)
from trustmh.scoring.metrics import Table, bootstrap

SCALE = (1, 2, 3, 4, 5)


def test_five_items_with_a_degenerate_ceiling_give_no_verdict():
    # the reproduction of issue 44: two raters who disagree on 5 items (ceiling ICC negative, every resample
    # alike) and a judge equal to one of them: "within the human ceiling" before, now inconclusive
    a, b = [1, 5, 1, 5, 1], [5, 1, 5, 1, 5]
    human = {f"q{i}": {"A": float(a[i]), "B": float(b[i])} for i in range(5)}
    judge = {f"q{i}": float(a[i]) for i in range(5)}
    ca = criterion_agreement("empathy", human, judge, SCALE, seed=0, n_boot=200)
    assert ca.values["ceiling.icc_a1"] < 0
    for v in ca.verdicts.values():
        assert v != WITHIN and v.startswith("inconclusive") and "rests on 5 items" in v


def test_a_ceiling_at_chance_carries_no_verdict_however_many_items():
    rng = np.random.default_rng(3)
    human = {f"q{i}": {"A": float(rng.integers(1, 6)), "B": float(rng.integers(1, 6))} for i in range(200)}
    judge = {i: v["A"] for i, v in human.items()}
    ca = criterion_agreement("empathy", human, judge, SCALE, seed=0, n_boot=300)
    for s, v in ca.verdicts.items():
        assert ca.cis[f"ceiling.{s}"][0] <= 0 and v.startswith("inconclusive") and "reaches 0" in v, s


def test_raters_who_barely_vary_are_not_called_one_rater():
    # two raters on 40 items who give 3 to almost everything: ICC and kappa of the pair are undefined
    human = {f"q{i}": {"A": 3.0, "B": 3.0} for i in range(40)}
    human["q0"]["A"] = 4.0
    judge = {i: 3.0 for i in human}
    ca = criterion_agreement("empathy", human, judge, SCALE, seed=0, n_boot=100)
    undefined = [s for s in ca.verdicts if math.isnan(ca.values[f"ceiling.{s}"])]
    assert undefined
    for s in undefined:
        assert ca.verdicts[s] == NO_CEILING_NO_VARIANCE and "fewer than two raters" not in ca.verdicts[s]
    alone = criterion_agreement("empathy", {i: {"A": v["A"]} for i, v in human.items()}, judge, SCALE, seed=0,
                                n_boot=50)
    assert set(alone.verdicts.values()) == {NO_CEILING}


def _ratings(n_raters, n_items, seed=0):
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 6, n_items)
    raters = [f"r{k:02d}" for k in range(n_raters)]
    rows = []
    for i in range(n_items):
        row = {"judge": float(np.clip(truth[i] + rng.integers(-2, 3), 1, 5))}
        for r in raters:
            if rng.random() > 0.1:
                row[f"rater:{r}"] = float(np.clip(truth[i] + rng.integers(-1, 2), 1, 5))
        rows.append(row)
    return Table.from_rows(rows, [f"i{i}" for i in range(n_items)]), raters


def test_rater_pairs_all_pairs_when_few_and_linear_when_many():
    eleven = [f"r{k}" for k in range(11)]
    assert sorted(map(frozenset, rater_pairs(eleven))) == sorted(
        frozenset((a, b)) for i, a in enumerate(eleven) for b in eleven[i + 1:])
    for n in (12, 40, 80):
        raters = [f"r{k}" for k in range(n)]
        pairs = rater_pairs(raters)
        assert len(pairs) == agreement.PARTNERS * n and len(set(map(frozenset, pairs))) == len(pairs)
        partners = {r: sum(r in p for p in pairs) for r in raters}
        assert set(partners.values()) == {2 * agreement.PARTNERS}


def test_many_raters_batched_equals_per_resample_and_cost_is_linear():
    # 20 draws: the two paths must agree draw for draw, which any number shows; the per-resample path of 30
    # raters costs ~0.1 s a draw
    table, raters = _ratings(30, 60)
    fast = bootstrap(table, lambda t: judge_and_ceiling(t, raters, SCALE), seed=1, n_boot=20,
                     aggregate_many=lambda t, rs: judge_and_ceiling_many(t, rs, raters, SCALE))
    slow = bootstrap(table, lambda t: judge_and_ceiling(t, raters, SCALE), seed=1, n_boot=20)
    assert fast.keys() == slow.keys()
    for k in fast:
        assert fast[k] == pytest.approx(slow[k], abs=1e-9), k

    def cpu(n):
        t, rs = _ratings(n, 200)
        t0 = time.process_time()
        bootstrap(t, lambda x: judge_and_ceiling(x, rs, SCALE), seed=1, n_boot=100,
                  aggregate_many=lambda x, r: judge_and_ceiling_many(x, r, rs, SCALE))
        return time.process_time() - t0
    small, big = cpu(20), cpu(80)
    # 4x the raters: linear is about 4x, quadratic (every pair) 16x; allow a loaded machine its noise
    assert big / small < 8, (small, big)


# --- calibrated values: no variance, strata, raters ------------------------------------------------------

from trustmh.validation.calibration import POST_STRATIFIED, calibrated_mean, exact_upper  # noqa: E402


def test_thirty_rated_zeros_get_the_exact_bound_not_zero_width():
    from scipy.stats import binomtest
    rng = np.random.default_rng(1)
    m, n = 90, 30
    f = (rng.random(m) < 0.2).astype(float)  # the judge calls some replies harmful
    y = np.zeros(m)  # the clinicians: none of the 30 they rated
    rated = np.arange(m) < n
    est = calibrated_mean(f, y, rated, np.arange(m), seed=0, n_boot=300)
    hi = binomtest(0, 30).proportion_ci(confidence_level=0.95, method="exact").high
    assert est.value == 0.0 and est.ci == pytest.approx((0.0, hi), abs=1e-12)
    assert round(hi, 3) == 0.116 and exact_upper(30) == pytest.approx(hi, abs=1e-12)
    assert est.human_only_ci == est.ci and "Clopper-Pearson" in est.interval
    # a 0-5 value all at its top: the same bound, scaled to the range
    five = calibrated_mean(rng.integers(0, 6, m).astype(float), np.full(m, 5.0), rated, np.arange(m), seed=0,
                           n_boot=300, bounds=(0.0, 5.0))
    assert five.value == 5.0 and five.ci == pytest.approx((5.0 - 5.0 * hi, 5.0))
    # all at 3 of 0-5: P(X != 3) <= the same bound, so the mean is within 3 -+ 3 or 2 times it
    mid = calibrated_mean(rng.integers(0, 6, m).astype(float), np.full(m, 3.0), rated, np.arange(m), seed=0,
                          n_boot=300, bounds=(0.0, 5.0))
    assert mid.value == 3.0 and mid.ci == pytest.approx((3.0 - 3.0 * hi, 3.0 + 2.0 * hi))
    # without the value's range nothing bounds it: no interval, and the reason
    unknown = calibrated_mean(rng.normal(size=m), np.full(m, 3.0), rated, np.arange(m), seed=0, n_boot=300)
    assert unknown.value == 3.0 and unknown.ci is None and "no interval" in unknown.interval


def _stratified(rng, m=600):
    verdict = (rng.random(m) < 0.15).astype(float)  # the judge's verdict: the strata
    y = np.where(verdict == 1, rng.random(m) < 0.7, rng.random(m) < 0.1).astype(float)
    rated = np.zeros(m, bool)
    harmful, other = np.flatnonzero(verdict == 1), np.flatnonzero(verdict == 0)
    rated[rng.choice(harmful, 20, replace=False)] = True
    rated[rng.choice(other, 30, replace=False)] = True
    weights = np.where(verdict == 1, len(harmful) / 20, len(other) / 30)
    return verdict, y, rated, weights


def test_stratified_ppi_is_the_post_stratified_mean_without_lambda():
    verdict, y, rated, weights = _stratified(np.random.default_rng(4))
    by_hand = sum((verdict == v).mean() * y[rated & (verdict == v)].mean() for v in (0.0, 1.0))
    ppi = calibrated_mean(verdict, y, rated, np.arange(len(y)), weights=weights, seed=0, n_boot=200)
    post = calibrated_mean(verdict, y, rated, np.arange(len(y)), weights=weights, seed=0, n_boot=200,
                           strata=verdict.astype(str))
    assert ppi.value == pytest.approx(by_hand, abs=1e-12)  # PPI's correction is identically 0 here
    assert post.value == pytest.approx(by_hand, abs=1e-12)
    assert post.method == POST_STRATIFIED and post.lam is None and post.effective_n is None
    assert "within the 2 strata" in post.interval and post.ci[0] < by_hand < post.ci[1]


def test_within_strata_bootstrap_covers():
    rng = np.random.default_rng(5)
    reps, hit = 150, 0
    truth = None
    for r in range(reps):
        verdict, y, rated, weights = _stratified(rng)
        if truth is None:
            truth = 0.15 * 0.7 + 0.85 * 0.1
        est = calibrated_mean(verdict, y, rated, np.arange(len(y)), weights=weights, seed=r, n_boot=200,
                              strata=verdict.astype(str))
        # the finite population's own mean is what the design estimates
        hit += est.ci[0] <= y.mean() <= est.ci[1]
    assert hit / reps >= 0.9, hit / reps


def test_two_raters_are_resampled_with_the_items():
    rng = np.random.default_rng(6)
    m, n = 300, 60
    truth = rng.integers(0, 6, m).astype(float)
    f = np.clip(truth + rng.integers(-1, 2, m), 0, 5)
    rated = np.arange(m) < n
    same = np.column_stack([truth, truth])
    one = calibrated_mean(f, truth, rated, np.arange(m), seed=2, n_boot=400)
    agree = calibrated_mean(f, truth, rated, np.arange(m), seed=2, n_boot=400, per_rater=same)
    # raters who agree: resampling them changes nothing, draw for draw
    assert agree.ci == pytest.approx(one.ci, abs=1e-12) and agree.n_raters == 2
    # a strict and a lenient rater (two points apart): the interval carries their disagreement
    apart = np.column_stack([np.clip(truth - 1, 0, 5), np.clip(truth + 1, 0, 5)])
    y = apart.mean(axis=1)
    items_only = calibrated_mean(f, y, rated, np.arange(m), seed=2, n_boot=400)
    crossed = calibrated_mean(f, y, rated, np.arange(m), seed=2, n_boot=400, per_rater=apart)
    assert crossed.value == pytest.approx(items_only.value)
    width = lambda e: e.ci[1] - e.ci[0]  # noqa: E731
    assert width(crossed) > 1.5 * width(items_only) and "two-way" in crossed.interval


def test_labels_are_the_raters_majority_not_the_first_rater():
    from trustmh.validation.calibrated import majority
    assert majority(["harmful", "safe", "safe"], "u1") == "safe"  # 'harmful' sorts first
    assert majority([1, 0, 0], "u1") == 0
    ties = {majority(["a", "b"], f"u{k}") for k in range(40)}
    assert ties == {"a", "b"}  # a tie is not always the first label


def test_draws_give_each_models_task_what_a_calibrated_value_needs():
    from collections import Counter
    from trustmh.validation.calibration import MIN_RATED
    from trustmh.validation.design import FrameRow, draw
    sizes = {"big": 60, "mid": 30, "small": 15, "tiny": 8}
    frame = [FrameRow(m, t, str(i), "", str(i % 3 == 0)) for m in ("a", "b") for t, k in sizes.items()
             for i in range(k)]
    for design in ("uniform", "stratified"):
        got = Counter((d.row.model, d.row.task) for d in draw(frame, 40 if design == "uniform" else 80, design, 0))
        for (m, t), k in got.items():
            # all but one item where a task has more than the minimum; a smaller task entirely (and said so)
            assert k >= MIN_RATED if sizes[t] > MIN_RATED else k == sizes[t], (design, m, t, k)
    # the draw's probabilities are what it did: n_t / K_t within each task (uniform)
    for d in draw(frame, 40, "uniform", 0):
        k = sum(1 for e in draw(frame, 40, "uniform", 0) if e.row.task == d.row.task and e.row.model == d.row.model)
        assert d.pi == pytest.approx(k / sizes[d.row.task])


def test_raters_resampled_cover_where_items_alone_do_not():
    """Five raters drawn from a population of raters, each with a lasting bias (sd 0.3) and noise, rate the same
    60 of 300 items; the value is the items' true mean (the rater population's bias averages 0). The
    interval over items alone takes the five raters as the only raters there are and under-covers; the two-way
    bootstrap covers."""
    rng = np.random.default_rng(0)
    reps, m, n, raters = 200, 300, 60, 5
    two_way = items_only = 0
    for rep in range(reps):
        truth = rng.normal(0, 1, m)
        f = truth + rng.normal(0, 0.7, m) + 0.5  # a judge half a point high
        per = truth[:, None] + rng.normal(0, 0.3, raters)[None, :] + rng.normal(0, 0.5, (m, raters))
        rated = np.arange(m) < n
        per[~rated] = np.nan
        y = np.where(rated, np.nanmean(np.where(rated[:, None], per, 0.0), axis=1), 0.0)
        a = calibrated_mean(f, y, rated, np.arange(m), seed=rep, n_boot=300)
        b = calibrated_mean(f, y, rated, np.arange(m), seed=rep, n_boot=300, per_rater=per)
        items_only += a.ci[0] <= truth.mean() <= a.ci[1]
        two_way += b.ci[0] <= truth.mean() <= b.ci[1]
    assert two_way / reps >= 0.9 and items_only / reps <= 0.87, (two_way / reps, items_only / reps)
