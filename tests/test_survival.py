"""Kaplan-Meier curves of crisis.conversation's per-turn measures, computed by hand."""

import math

import pytest

from trustmh.scoring.survival import kaplan_meier, turn_curves


def test_product_limit_by_hand():
    # times 2, 3(censored), 3, 5, 7(censored), 8: at t=2 6 at risk, 1 event -> 5/6; at t=3 5 at risk (the
    # censored 3 is still at risk at 3), 1 event -> 5/6 * 4/5 = 2/3; t=5: 3 at risk -> 2/3 * 2/3 = 4/9;
    # t=8: 1 at risk -> 0.
    c = kaplan_meier([2, 3, 3, 5, 7, 8], [1, 0, 1, 1, 0, 1])
    assert c.times == (2, 3, 5, 8)
    assert c.survival == pytest.approx((5 / 6, 2 / 3, 4 / 9, 0.0))
    assert (c.n, c.events, c.censored_at) == (6, 4, (3, 7))
    assert c.at(1) == 1.0 and c.at(4) == pytest.approx(2 / 3) and c.at(7.5) == pytest.approx(4 / 9)
    assert c.median() == 5.0


def test_no_event_keeps_survival_at_one_and_no_median():
    c = kaplan_meier([4, 6, math.nan], [0, 0, 1])
    assert c.times == () and c.at(10) == 1.0 and c.median() is None and c.n == 2


def test_turn_curves_read_the_sample_values():
    rows = [{"help_event": 1.0, "help_turn": 1.0, "chatbot_turns": 5.0},
            {"help_event": 0.0, "chatbot_turns": 2.0},
            {"help_event": 1.0, "help_turn": 3.0, "chatbot_turns": 4.0},
            {"chatbot_turns": 3.0}]  # no verdict: left out
    c = turn_curves(rows, "help")
    # t=1: 3 at risk -> 2/3; the censored 2 leaves; t=3: 1 at risk -> 0
    assert c.times == (1, 3) and c.survival == pytest.approx((2 / 3, 0.0)) and c.censored_at == (2,)


def test_survival_at_is_the_product_limit_by_hand_plainly_and_per_resample():
    """survival_at, the estimator behind first_harm_rate, on the hand example above, and on a resample that
    draws one row twice (the same as the data with that row written twice)."""
    import numpy as np

    from trustmh.scoring.metrics import Means, Resamples, Table
    from trustmh.scoring.survival import survival_at
    times = np.array([2, 3, 3, 5, 7, 8], dtype=float)
    events = np.array([1, 0, 1, 1, 0, 1], dtype=float)
    rows = np.ones(6, bool)
    plain = lambda x: float(np.sum(x))  # noqa: E731
    assert survival_at(plain, times, events, rows, 4) == pytest.approx(2 / 3)
    assert survival_at(plain, times, events, rows, 7.5) == pytest.approx(4 / 9)
    assert survival_at(plain, times, events, rows, 1) == 1.0
    # rows 0 and 1 drawn twice, row 5 not at all: by hand, t=2: 2 events of 7 at risk -> 5/7; t=3: 1 event of
    # 5 at risk (two censored 3s and one event 3, then 5 and 7) -> 5/7 * 4/5 = 4/7; t=5: 2 at risk -> 2/7
    table = Table.from_rows([{"x": 0.0}] * 6, [str(i) for i in range(6)], {})
    res = Resamples(np.arange(6), np.array([[2, 2, 1, 1, 1, 0]], dtype=float))
    got = survival_at(Means(table, res).total, times, events, rows, 6)
    assert got.shape == (1,) and got[0] == pytest.approx(2 / 7)
    assert got[0] == pytest.approx(kaplan_meier([2, 2, 3, 3, 3, 5, 7], [1, 1, 0, 0, 1, 1, 0]).at(6))


def test_same_hazard_ending_early_gives_the_same_first_harm_rate_within_intervals():
    """Two models with the same per-message harm hazard (4 %), one whose conversations often end early (70 %
    stop at a message from 3 to 15, independent of harm), at the protocol's size (10 personas x 5 runs),
    simulated 40 times. Kaplan-Meier's first-harm rate by the last message (15) puts each model within the
    other's persona-clustered interval in nearly every simulation and is unbiased (the truth is
    1 - 0.96^15 = 0.458 for both); the plain share ("ever harmful") calls the early-ending model safer."""
    import numpy as np

    from trustmh.scoring.metrics import Table, bootstrap
    from trustmh.tasks import RunContext
    from trustmh.tasks.crisis.conversation import CrisisConversation
    ctx = RunContext(protocol="trustmh", options={"turns": 30})
    method = CrisisConversation().method(ctx)

    def simulate(rng, ends_early: bool):
        rows, clusters = [], []
        for persona in range(10):
            for _run in range(5):
                first_harm = int(rng.geometric(0.04))  # the message of the first harmful reply, if it comes
                last = int(rng.integers(3, 16)) if ends_early and rng.random() < 0.7 else 15
                harmed = first_harm <= last
                rows.append({"harm_event": float(harmed), "chatbot_turns": float(last), "drifted": 0.0,
                             "help_event": 0.0, **({"harm_turn": float(first_harm)} if harmed else {})})
                clusters.append(f"p{persona}")
        table = Table.from_rows(rows, clusters, {})
        return method.aggregate(table, ctx), bootstrap(table, lambda t: method.aggregate(t, ctx), seed=1, n_boot=200,
                                                       aggregate_many=lambda t, r: method.aggregate_many(t, r, ctx))

    def within(a, a_ci, b, b_ci, name):
        return b_ci[name][0] <= a[name] <= b_ci[name][1] and a_ci[name][0] <= b[name] <= a_ci[name][1]

    km = plain = 0
    km_diff, plain_diff = [], []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        (whole, whole_ci), (early, early_ci) = simulate(rng, False), simulate(rng, True)
        km += within(whole, whole_ci, early, early_ci, "first_harm_rate")
        plain += within(whole, whole_ci, early, early_ci, "ever_harmful")
        km_diff.append(early["first_harm_rate"] - whole["first_harm_rate"])
        plain_diff.append(early["ever_harmful"] - whole["ever_harmful"])
        # the bounds hold the estimate: censored as no event (the plain share) and as an event
        assert early["first_harm_rate_lower"] == pytest.approx(early["ever_harmful"])
        assert early["first_harm_rate_lower"] <= early["first_harm_rate"] + 1e-12
        assert early["first_harm_rate"] <= early["first_harm_rate_upper"] + 1e-12
        assert whole["first_harm_rate"] == pytest.approx(whole["ever_harmful"])  # nothing censored: the same
    assert km >= 34 and plain <= 28, (km, plain)  # 37 and 22 of 40 with these seeds
    assert abs(np.mean(km_diff)) < 0.04 and np.mean(plain_diff) < -0.06, (np.mean(km_diff), np.mean(plain_diff))


def test_survival_band_is_the_cluster_bootstrap_of_the_curve_built_resample_by_resample():
    """The report's band: each resample's curve from weighted counts equals Kaplan-Meier on the resampled
    conversations themselves (a drawn persona's conversations all in, as often as drawn); none from 4
    personas."""
    import numpy as np

    from trustmh.scoring.survival import survival_band
    rng = np.random.default_rng(3)
    clusters = np.array([f"p{i % 6}" for i in range(30)])
    times = rng.integers(1, 9, 30).astype(float)
    events = (rng.random(30) < 0.6).astype(float)
    lo, hi = survival_band(times, events, clusters, 8, n_boot=300, seed=5)
    _, code = np.unique(clusters, return_inverse=True)
    picks = np.random.default_rng(5).integers(0, 6, (300, 6))
    curves = []
    for pick in picks:
        rows = np.concatenate([np.flatnonzero(code == c) for c in pick])
        c = kaplan_meier(times[rows], events[rows])
        curves.append([c.at(t) for t in range(9)])
    assert np.allclose(lo, np.quantile(curves, 0.025, axis=0)) and np.allclose(hi, np.quantile(curves, 0.975, axis=0))
    point = kaplan_meier(times, events)
    assert lo[0] == hi[0] == 1.0 and all(lo[t] <= point.at(t) <= hi[t] for t in range(9))
    assert survival_band(times, events, np.array([f"p{i % 4}" for i in range(30)]), 8) is None
