"""Adjusting the p-values of many tests made at once (`trustmh gate --baseline`, `trustmh compare`).

A gate that tests every task, pillar and overall score at alpha fails an unchanged model far more often than
alpha: with m independent tests, 1 - (1 - alpha)^m. The adjusted p-values here are compared with alpha as
they are (reject where adjusted p < alpha):

- holm: Holm's step-down (Holm 1979, "A simple sequentially rejective multiple test procedure"). Sorted
  p_(1) <= ... <= p_(m), adjusted p_(i) = max over j <= i of min(1, (m - j + 1) p_(j)). Controls the
  family-wise error rate (the chance of any false alarm) under any dependence between the tests.
- bonferroni: min(1, m p). Also family-wise; never less conservative than Holm.
- bh: Benjamini & Hochberg (1995) q-values: adjusted p_(i) = min over j >= i of min(1, m p_(j) / j).
  Controls the false-discovery rate (the expected share of false alarms among the alarms) for independent
  or positively dependent tests: for exploring, not for failing a build.
- none: the raw p-values (labelled as unadjusted wherever they are shown)."""

from __future__ import annotations

import numpy as np

CORRECTIONS = ("holm", "bonferroni", "none")  # what a gate may run; bh controls no family-wise error
DESCRIBE = {"holm": "Holm (family-wise error)", "bonferroni": "Bonferroni (family-wise error)",
            "bh": "Benjamini-Hochberg (false-discovery rate)", "none": "none (p-values unadjusted)"}


def adjust(p: list[float] | np.ndarray, method: str) -> np.ndarray:
    """The adjusted p-values of `p` (one family), in the order given."""
    p = np.asarray(p, dtype=float)
    m = p.size
    if m == 0 or method == "none":
        return p.copy()
    if method == "bonferroni":
        return np.minimum(1.0, m * p)
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        ranked = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked))
    elif method == "bh":
        ranked = np.minimum.accumulate((m * ranked / np.arange(1, m + 1))[::-1])[::-1]
        ranked = np.minimum(1.0, ranked)
    else:
        raise ValueError(f"unknown correction {method!r}")
    out = np.empty(m)
    out[order] = ranked
    return out
