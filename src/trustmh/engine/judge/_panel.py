"""Phase 2 for a judge panel (several --judge): each judge's verdicts scored by the task, combined into the
panel's per-sample values, and the judges' own values and agreement.

A sample's reply is scored once per judge, by the task's own `score` with that judge's verdicts (a task
knows nothing of panels). The panel's values are those per-sample values combined by
`agreement.combine_values`: the mean of a score, the strict majority of a label (a value that is 0 or 1
for every judge and sample of the task), a tie or too few usable verdicts a judge failure with its
reason. The task then aggregates the panel's values as it would one judge's, so the task's metrics are
the panel's. Beside them (`PanelResult`): each judge's own value of the task, and Krippendorff's alpha of
the judges, with a bootstrap interval over samples, on the primary value and on every value two judges
give differently somewhere (values that do not depend on the judge, such as a crisis resource found in
the reply, are left out)."""

from __future__ import annotations

import collections
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...scoring import ALPHA_MIN
from ...scoring.agreement import alpha_level, combine_values, judge_alpha, unanimous, value_kinds
from ...judges.rubric import Judged, Verdicts
from ...scoring.metrics import count, derived_seed
from ...tasks import RunContext, Task
from ...types import Score

if TYPE_CHECKING:  # results.json's models (pydantic) load when a panel is scored, after the requests went out
    from ...scoring.results import PanelResult

PANEL = "judge panel"


def judge_parts(parts: dict[str, tuple], own: dict[str, tuple], llm_rubrics: set[str]) -> dict[str, tuple]:
    """A sample's stored parts as one judge of the panel sees them: the generation and the other roles'
    verdicts as stored, the LLM rubrics' verdicts this judge's own (absent: not run)."""
    out = {k: v for k, v in parts.items() if k not in llm_rubrics}
    out.update({k: v for k, v in own.items() if k in llm_rubrics})
    return out


def panel_score(scores: list[Score], kinds: dict[str, str], primary: str) -> Score:
    """One sample's Score for the panel from each judge's Score of it (see the module docstring). The model's
    own no-answer is the one a strict majority of the judges' scorings gives (nearly always all of them)."""
    values, failed = combine_values([s.values for s in scores], kinds)
    unscored: dict[str, str] = {}
    for c in sorted({c for s in scores for c in s.unscored} - set(values)):
        unscored[c] = "; ".join(sorted({s.unscored[c] for s in scores if c in s.unscored}))
    for c, why in failed.items():
        unscored[c] = f"{PANEL}: {why}"
    judge_failed = None
    if failed:
        judge_failed = f"{PANEL}: {failed.get(primary) or failed[min(failed)]}"
    elif all(s.judge_failed for s in scores):
        judge_failed = _majority([s.judge_failed for s in scores]) or "; ".join(sorted({s.judge_failed for s in scores}))
    parsed = [s.parsed for s in scores]
    notes = list(dict.fromkeys(n for s in scores for n in s.notes))
    return Score(values=values, unscored=unscored, no_answer=_majority([s.no_answer for s in scores]),
                 judge_failed=judge_failed, parsed=parsed[0] if all(p == parsed[0] for p in parsed) else parsed,
                 notes=notes)


def _majority(xs: list[Any]) -> Any:
    top = collections.Counter(xs).most_common(2)
    return top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) and 2 * top[0][1] > len(xs) else None


def merged_verdicts(judges: list[str], verdicts: list[Verdicts | None]) -> Verdicts | None:
    """The panel's verdicts as samples.jsonl shows them: per rubric, every judge's text (or reason) in
    turn, each led by the judge's name."""
    if all(v is None for v in verdicts):
        return None
    names = list(dict.fromkeys(n for v in verdicts if v for n in v))
    out = Verdicts()
    for n in names:
        texts = [f"[{j}] {v[n].text}" for j, v in zip(judges, verdicts) if v and n in v and v[n].text is not None]
        reasons = [f"[{j}] {v[n].reason}" for j, v in zip(judges, verdicts) if v and n in v and v[n].reason]
        out[n] = Judged(text="\n\n".join(texts) if texts else None, reason="; ".join(reasons) if reasons else None)
    return out


class PanelTally:
    """The judges' Scores of one task's scored samples (phase 2's first pass), and what follows from them:
    the values' kinds, the panel Score per sample, each judge's own value and the agreement."""

    def __init__(self, judges: list[str]):
        self.judges = judges
        self.scores: list[list[Score]] = []  # per scored sample, one Score per judge
        self.verdicts: list[list[Verdicts | None]] = []
        self.kinds: dict[str, str] = {}

    def add(self, scores: list[Score], verdicts: list[Verdicts | None]) -> None:
        self.scores.append(scores)
        self.verdicts.append(verdicts)

    def settle(self) -> None:
        """Every sample added: each value's kind over the whole task (a label is 0/1 everywhere)."""
        columns: dict[str, list[float]] = collections.defaultdict(list)
        for scores in self.scores:
            for s in scores:
                for c, v in s.values.items():
                    columns[c].append(math.nan if v is None else v)
        self.kinds = value_kinds(columns)

    def matrix(self, column: str) -> np.ndarray:
        """judges x scored samples values of one column (NaN: no usable value)."""
        return np.array([[s[j].values.get(column, math.nan) for s in self.scores] for j in range(len(self.judges))],
                        dtype=float)

    def result(self, task: Task, ctx: RunContext, tables: list, *, seed: int, n_boot: int, label: str,
               min_alpha: float = ALPHA_MIN) -> PanelResult:
        """`tables`: each judge's own Table of the task's samples (as the task would have had alone)."""
        from ...scoring.results import JudgeAgreement, JudgeValue, PanelResult
        primary = task.primary_value
        judge_values = {}
        for j, (name, table) in enumerate(zip(self.judges, tables)):
            value = task.method(ctx).aggregate(table, ctx).get(task.metric.name) if len(table) else None
            failed = collections.Counter(s[j].judge_failed for s in self.scores if s[j].judge_failed)
            judge_values[name] = JudgeValue(value=None if value is None or not math.isfinite(value) else float(value),
                                            n=count(table.col(primary)) if len(table) else 0,
                                            n_judge_failed=sum(failed.values()), judge_failed_reasons=dict(failed))
        agreement, low = {}, []
        for column in sorted(self.kinds, key=lambda c: (c != primary, c)):
            m = self.matrix(column)
            if column != primary and unanimous(m):
                continue  # no two judges give it differently: not the judges' doing (a failure is counted apart)
            level = alpha_level(self.kinds[column])
            alpha, ci = judge_alpha(m, level, seed=derived_seed(seed, f"panel|{label}|{column}"), n_boot=n_boot)
            alpha_v = None if math.isnan(alpha) else float(alpha)
            agreement[column] = JudgeAgreement(alpha=alpha_v, ci=ci, level=level,
                                               n=int(((~np.isnan(m)).sum(axis=0) >= 2).sum()))
            if alpha_v is not None and alpha_v < min_alpha:
                low.append(column)
        return PanelResult(judges=self.judges, judge_values=judge_values, agreement=agreement, min_alpha=min_alpha,
                           low_agreement=low)
