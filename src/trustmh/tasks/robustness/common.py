"""What both methods of a robustness task share (trustmh's in tasks/robustness/__init__.py, the paper's in
tasks/robustness/paper.py): the item meta keys, a method that builds on one method of the base task,
and `Subsets`, the view of a scored table over which each
method's drop metrics are written once for the point value and for a block of bootstrap resamples;
and the reading of `--perturbations`, whose names pick the perturbations of either method."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any, Callable, ClassVar

import numpy as np

from ...errors import UserError
from ...judges.rubric import Judged, Rubric, Verdicts
from ...scoring.metrics import Resamples, Table, count
from ...types import Item, Sample, Score
from ...variants.perturb import INTENSITIES, KINDS
from ..base import DataSource, Method, RunContext, Task

CLEAN = "clean"  # the perturbation label of a clean sample
PERTURBATION = "robustness_perturbation"  # item meta: the perturbation key (both methods)
SEED = "robustness_seed"  # item meta: the seed of a paper perturbation
STAGES = ("char", "word", "sentence")  # trustmh's levels of perturbation


def selection(ctx: RunContext) -> list[tuple[str | None, str | None]] | None:
    """`--perturbations` as (what, intensity) pairs, None where it is not given. `what` is a kind, a stage
    (char - or character -, word, sentence) or None for every kind (`all`, or `@high` alone); `intensity`
    None for all three."""
    spec = ctx.options.get("perturbations")
    if not spec:
        return None
    out: list[tuple[str | None, str | None]] = []
    for name in (s.strip() for s in str(spec).split(",")):
        if not name:
            continue
        what, at, intensity = name.partition("@")
        what = "char" if what == "character" else what
        if (what not in ("", "all", *STAGES, *KINDS) or (at and intensity not in INTENSITIES)
                or (not what and not at)):
            raise UserError(f"unknown perturbation '{name}': use all, a kind ({', '.join(KINDS)}), a level "
                            f"(char, word, sentence), each optionally @{'/@'.join(INTENSITIES)}, or "
                            f"@{'/@'.join(INTENSITIES)} alone")
        out.append((what if what not in ("", "all") else None, intensity or None))
    if not out:
        raise UserError(f"--perturbations '{spec}' names no perturbation")
    return out


class RobustMethod(Method):
    """A robustness task's method: the base task's data, requests, judge and scoring (`self.task.base`),
    asked of the base task's method this one builds on (`base_method`, the base's method under
    `base_protocol`) in a context naming that protocol, plus the same items re-asked with the person's text perturbed
    (`samples`, per method)."""

    # Which of the base task's methods this one builds on.
    base_protocol: ClassVar[str]

    @property
    def base(self) -> Task:
        return self.task.base  # type: ignore[attr-defined]

    def base_ctx(self, ctx: RunContext) -> RunContext:
        """The run's context, answered by the base task's `base_protocol` method."""
        return replace(ctx, protocol=self.base_protocol)

    @functools.cached_property
    def base_method(self) -> Method:
        """The base task's method this one builds on."""
        return self.base.method(RunContext(protocol=self.base_protocol))

    def view(self, sample: Sample) -> Sample:
        """The sample as the base task judges and scores it."""
        return sample

    # --- the base task's data, requests and judge -------------------------------------------------
    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        return self.base_method.load(data, self.base_ctx(ctx))

    def reask(self, ctx: RunContext) -> tuple[int, Callable[[str], bool]] | None:
        return self.base_method.reask(self.base_ctx(ctx))  # the clean and the perturbed requests alike

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return self.base_method.active_rubrics(self.base_ctx(ctx))

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        return self.base_method.judge_params(rubric, self.base_ctx(ctx))

    def judgements(self, sample: Sample, reply: str, ctx: RunContext) -> dict[str, list[dict[str, str]]]:
        return self.base_method.judgements(self.view(sample), reply, self.base_ctx(ctx))

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged | Verdicts:
        return self.base_method.rules_judge(self.view(sample), reply, self.base_ctx(ctx))

    def score(self, sample: Sample, reply: str, judged: Verdicts | None, ctx: RunContext) -> Score:
        return self.base_method.score(self.view(sample), reply, judged, self.base_ctx(ctx))

    def ahead(self, sample: Sample, reply: str, ctx: RunContext) -> None:
        self.base_method.ahead(self.view(sample), reply, self.base_ctx(ctx))

    def warm_up(self, ctx: RunContext) -> None:
        self.base_method.warm_up(self.base_ctx(ctx))

    def cluster(self, sample: Sample) -> str:
        return self.base_method.cluster(self.view(sample))

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        key = sample.item.meta.get(PERTURBATION)
        base_variant = sample.variant[: -len(key)].rstrip("|") if key else sample.variant
        return {**self.base_method.labels(self.view(sample), score), "perturbation": key or CLEAN,
                "pair": f"{sample.item.id}|{base_variant}"}

    # --- aggregation ------------------------------------------------------------------------------
    def pairs(self, table: Table) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
        """(perturbation code per row, the perturbation names, pair code per row, scored per row).
        Kept for the last table: the runner asks metric_n() of ~40 metrics of one table, and sorting its
        string labels each time (~14 ms for 11k rows) would cost more than the bootstrap."""
        last = self.__dict__.get("_last_pairs")
        if last is not None and last[0] is table:
            return last[1]
        names, pert = np.unique(table.labels["perturbation"].astype(str), return_inverse=True)
        _, pair = np.unique(table.labels["pair"].astype(str), return_inverse=True)
        out = pert, list(names), pair, ~np.isnan(table.col(self.task.primary_value))
        self._last_pairs = (table, out)
        return out

    def complete_rows(self, table: Table, key: str) -> np.ndarray:
        """Rows of perturbation `key` whose pair has a scored reply on both sides (clean and perturbed)."""
        pert, names, pair, scored = self.pairs(table)
        if key not in names or CLEAN not in names:
            return np.zeros(len(table), bool)
        k = names.index(key)
        return complete(pert, pair, scored, names.index(CLEAN), k) & (pert == k)

    def metric_n(self, table: Table, metric: str) -> int:
        if metric == "clean":
            return int(((table.labels["perturbation"] == CLEAN) & ~np.isnan(table.col(self.task.primary_value))).sum())
        return count(table.col(self.task.primary_value))


def complete(pert: np.ndarray, pair: np.ndarray, scored: np.ndarray, clean: int, k: int) -> np.ndarray:
    """Rows of perturbation k and of the clean run whose pair has a scored reply on both sides."""
    both = np.zeros(pair.max() + 1, bool)
    both[pair[(pert == clean) & scored]] = True
    on_k = np.zeros_like(both)
    on_k[pair[(pert == k) & scored]] = True
    return (both & on_k)[pair] & scored


class NoBatchedForm(Exception):
    """The base task has no batched primary metric: the bootstrap takes the per-resample path."""


class Subsets:
    """A robustness table as a method's drop metrics see it, so that each metric is written once: the
    base task's primary metric over a subset of the rows (`metric(mask)`), the share of a subset left
    unscored, and the mean of a list of terms over those defined. For the table itself (`resamples`
    None) they are floats; for a block of resamples, arrays over it (built from the base task's
    primary_metric_many, `NoBatchedForm` where it has none). Which rows enter a subset is the same in
    every resample: a pair's clean and perturbed rows belong to one item, hence one cluster, drawn or not
    together; so each subset is fixed once and only its weights change."""

    def __init__(self, method: RobustMethod, table: Table, ctx: RunContext, resamples: Resamples | None = None):
        self.table, self.resamples, self.base, self.ctx = table, resamples, method.base_method, ctx
        self.pert, self.names, self.pair, self.scored = method.pairs(table)
        self.clean = self.names.index(CLEAN) if CLEAN in self.names else None  # its perturbation code
        self.nan: Any = math.nan if resamples is None else np.full(len(resamples), math.nan)
        self._metric: dict[bytes, Any] = {}  # most perturbations leave the same clean rows: each once

    def code(self, key: str) -> int | None:
        return self.names.index(key) if key in self.names else None

    def complete(self, k: int) -> np.ndarray:
        """Rows of perturbation k and of the clean run whose pair has a scored reply on both sides."""
        return complete(self.pert, self.pair, self.scored, self.clean, k)

    def metric(self, mask: np.ndarray) -> Any:
        """The base task's primary metric over the rows of `mask` (NaN for none)."""
        tag = mask.tobytes()
        if tag not in self._metric:
            if not mask.any():
                value: Any = self.nan
            elif self.resamples is None:
                value = self.base.primary_metric(self.table.where(mask), self.ctx)
            else:
                value = self.base.primary_metric_many(self.table.where(mask), self.resamples.rows(mask), self.ctx)
                if value is None:
                    raise NoBatchedForm
            self._metric[tag] = value
        return self._metric[tag]

    def unscored(self, mask: np.ndarray) -> Any:
        """The share of the rows of `mask` without a primary value (NaN for none)."""
        if self.resamples is None:  # 1 - mean, as the point value has always been computed
            return float(1 - self.scored[mask].mean()) if mask.any() else math.nan
        return self.resamples.rows(mask).mean(1.0 - self.scored[mask].astype(float))

    def mean_defined(self, terms: list[Any]) -> Any:
        """The mean of `terms` over those defined (not NaN), each resample apart; NaN where none is."""
        if self.resamples is None:  # a plain mean of the defined terms, the point value's summation order
            ok = [float(t) for t in terms if not math.isnan(t)]
            return float(np.mean(ok)) if ok else math.nan
        return nanmean_many(terms, self.nan)


def relative(drop: Any, clean: Any) -> Any:
    """drop / |clean|, NaN where the clean value is 0 or NaN (a float's or each resample's)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(clean != 0, drop / np.abs(clean), math.nan)  # NaN clean gives NaN too


def nanmean_many(values: list[Any], nan: Any) -> Any:
    """The mean of each resample's defined values (`values` holds one array over the resamples per term;
    0-d arrays, a single table's values, give a 0-d result); `nan` when there is no term."""
    if not values:
        return nan
    stacked = np.stack(values, axis=-1)
    n = (~np.isnan(stacked)).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.nansum(stacked, axis=-1) / n, math.nan)
