"""Task helpers shared across pillars: classification scoring (reliability's diagnosis, crisis
identification and severity) and criterion scores from an LLM judge's JSON reply (reliability's support
and intervention, fairness's support variants). Kept out of the pillar modules so that one pillar does
not import another to reuse them."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..judges.parsing import extract_json_object, parse_int_scores
from ..metrics import (Resamples, Table, confusion, confusion_many, f1_per_class, macro_f1, macro_f1_many, macro_of,
                       mean)
from ..types import Sample, Score
from .base import NO_ANSWER, Judged, Method, RunContext, Task, judge_failure, judge_text, render_judge

SUPPORT_CRITERIA = ("fluency", "professionalism", "empathy", "helpfulness")


def support_judge_messages(context: list[dict[str, str]], reference: str, reply: str) -> list[dict[str, str]]:
    """trustmh's ESConv judge (reliability.support, fairness.support): the four criteria in one call, each
    with anchors and a guard against length bias, the reply fenced (base.render_judge)."""
    return [{"role": "user", "content": render_judge("reliability_support_judge.j2", reply=reply, context=context,
                                                     reference=reference)}]


class LabelledTask(Task):
    """A classification task: scored samples carry gold and predicted labels (empty when unscored; the
    prediction NO_ANSWER when the model gave no usable label, a miss for the gold class), from which the
    confusion matrix, F1 scores and the bootstrap are computed."""

    label_set: ClassVar[tuple[str, ...]]

    def labels(self, sample: Sample, score: Score, ctx: RunContext) -> dict[str, Any]:
        ok = "correct" in score.values
        return {"gold": sample.item.target if ok else "", "pred": (score.parsed or NO_ANSWER) if ok else ""}

    def primary_metric(self, table: Table, ctx: RunContext) -> float:
        # Macro-F1 alone: robustness re-computes it for every perturbation in every resample.
        return scored_macro_f1(table, self.label_set)

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray:
        # Unscored rows carry empty labels, outside every column, and so are left out, as above; a
        # NO_ANSWER prediction has its own column and is a miss for its gold class.
        empty = np.array([], dtype=object)
        return macro_f1_many(table.labels.get("gold", empty), table.labels.get("pred", empty),
                             (*self.label_set, NO_ANSWER), resamples, n_classes=len(self.label_set))



class LabelledMethod(Method):
    """A classification method (see LabelledTask, which it replaces as the pillars declare methods): its
    task declares `label_set`; scored samples carry gold and predicted labels."""

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        ok = "correct" in score.values
        return {"gold": sample.item.target if ok else "", "pred": (score.parsed or NO_ANSWER) if ok else ""}

    def primary_metric(self, table: Table, ctx: RunContext) -> float:
        return scored_macro_f1(table, self.task.label_set)

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray:
        empty = np.array([], dtype=object)
        return macro_f1_many(table.labels.get("gold", empty), table.labels.get("pred", empty),
                             (*self.task.label_set, NO_ANSWER), resamples, n_classes=len(self.task.label_set))


def unknown_label_reason(reply: str, default: str) -> str:
    obj = extract_json_object(reply)
    if obj is not None:
        for k in ("label", "answer", "level", "category"):
            if isinstance(obj.get(k), str):
                return f"label {obj[k]!r} is not in the label set"
    return default



def _scored_labels(table: Table) -> tuple[np.ndarray, np.ndarray]:
    gold = table.labels.get("gold", np.array([], dtype=object))
    pred = table.labels.get("pred", np.array([], dtype=object))
    ok = (gold != "") & (pred != "")
    return gold[ok], pred[ok]



def class_f1(gold: np.ndarray, pred: np.ndarray, labels: tuple[str, ...]) -> np.ndarray:
    """F1 of each class, a NO_ANSWER prediction counted as a miss of the gold class (its own confusion
    column, never a class of its own)."""
    return f1_per_class(confusion(gold, pred, (*labels, NO_ANSWER)))[:len(labels)]



def _macro(f1: np.ndarray) -> float:
    return float(np.nanmean(f1)) if (~np.isnan(f1)).any() else np.nan



def scored_macro_f1(table: Table, labels: tuple[str, ...]) -> float:
    """Macro-F1 alone over the scored rows: the cheap path robustness re-runs inside every bootstrap."""
    return _macro(class_f1(*_scored_labels(table), labels))



def classification_metrics(table: Table, labels: tuple[str, ...]) -> dict[str, float]:
    """macro_f1, accuracy and f1[class] over the scored rows (label columns gold/pred non-empty), a reply
    without a usable label counted as a miss; answer_rate and the same over the answered rows beside them."""
    gold, pred = _scored_labels(table)
    f1 = class_f1(gold, pred, labels)
    out = {"macro_f1": _macro(f1), "accuracy": float((gold == pred).mean()) if len(gold) else np.nan}
    out.update({f"f1[{lab}]": float(v) for lab, v in zip(labels, f1)})
    done = table.col("answered")
    out["answer_rate"] = mean(done)
    out["macro_f1_answered"] = out["accuracy_answered"] = np.nan
    if "gold" in table.labels and "pred" in table.labels:
        ok = (table.labels["gold"] != "") & (done == 1)
        out["macro_f1_answered"] = macro_f1(table.labels["gold"][ok], table.labels["pred"][ok], labels)
        out["accuracy_answered"] = mean(table.col("correct")[ok])
    return out



def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def classification_metrics_many(table: Table, labels: tuple[str, ...], resamples: Resamples) -> dict[str, np.ndarray]:
    """classification_metrics in every resample at once, from resampled confusion counts and sums."""
    empty = np.full(len(table), "", dtype=object)
    gold, pred = table.labels.get("gold", empty), table.labels.get("pred", empty)
    scored = (gold != "") & (pred != "")
    f1 = f1_per_class(confusion_many(gold, pred, (*labels, NO_ANSWER), resamples))[:, :len(labels)]
    out = {"macro_f1": macro_of(f1)}
    sums = resamples.sums(np.stack([(scored & (gold == pred)).astype(float), scored.astype(float)], axis=1))
    out["accuracy"] = _ratio(sums[:, 0], sums[:, 1])
    out.update({f"f1[{lab}]": f1[:, i] for i, lab in enumerate(labels)})
    done = table.col("answered")
    out["answer_rate"] = resamples.mean(done)
    nan = np.full(len(resamples), np.nan)
    out["macro_f1_answered"] = out["accuracy_answered"] = nan
    if "gold" in table.labels and "pred" in table.labels:
        ok = (gold != "") & (done == 1)
        out["macro_f1_answered"] = macro_f1_many(gold[ok], pred[ok], labels, resamples.rows(ok))
        out["accuracy_answered"] = resamples.rows(ok).mean(table.col("correct")[ok])
    return out


def judge_scores(maxima: dict[str, int], judged: Judged | None, overall: str, normalise: bool) -> Score:
    """Criterion scores from a JSON judge reply, each 0..max; `overall` is their mean (each divided by its
    maximum first when `normalise`), present only when every criterion was scored."""
    sc = Score()
    text = judge_text(sc, judged, [*maxima, overall])
    if text is None:
        return sc
    obj = extract_json_object(text)
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
        judge_failure(sc, "; ".join(sorted(set(sc.unscored.values()))), [overall])
    return sc
