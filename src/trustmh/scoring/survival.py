"""Kaplan-Meier survival curves for events within a conversation (crisis.conversation's per-turn measures).

A conversation that ends before the event is censored at its last chatbot message: it says the event had
not happened by then, and nothing after. Its share of the curve goes to the conversations still running,
which is what the product-limit estimator does: S(t) = prod over event times t_j <= t of (1 - d_j / n_j),
d_j the events at t_j and n_j the conversations still at risk (not yet event, not yet censored) at t_j."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Curve:
    times: tuple[int, ...]  # the event times, ascending
    survival: tuple[float, ...]  # S(t) just after each
    n: int  # conversations
    events: int
    censored_at: tuple[int, ...]  # the censoring times (marked on a chart)

    def at(self, t: float) -> float:
        """S(t): the share with no event by message t."""
        s = 1.0
        for time, value in zip(self.times, self.survival):
            if time > t:
                break
            s = value
        return s

    def median(self) -> float | None:
        """The first time S falls to 0.5 or below; None while it has not."""
        return next((float(t) for t, s in zip(self.times, self.survival) if s <= 0.5), None)


def kaplan_meier(times: list[float] | np.ndarray, events: list[float] | np.ndarray) -> Curve:
    """`times`: the event's message number, or the last message of a conversation without it; `events`:
    1 where the event happened, 0 where censored. NaN rows (no verdict) are left out."""
    t = np.asarray(times, dtype=float)
    e = np.asarray(events, dtype=float)
    keep = ~(np.isnan(t) | np.isnan(e))
    t, e = t[keep], e[keep]
    out_t, out_s = [], []
    s = 1.0
    for time in sorted(set(t[e == 1].tolist())):
        at_risk = int((t >= time).sum())
        d = int(((t == time) & (e == 1)).sum())
        s *= 1.0 - d / at_risk
        out_t.append(int(time))
        out_s.append(s)
    return Curve(tuple(out_t), tuple(out_s), int(len(t)), int(e.sum()),
                 tuple(sorted(int(x) for x in t[e == 0] if math.isfinite(x))))


def survival_at(total: Callable[[np.ndarray], Any], times: np.ndarray, events: np.ndarray, rows: np.ndarray,
                t: float) -> Any:
    """S(t), the same product-limit estimate over the `rows` (a mask), with every count taken by `total`,
    which sums an indicator over the rows: plainly for the point estimate, or per bootstrap resample
    (`Means.total`, persona-clustered draws), which gives S(t) of every resample at once. An event time at
    which a resample has no conversation at risk has no factor there."""
    s = np.ones_like(np.asarray(total(rows), dtype=float))  # a float, or one per resample
    hit = rows & (events == 1)
    for tj in sorted(set(times[hit & (times <= t)].tolist())):
        d = np.asarray(total(hit & (times == tj)), dtype=float)
        n = np.asarray(total(rows & (times >= tj)), dtype=float)
        s = s * np.where(n > 0, 1.0 - d / np.where(n > 0, n, 1.0), 1.0)
    return float(s) if np.ndim(s) == 0 else s


def survival_band(times: np.ndarray, events: np.ndarray, clusters: np.ndarray, t_max: int, *, n_boot: int = 400,
                  seed: int = 0, min_clusters: int = 5,
                  level: float = 0.95) -> tuple[np.ndarray, np.ndarray] | None:
    """A pointwise percentile interval of S(t) at t = 0 .. t_max from a cluster bootstrap (a persona's
    conversations drawn together), each resample's S(t) from its weighted counts (`survival_at`); None
    from fewer than `min_clusters` clusters, where a bootstrap is false certainty (INFERENCE.md §2).
    NaN rows (no verdict) are left out."""
    from .metrics import Resamples
    t, e = np.asarray(times, dtype=float), np.asarray(events, dtype=float)
    keep = ~(np.isnan(t) | np.isnan(e))
    t, e = t[keep], e[keep]
    _, inverse = np.unique(np.asarray(clusters)[keep].astype(str), return_inverse=True)
    k = int(inverse.max()) + 1 if len(inverse) else 0
    if k < min_clusters:
        return None
    picks = np.random.default_rng(seed).integers(0, k, (n_boot, k))
    weights = np.stack([np.bincount(p, minlength=k) for p in picks]).astype(float)
    res = Resamples(inverse.ravel(), weights)
    rows = np.ones(len(t), bool)
    curves = np.stack([survival_at(res.sums, t, e, rows, x) for x in range(t_max + 1)], axis=1)  # (n_boot, t)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(curves, (alpha, 1 - alpha), axis=0)  # one partition for both (as percentile_interval)
    return lo, hi


def turn_data(rows: list[dict[str, float]], event: str, clusters: list[str] | None = None
              ) -> tuple[list[float], list[float], list[str]]:
    """(times, events, clusters) of `event` ("harm" or "help") over conversations' values:
    `<event>_event`, `<event>_turn`, `chatbot_turns`; a conversation without a verdict, or whose simulated
    person drifted (the one exclusion rule of every metric), is left out."""
    times, events, kept = [], [], []
    for i, v in enumerate(rows):
        hit = v.get(f"{event}_event")
        if hit is None or (isinstance(hit, float) and math.isnan(hit)) or v.get("drifted") == 1.0:
            continue
        times.append(v.get(f"{event}_turn", math.nan) if hit == 1 else v.get("chatbot_turns", math.nan))
        events.append(hit)
        kept.append(clusters[i] if clusters is not None else str(i))
    return times, events, kept


def turn_curves(rows: list[dict[str, float]], event: str) -> Curve:
    """The Kaplan-Meier curve of `event` over conversations' values (`turn_data`)."""
    times, events, _ = turn_data(rows, event)
    return kaplan_meier(times, events)
