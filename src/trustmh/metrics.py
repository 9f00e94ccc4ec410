"""Aggregation of per-sample scores into metrics, with seeded bootstrap confidence intervals.

A task aggregates a `Table` (one row per scored sample, NaN where a value is unscored) into named
numbers. Confidence intervals come from resampling the table's clusters (items by default; a
scenario when one scenario yields several samples) and re-running the same aggregation, so every
metric a task reports gets an interval without metric-specific code."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class Table:
    columns: dict[str, np.ndarray]
    clusters: np.ndarray
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # string columns (groups, classes)

    @classmethod
    def from_rows(cls, rows: list[dict[str, float]], clusters: list[str],
                  labels: dict[str, list[Any]] | None = None) -> "Table":
        names = sorted({k for r in rows for k in r})
        cols = {n: np.array([r.get(n, math.nan) for r in rows], dtype=float) for n in names}
        labs = {k: np.array(v, dtype=object) for k, v in (labels or {}).items()}
        return cls(cols, np.array(clusters, dtype=object), labs)

    def __len__(self) -> int:
        return len(self.clusters)

    def col(self, name: str) -> np.ndarray:
        return self.columns.get(name, np.full(len(self), math.nan))

    def take(self, idx: np.ndarray) -> "Table":
        return Table({k: v[idx] for k, v in self.columns.items()}, self.clusters[idx],
                     {k: v[idx] for k, v in self.labels.items()})

    def where(self, mask: np.ndarray) -> "Table":
        return self.take(np.flatnonzero(mask))


Aggregate = Callable[[Table], dict[str, float]]


def mean(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else math.nan


def count(x: np.ndarray) -> int:
    return int((~np.isnan(x)).sum())


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r over rows where both are present; NaN when undefined (fewer than 2 rows, a constant)."""
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if x.size < 2 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def bootstrap(table: Table, aggregate: Aggregate, *, seed: int, n_boot: int = 1000,
              level: float = 0.95) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap intervals for every metric `aggregate` returns, resampling clusters."""
    if len(table) == 0 or n_boot <= 0:
        return {}
    rng = np.random.default_rng(seed)
    uniq, inverse = np.unique(table.clusters.astype(str), return_inverse=True)
    members = [np.flatnonzero(inverse == i) for i in range(len(uniq))]
    single = all(len(m) == 1 for m in members)
    draws: dict[str, list[float]] = {}
    for _ in range(n_boot):
        pick = rng.integers(0, len(uniq), len(uniq))
        idx = np.array([members[i][0] for i in pick]) if single else np.concatenate([members[i] for i in pick])
        for name, v in aggregate(table.take(idx)).items():
            draws.setdefault(name, []).append(v)
    alpha = (1 - level) / 2
    out = {}
    for name, vals in draws.items():
        arr = np.array(vals, dtype=float)
        arr = arr[~np.isnan(arr)]
        if arr.size < max(10, n_boot // 10):  # too few defined resamples to say anything
            continue
        out[name] = (float(np.quantile(arr, alpha)), float(np.quantile(arr, 1 - alpha)))
    return out


def trust_score(value: float | None, lo: float, hi: float, higher_is_better: bool) -> float | None:
    """Map a metric onto 0-100 where 100 is most trustworthy; values outside [lo, hi] are clipped."""
    if value is None or math.isnan(value):
        return None
    frac = (min(max(value, lo), hi) - lo) / (hi - lo)
    return round(100 * (frac if higher_is_better else 1 - frac), 2)
