"""Judge panels: one run judged by several judges, their verdicts combined and their agreement measured.

A panel is built from runs that differ only in their judge: the run itself and its re-judged copies
(`trustmh score RUN --judge X --out RUN-X`, which never calls the tested model and, through the copied
store, pays only for X's own judgements; `add_judge` does the same from Python). `panel(run_dirs)` then
gives, per model and judged task:

* each judge's own value of the task's metric (from its run's results.json);
* the panel's value: per sample and per value, the judges' values combined by `agreement.panel_verdict`
  (the mean for scores, a strict majority for labels, i.e. values that are all 0 or 1; a tie or too few
  usable verdicts is a judge failure of that sample, counted with its reason), then the task's own
  `aggregate` over those per-sample values, as compare.py re-aggregates;
* Krippendorff's alpha of the judges on the task's primary per-sample value (nominal for labels,
  interval for scores) with a bootstrap interval over samples; a task whose alpha is under
  ALPHA_THRESHOLD (Krippendorff's lowest "tentative" level, 0.667) is marked `low_agreement`.

Tasks whose primary value does not depend on the judge (all judges give the same value everywhere, as on
a classification task) are reported with alpha 1 and nothing to combine."""

from __future__ import annotations

import collections
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..scoring import ALPHA_MIN
from ..scoring.agreement import alpha_level, combine_values, judge_alpha, value_kinds
from .runs import Rows, load_run, read_rows, run_context
from ..errors import UserError
from ..scoring.metrics import derived_seed

ALPHA_THRESHOLD = ALPHA_MIN
_SPEC_KEYS_JUDGE = ("judge", "judge_base_url")


@dataclass
class PanelTask:
    model: str
    task: str
    metric: str
    judges: list[str]
    judge_values: dict[str, float | None]
    value: float | None
    n: int  # samples with a panel value of the primary per-sample value
    n_judge_failed: int = 0
    judge_failed_reasons: dict[str, int] = field(default_factory=dict)
    alpha: float | None = None
    alpha_ci: tuple[float, float] | None = None
    alpha_level: str = "interval"
    low_agreement: bool = False
    # alpha of every per-sample value the judges do not all give alike (a task with several rubrics has one each)
    alpha_by_value: dict[str, float | None] = field(default_factory=dict)


def add_judge(run_dir: Path, judge: str, out: Path, *, judge_base_url: str | None = None, limits=None,
              events=None) -> Path:
    """A copy of the run at `out` judged by `judge` (what `trustmh score RUN --judge J --out OUT` does)."""
    from ..engine import load_spec, run
    from ..files import copy_run
    spec = load_spec(run_dir)
    spec.judge, spec.judge_base_url = judge, judge_base_url
    copy = copy_run(run_dir, out)
    run(spec, copy, limits=limits, generate=False, **({"events": events} if events else {}))
    return copy


def _matrix(rows: list[Rows], keys: list, column: str) -> np.ndarray:
    """judges x samples values of one column (NaN: no usable verdict)."""
    return np.array([r.column(column, keys) for r in rows], dtype=float)


def _combine(rows: list[Rows], keys: list, primary: str) -> tuple[Rows, collections.Counter, dict[str, str]]:
    """The panel's Rows (each value combined over the judges by agreement.combine_values), the primary
    value's judge-failure reasons and each value's kind (label or score)."""
    per_judge = [[r.values_of(k) for k in keys] for r in rows]
    columns = sorted({c for values in per_judge for row in values for c in row})
    kinds = value_kinds({c: [v for values in per_judge for row in values if (v := row.get(c)) is not None]
                         for c in columns})
    combined = Rows()
    failed: collections.Counter = collections.Counter()
    for n, k in enumerate(keys):
        vals, why = combine_values([values[n] for values in per_judge], kinds)
        if primary in why:
            failed[why[primary]] += 1
        first = next(r for r in rows if k in r)
        combined.add(k, vals, first.cluster_of(k), first.labels_of(k))
    return combined, failed, kinds


def panel(run_dirs: list[Path | str], *, seed: int = 0, n_boot: int = 1000,
          skipped: list[str] | None = None) -> list[PanelTask]:
    """The panel of the given runs (the same run judged by different judges); see the module docstring.
    `skipped` receives what was left out of each run's samples.jsonl (Run.skip_note)."""
    from ..plugins import load_task_plugins
    from ..tasks import TASKS
    load_task_plugins()
    runs = [load_run(d) for d in run_dirs]
    judges = [str(r.results.spec.get("judge")) for r in runs]
    if len(runs) < 2 or len(set(judges)) < len(judges):
        raise UserError(f"a panel needs at least two runs with different judges (got {', '.join(judges)})")
    specs = [{k: v for k, v in r.results.spec.items() if k not in _SPEC_KEYS_JUDGE} for r in runs]
    if any(s.get("models") != specs[0].get("models") or s.get("tasks") != specs[0].get("tasks") for s in specs):
        raise UserError("the runs of a panel must be one run judged by several judges (trustmh score RUN "
                        "--judge J --out DIR); these have other models or tasks")
    all_rows = [read_rows(r) for r in runs]
    if skipped is not None:
        skipped.extend(note for r in runs if (note := r.skip_note()))
    out = []
    for (model, task_id), first in all_rows[0].items():
        rows = [ar.get((model, task_id)) for ar in all_rows]
        task_cls = TASKS.get(task_id)
        if task_cls is None or any(r is None for r in rows):
            continue
        task = task_cls()
        keys = list(first.keys) + [k for r in rows[1:] for k in r.keys if k not in first]
        combined, failed, kinds = _combine(rows, keys, task.primary_value)
        ctx = run_context(runs[0])
        metrics = task.method(ctx).aggregate(combined.table(keys), ctx)
        value = metrics.get(task.metric.name)
        level = alpha_level(kinds.get(task.primary_value, "score"))
        alpha, ci = judge_alpha(_matrix(rows, keys, task.primary_value), level,
                                seed=derived_seed(seed, f"panel|{model}|{task_id}"), n_boot=n_boot)
        by_value = {}
        for column, kind in kinds.items():
            a, _ci = judge_alpha(_matrix(rows, keys, column), alpha_level(kind), seed=0, n_boot=0)
            if a != 1.0:
                by_value[column] = None if math.isnan(a) else a
        judge_values = {}
        for j, r in zip(judges, runs):
            tr = r.results.models[model].tasks.get(task_id) if model in r.results.models else None
            judge_values[j] = tr.value if tr is not None else None
        out.append(PanelTask(model, task_id, task.metric.name, judges, judge_values,
                             None if value is None or math.isnan(value) else float(value),
                             sum(1 for k in keys if task.primary_value in combined.values_of(k)),
                             sum(failed.values()), dict(failed), None if math.isnan(alpha) else alpha, ci, level,
                             bool(not math.isnan(alpha) and alpha < ALPHA_THRESHOLD), by_value))
    return out


def to_json(tasks: list[PanelTask]) -> list[dict[str, Any]]:
    return [asdict(t) for t in tasks]
