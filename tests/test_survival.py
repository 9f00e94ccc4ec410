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
