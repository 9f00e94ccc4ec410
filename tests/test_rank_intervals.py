"""Bootstrap rank intervals (INFERENCE.md §6, Hall & Miller 2009): items resampled jointly for all models,
each draw ranked, the 2.5-97.5 % quantiles of a model's ranks. Checked by simulation against the true rank,
and by hand on draws whose ranks are known."""

import numpy as np

from trustmh.report.ranks import joint_draws, rank_intervals
from trustmh.scoring.metrics import Table

ACCURACY = [0.50, 0.57, 0.64, 0.71, 0.78]  # five models, true rank 5 (worst) to 1 (best)


def tables(rng, n_items: int) -> list[Table]:
    """Each model's per-item correctness on the same items (an item's difficulty shared by all models, so the
    joint resampling matters), one row per item."""
    ease = rng.normal(0, 1, n_items)
    clusters = np.array([f"item{i}" for i in range(n_items)], dtype=object)
    out = []
    for p in ACCURACY:
        logit = np.log(p / (1 - p)) + ease
        correct = (rng.random(n_items) < 1 / (1 + np.exp(-logit))).astype(float)
        out.append(Table({"correct": correct}, clusters, {}))
    return out


def mean_correct(table, resamples):
    return resamples.mean(table.col("correct"))


def test_rank_intervals_cover_the_true_rank():
    """200 simulated evaluations of 120 items: each model's 95 % rank interval holds its true rank in at least
    90 % of them (all models together), and the intervals say something (the best and worst models are
    separated in most)."""
    rng = np.random.default_rng(44)
    true_rank = [5, 4, 3, 2, 1]
    covered, separated, n = 0, 0, 0
    for rep in range(200):
        draws = joint_draws(tables(rng, 120), mean_correct, n_boot=200, seed=rep)
        intervals, above = rank_intervals(draws)
        covered += sum(lo <= t <= hi for (lo, hi), t in zip(intervals, true_rank))
        n += len(true_rank)
        separated += above[4, 0] >= 0.975
    assert covered / n >= 0.90, covered / n
    assert separated / 200 > 0.9


def test_rank_intervals_by_hand():
    """Three models over four draws with known ranks: A always first; B and C swap; a NaN draw ranks last."""
    draws = np.array([[3.0, 2.0, 1.0], [3.0, 1.0, 2.0], [3.0, 2.0, 1.0], [3.0, np.nan, 2.0]])
    intervals, above = rank_intervals(draws, alpha=0.5)  # the 25-75 % quantiles, lower and higher
    assert intervals[0] == (1, 1)
    assert intervals[1] == (2, 3) and intervals[2] == (2, 3)
    assert above[0, 1] == 1.0 and above[1, 2] == 0.5 and above[2, 1] == 0.5
    # Ties share the best rank in a draw, as the table ranks them.
    intervals, _ = rank_intervals(np.array([[1.0, 1.0, 0.0]] * 10))
    assert intervals == [(1, 1), (1, 1), (3, 3)]


def test_joint_draws_use_one_set_of_picks_for_all_models():
    """The same table given twice gives identical draws: the models are resampled on the same items."""
    rng = np.random.default_rng(1)
    t = tables(rng, 30)[0]
    draws = joint_draws([t, t], mean_correct, n_boot=50, seed=3)
    assert draws.shape == (50, 2) and (draws[:, 0] == draws[:, 1]).all() and draws[:, 0].std() > 0
