"""The originals' rules for classification scores (crisis identification's predecessor, C-SSRS and SWMH
scorers, sklearn's zero_division=0), on confusion matrices of one table or of a block of resamples alike.
Neutral: any pillar's paper protocol uses them."""

from __future__ import annotations

import math

import numpy as np

from ..scoring.metrics import Resamples, Table, confusion_many, macro_of


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


def class_block(out: dict, gold: np.ndarray, pred: np.ndarray, classes: list[str], r: Resamples,
                report_classes: tuple[str, ...], parts: tuple[str, ...]) -> np.ndarray:
    """Into `out`: macro_f1/precision/recall over the classes present, and `parts` (precision, recall, f1,
    support) per class of `report_classes` as `<part>[<class>]`; returns the confusion matrices."""
    cm = confusion_many(gold, pred, classes, r)
    rep = class_report(cm)
    for part in ("f1", "precision", "recall"):
        out[f"macro_{part}"] = macro_present(rep[part])
    index = {c: i for i, c in enumerate(classes)}
    for lab in report_classes:
        for part in parts:
            out[f"{part}[{lab}]"] = rep[part][:, index[lab]] if lab in index else np.full(len(r), math.nan)
    return cm


def confusion_keys(out: dict, gold: np.ndarray, pred: np.ndarray, rows: tuple[str, ...],
                   columns: tuple[str, ...], r: Resamples) -> None:
    """Into `out`: `confusion[<gold>-><pred>]`, the count of each cell, for gold `rows` and pred `columns`."""
    cm = confusion_many(gold, pred, columns, r)
    for i, g in enumerate(rows):
        for j, p in enumerate(columns):
            out[f"confusion[{g}->{p}]"] = cm[:, i, j].astype(float)


def paper_classification(table: Table, r: Resamples, classes: tuple[str, ...]) -> dict[str, np.ndarray]:
    """What a predecessor scorer of the Python-Work family reports for a classifier whose every reading is
    one of `classes` (SWMH's score_classification) beyond classification_metrics' macro_f1, accuracy and
    f1[class]: micro-F1, macro precision and recall over the classes present, per class precision, recall,
    support and predicted count, the class count and the confusion matrix; over the rows with a gold label
    and the paper's prediction (labels gold, pred)."""
    gold, pred = table.labels.get("gold"), table.labels.get("pred")
    if gold is None or pred is None:
        return {}
    out: dict[str, np.ndarray] = {}
    cm = class_block(out, gold, pred, list(classes), r, classes, ("precision", "recall", "support"))
    del out["macro_f1"]  # classification_metrics' (the same where every reading is a class): f1[c] too
    with np.errstate(invalid="ignore", divide="ignore"):
        n = cm.sum(axis=(1, 2))
        out["micro_f1"] = np.where(n > 0, np.trace(cm, axis1=1, axis2=2) / np.where(n > 0, n, 1), math.nan)
    out["num_classes"] = (cm.sum(axis=1) + cm.sum(axis=2) > 0).sum(axis=1).astype(float)
    for i, lab in enumerate(classes):
        out[f"pred_count[{lab}]"] = cm[:, :, i].sum(axis=1).astype(float)
    confusion_keys(out, gold, pred, classes, classes, r)
    return out


def value_stats(values: np.ndarray, r: Resamples) -> dict[str, np.ndarray]:
    """n, population std, min and max of the non-NaN `values` in each resample (the predecessors' summaries:
    summarize_judge_scores, the ESConv judge's per-criterion mean/min/max/std), from the distinct values
    and their resampled counts; two passes for the std, as numpy's, so equal values give exactly 0. NaN
    where a resample holds no value. Also gives `counts` (resamples x distinct) and `distinct`."""
    ok = ~np.isnan(values)
    distinct, codes = np.unique(values[ok], return_inverse=True)
    counts = r.rows(ok).counts(codes.ravel(), len(distinct))
    n = counts.sum(axis=1)
    held = counts > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = (counts @ distinct) / n
        std = np.sqrt((counts * (distinct[None, :] - centre[:, None]) ** 2).sum(axis=1) / n)
    nan = np.full(len(r), math.nan)
    lo = np.where(held, distinct[None, :], np.inf).min(axis=1, initial=np.inf)
    hi = np.where(held, distinct[None, :], -np.inf).max(axis=1, initial=-np.inf)
    return {"n": n, "std": np.where(n > 0, std, nan), "min": np.where(n > 0, lo, nan),
            "max": np.where(n > 0, hi, nan), "counts": counts, "distinct": distinct}


def criterion_stats(table: Table, r: Resamples, criteria: tuple[str, ...]) -> dict[str, np.ndarray]:
    """`min[c]`, `max[c]` and `std[c]` (population) of each criterion column over its scored rows: what the
    ESConv predecessor reports beside each judge criterion's mean."""
    out = {}
    for c in criteria:
        stats = value_stats(table.col(c), r)
        out.update({f"{part}[{c}]": stats[part] for part in ("min", "max", "std")})
    return out
