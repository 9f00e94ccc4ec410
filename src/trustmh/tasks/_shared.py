"""Task helpers shared across pillars: classification scoring (reliability's diagnosis, crisis
identification and severity) and criterion scores from an LLM judge's JSON reply (reliability's support
and intervention, fairness's support variants). Kept out of the pillar modules so that one pillar does
not import another to reuse them."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..judges.parsing import extract_json_object, parse_int_scores
from ..metrics import Table, confusion, f1_per_class, macro_f1
from ..types import Sample, Score
from .base import Judged, RunContext, Task

SUPPORT_CRITERIA = ("fluency", "professionalism", "empathy", "helpfulness")


class LabelledTask(Task):
    """A classification task: scored samples carry gold and predicted labels (empty when unscored),
    from which the confusion matrix, F1 scores and the bootstrap are computed."""

    label_set: ClassVar[tuple[str, ...]]

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        ok = "correct" in score.values
        return {"gold": sample.item.target if ok else "", "pred": score.parsed if ok else ""}

    def primary_metric(self, table: Table, ctx: RunContext) -> float:
        # Macro-F1 alone: robustness re-computes it for every perturbation in every resample.
        return scored_macro_f1(table, self.label_set)


def unknown_label_reason(reply: str, default: str) -> str:
    obj = extract_json_object(reply)
    if obj is not None:
        for k in ("label", "answer", "level", "category"):
            if isinstance(obj.get(k), str):
                return f"label {obj[k]!r} is not in the label set"
    return default


def scored_macro_f1(table: Table, labels: tuple[str, ...]) -> float:
    """Macro-F1 alone over the scored rows: the cheap path robustness re-runs inside every bootstrap."""
    gold = table.labels.get("gold", np.array([], dtype=object))
    pred = table.labels.get("pred", np.array([], dtype=object))
    ok = (gold != "") & (pred != "")
    return macro_f1(gold[ok], pred[ok], labels)


def classification_metrics(table: Table, labels: tuple[str, ...]) -> dict[str, float]:
    """macro_f1, accuracy and f1[class] over the scored rows (label columns gold/pred non-empty)."""
    gold = table.labels.get("gold", np.array([], dtype=object))
    pred = table.labels.get("pred", np.array([], dtype=object))
    ok = (gold != "") & (pred != "")
    gold, pred = gold[ok], pred[ok]
    f1 = f1_per_class(confusion(gold, pred, labels))
    out = {"macro_f1": macro_f1(gold, pred, labels), "accuracy": float((gold == pred).mean()) if len(gold) else np.nan}
    out.update({f"f1[{lab}]": float(v) for lab, v in zip(labels, f1)})
    return out


def judge_scores(maxima: dict[str, int], judged: Judged | None, overall: str, normalise: bool) -> Score:
    """Criterion scores from a JSON judge reply, each 0..max; `overall` is their mean (each divided by its
    maximum first when `normalise`), present only when every criterion was scored."""
    sc = Score()
    if judged is None or judged.text is None:
        reason = judged.reason if judged else "no judge"
        sc.unscored.update({c: reason for c in [*maxima, overall]})
        return sc
    obj = extract_json_object(judged.text)
    values: dict[str, float] = {}
    for c, hi in maxima.items():
        got, reasons = parse_int_scores(obj, [c], 0, hi)
        if c in got and got[c] != int(got[c]):
            reasons = {c: f"judge value for '{c}' is not a whole number"}
            got = {}
        values.update(got)
        sc.unscored.update(reasons)
    sc.values.update(values)
    sc.parsed = values
    if len(values) == len(maxima):
        parts = [values[c] / maxima[c] if normalise else values[c] for c in maxima]
        sc.values[overall] = float(np.mean(parts))
    else:
        sc.unscored[overall] = "; ".join(sorted(set(sc.unscored.values())))
    return sc
