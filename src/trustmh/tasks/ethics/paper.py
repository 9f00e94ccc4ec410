"""The ethics pillar's paper method: the paper's own code (TrustMH_Bench Ethics.zip), read at run time
(PAPER_PROTOCOL.md §0.3 E-gen, E-judge, E-set, E-call), EthicMH decoded as its loader decodes it, its
reading of replies and verdicts (common.py) and the rest of what its pipeline reports."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ...data.extract import call_keywords, local_string, message_roles, module_constant
from ...data.loaders import read_ethicmh_text
from ...data.methods import MethodError
from ...scoring.metrics import Means, Table, mean
from ...types import Item, Sample, Score
from .common import PRINCIPLES, ReasoningMethod, upstream_judge_json, upstream_principle_scores
from ..base import Rubric, RunContext

ETHICS_SRC = "Qiyuan0130+TrustMH_Bench/TrustMH_Bench/DimGroup2/Ethics.zip/Ethics/src"
PROMPTS = f"{ETHICS_SRC}/prompts.py"
PAPER_JUDGE = Rubric("judge", role="llm", method=PROMPTS)


def _call_model(ctx: RunContext) -> tuple[str, set[str]]:
    """The role of the one message `call_model` sends, and the settings it passes to the API."""
    roles = message_roles(f"{ETHICS_SRC}/llm.py", ctx.methods_root, "call_model")
    if len(roles) != 1:
        raise MethodError(f"{ETHICS_SRC}/llm.py#call_model: expected one message, found roles {roles}")
    sent = set(call_keywords(f"{ETHICS_SRC}/llm.py", ctx.methods_root, "call_model", "create")) - {"model", "messages"}
    return roles[0], sent


def ci_margin(means: Means, column: str) -> Any:
    """The Ethics original's 95% interval half-width of a column's mean (its _compute_confidence_interval):
    z = 1.96 from 30 values, else Student's t from its table for n - 1 degrees of freedom, times the sample
    std / sqrt(n); 0.0 for a single value, NaN for none."""
    x = means.table.col(column)
    centre = mean(x) if (~np.isnan(x)).any() else 0.0  # centring keeps the squares from cancelling
    n = np.asarray(means.count(column), dtype=float)
    m1, m2 = np.asarray(means.of(x - centre), float), np.asarray(means.of((x - centre) ** 2), float)
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.sqrt(np.maximum(m2 - m1 ** 2, 0.0) * n / (n - 1))
        t = np.vectorize(_t95, otypes=[float])(n)
        margin = np.where(n >= 2, t * sd / np.sqrt(n), np.where(n == 1, 0.0, math.nan))
    return float(margin) if means.resamples is None else margin


def _t95(n: float) -> float:
    """The two-sided 95% t value the Ethics original looks up for n values (df = n - 1; 2.0 past its table)."""
    if n >= 30:
        return 1.96
    table = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
             2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045)
    df = int(n) - 1
    return table[df - 1] if 1 <= df <= len(table) else 2.0


class ReasoningPaper(ReasoningMethod):
    """ethics.reasoning as Ethics/src/pipeline.py runs it: the file decoded as its loader decodes it, its
    prompts (its judge also shown the gold option and the failure modes), settings and parsers."""

    exact_params = True

    def read_text(self, path: Path) -> str:
        return read_ethicmh_text(path, upstream=True)  # gb18030, mojibake included, as the paper read it

    def fields(self, row: dict[str, str]) -> dict[str, str]:
        return {**super().fields(row), "expected_reasoning": row["expected_reasoning"] or "",
                "model_behavior": row.get("model_behavior") or ""}

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        template = local_string(PROMPTS, ctx.methods_root, "build_reasoning_prompt", "prompt")
        role, _ = _call_model(ctx)
        return [{"role": role, "content": template.render({k: item.input[k] for k in template.fields})}]

    def params(self, ctx: RunContext) -> dict[str, Any]:
        _, sent = _call_model(ctx)  # model, temperature and messages: no max_tokens
        params = {"temperature": module_constant(f"{ETHICS_SRC}/settings.py", ctx.methods_root, "DEFAULT_TEMPERATURE")}
        return {k: v for k, v in params.items() if k in sent}

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return (PAPER_JUDGE,)

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        # The pipeline's second call_model (the judge's) passes its temperature as a literal; call_model
        # sends nothing else.
        kw = call_keywords(f"{ETHICS_SRC}/pipeline.py", ctx.methods_root, "run_reasoning_evaluation", "call_model", 1)
        _, sent = _call_model(ctx)
        return {k: v for k, v in kw.items() if k in sent and not isinstance(v, str)}

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        template = local_string(PROMPTS, ctx.methods_root, "build_judge_prompt", "prompt")
        values = {**sample.item.input, "model_reply": reply}
        role, _ = _call_model(ctx)
        return [{"role": role, "content": template.render({k: values[k] for k in template.fields})}]

    def pick_parse(self, strict: str | None, upstream: str | None) -> str | None:
        return upstream

    def principle_scores(self, sc: Score, text: str) -> dict[str, float]:
        scores = upstream_principle_scores(upstream_judge_json(text))
        sc.unscored.update({k: "judge score missing or outside 1-5" for k in PRINCIPLES if k not in scores})
        return scores

    def extra_metrics(self, table: Table, means: Means) -> dict[str, Any]:
        """The rest of what the original's pipeline reports (_evaluate_classification_task,
        _compute_average_scores): its "precision" (correct / answered: a wrong choice is its false positive),
        "recall" (correct / items with gold: a wrong or missing choice is its false negative, so it equals
        accuracy) and their F1, each 0.0 where undefined as there; and the t-based 95% half-width
        (ci_margin) of each principle's mean."""
        correct = table.col("correct")
        answered_ = np.where(np.isnan(correct), math.nan, table.col("answered"))
        acc, ans = np.asarray(means("correct"), float), np.asarray(means.of(answered_), float)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(ans > 0, acc / np.where(ans > 0, ans, 1), 0.0)
            f1 = np.where(precision + acc > 0, 2 * precision * acc / np.where(precision + acc > 0, precision + acc, 1),
                          0.0)
        scalar = means.resamples is None
        out = {"precision": float(precision) if scalar else precision, "recall": means("correct"),
               "f1": float(f1) if scalar else f1}
        out.update({f"{k}_ci_margin": ci_margin(means, k) for k in PRINCIPLES})
        return out
