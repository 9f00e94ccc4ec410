"""The originals' rules for classification scores (crisis identification's predecessor, C-SSRS and SWMH
scorers, sklearn's zero_division=0), on confusion matrices of one table or of a block of resamples alike.
Neutral: any pillar's paper protocol uses them."""

from __future__ import annotations

import math

import numpy as np

from ..metrics import macro_of


def class_report(cm: np.ndarray) -> dict[str, np.ndarray]:
    """Per-class precision, recall, F1 and support of confusion matrices (..., k, k) by the originals'
    rule (the crisis predecessor's `x/y if y > 0 else 0.0`, sklearn's zero_division=0): each part is 0.0
    where its denominator is 0, so a predicted class with no gold item has recall 0.0. A class neither in
    the gold labels nor predicted is no class of that (re)sample: NaN in every part, and `present` False."""
    cm = np.asarray(cm, dtype=float)
    tp = np.diagonal(cm, axis1=-2, axis2=-1)
    n_gold, n_pred = cm.sum(axis=-1), cm.sum(axis=-2)
    present = (n_gold + n_pred) > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(n_pred > 0, tp / np.where(n_pred > 0, n_pred, 1), 0.0)
        recall = np.where(n_gold > 0, tp / np.where(n_gold > 0, n_gold, 1), 0.0)
        both = precision + recall
        f1 = np.where(both > 0, 2 * precision * recall / np.where(both > 0, both, 1), 0.0)
    nan = np.full(present.shape, math.nan)
    return {"precision": np.where(present, precision, nan), "recall": np.where(present, recall, nan),
            "f1": np.where(present, f1, nan), "support": np.where(present, n_gold, nan), "present": present}


def macro_present(per_class: np.ndarray) -> np.ndarray:
    """Mean over the last axis of the classes present (not NaN): sklearn's average='macro' over the labels
    in gold or predictions; NaN where a (re)sample has no class at all."""
    return macro_of(per_class.reshape(-1, per_class.shape[-1])).reshape(per_class.shape[:-1])
