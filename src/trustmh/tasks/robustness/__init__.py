"""Robustness pillar: how much a task's score drops when the person's text is perturbed.

Each task declares its methods: trustmh's own (`RobustOwn`, below, built on the base task's trustmh
method) and, for robustness.support and robustness.diagnosis, the paper predecessor's
(tasks/robustness/paper.py, built on the base task's paper method: clean and under the original's
cumulative perturbation at low/medium/high; the per-intensity scores it reports side by side, their
differences from clean, and trustmh's relative drop). robustness.crisis is beyond the paper: it has no
paper method, so `--protocol paper` runs the design below for it too. What follows is trustmh's design.

Each robustness task wraps a base task, looked up in the registry by id at run time: same data, prompts,
judge and scoring, plus the same items re-asked with the person's words perturbed by `variants.perturb`
(10 kinds x 3 intensities; instructions, options and labels are never touched - the base task's
`perturb(item, edit)` decides what is the person's text).

* The clean sample of an item *is* the base task's request (same messages, params, task id, item id and
  variant; `Sample.request_task` files it under the base task), so when the base task runs in the same
  run directory, or already ran there, its reply and judgement are reused, never paid twice.
* A perturbed sample whose prompt came out identical to the clean one (say, a single-sentence message
  under sentence shuffling) is not sent: it could only measure noise. Each drop is therefore over the
  items a perturbation actually changed; `n` of `drop[...]` says how many.
* The judge always sees the clean conversation, so a drop reflects the reply, not the judge reacting to
  typos in the context.
* drop[k] = base metric on the clean replies - base metric on the replies to perturbation k (sign flipped
  for lower-is-better metrics, so a positive drop is always a loss), over the pairs where both replies
  were scored. The runner's bootstrap resamples items with all their samples, clean and perturbed
  together, so every CI here is a paired bootstrap CI.

`RunSpec.perturbations` (comma-separated kinds, levels or keys, e.g. "char,word_synonym@high")
restricts the perturbations run, to save cost; under the paper protocol the same names pick the original's
perturbation types (see `paper.paper_keys`)."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from ...errors import UserError
from ...scoring.metrics import Resamples, Table
from ...scoring.pillars import register_paper_rows
from ...types import Item, Sample
from ...variants.perturb import INTENSITIES, Perturbation, make_edit, perturbations
from ..esconv_reference import PAPER_NAMES as REFERENCE_NAMES
from .common import (PERTURBATION, STAGES, NoBatchedForm, RobustMethod, Subsets, relative,
                     selection)
from .paper import ES_PERTURB, SW_PERTURB, DiagnosisRobustPaper, SupportRobustPaper, table_templates
from ..base import TASKS, Counted, DataSource, MethodTemplate, MetricSpec, Rubric, RunContext, Task, register

# This pillar's rows in the paper's rank figure (PAPER_PROTOCOL.md §1), in its order: row -> the tasks
# forming it. The pillars' order and the overall score are scoring/pillars.py's.
register_paper_rows("robustness", {"Robustness Emotional Support": ("robustness.support",),
                                   "Robustness Psychological Diagnosis": ("robustness.diagnosis",)})

CLEAN_INPUT = "robustness_clean_input"  # item meta: the unperturbed input, for the judge and scorer


def selected_perturbations(ctx: RunContext) -> list[Perturbation]:
    """trustmh's perturbations that `--perturbations` names (all 30 by default), in canonical order."""
    chosen = selection(ctx)
    return [p for p in perturbations() if chosen is None or any(
        what in (None, p.kind, p.level) and intensity in (None, p.intensity) for what, intensity in chosen)]


class RobustOwn(RobustMethod):
    """trustmh's robustness method, on the base task's trustmh method (whatever the run's protocol: a task
    without a paper method runs this one under --protocol paper too)."""

    base_protocol = "trustmh"

    def samples(self, item: Item, ctx: RunContext) -> list[Sample]:
        inner, base = self.base_ctx(ctx), self.base_method
        clean = [replace(s, task=self.task.id, request_task=self.base.id) for s in base.samples(item, inner)]
        out = list(clean)
        for p in selected_perturbations(ctx):
            edited = base.perturb(item, make_edit(p, seed=ctx.seed, item_id=item.id))
            edited = Item(edited.id, edited.input, edited.target,
                          {**edited.meta, CLEAN_INPUT: item.input, PERTURBATION: p.key})
            for c, s in zip(clean, base.samples(edited, inner)):
                if s.messages != c.messages:
                    out.append(replace(s, task=self.task.id, variant=f"{s.variant}|{p.key}" if s.variant else p.key))
        return out

    def view(self, sample: Sample) -> Sample:
        """The clean item: every reply is judged and scored against the conversation as the person wrote it."""
        meta = sample.item.meta
        if CLEAN_INPUT not in meta:
            return sample
        rest = {k: v for k, v in meta.items() if k not in (CLEAN_INPUT, PERTURBATION)}
        return replace(sample, item=Item(sample.item.id, meta[CLEAN_INPUT], sample.item.target, rest))

    # --- the drops, one body for the table and for a block of resamples ---------------------------
    # Not mean_metrics: a drop is the base task's primary metric over subsets of rows (`Subsets`), not a mean.
    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        return {k: float(v) for k, v in self.drop_metrics(Subsets(self, table, self.base_ctx(ctx))).items()}

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray] | None:
        """aggregate() for a block of resamples, from the base task's primary_metric_many (None when the
        base task has none)."""
        try:
            return self.drop_metrics(Subsets(self, table, self.base_ctx(ctx), resamples))
        except NoBatchedForm:
            return None

    def drop_metrics(self, v: Subsets) -> dict[str, Any]:
        """drop[<kind>@<intensity>] and their means (all, by level, by intensity), the relative drops' mean
        and the rise in unscored replies: floats or arrays over resamples, as `v` gives its values."""
        sign = 1.0 if self.base.metric.higher_is_better else -1.0
        out: dict[str, Any] = {"mean_rel_drop": v.nan}
        if v.clean is None:
            return out
        on_clean = v.pert == v.clean
        out["clean"] = v.metric(on_clean & v.scored)
        out["perturbed"] = v.metric(~on_clean & v.scored)  # what the pillar counts (Task.counted)
        drops: dict[Perturbation, Any] = {}
        rel = []
        for p in perturbations():
            k = v.code(p.key)
            if k is None:
                continue
            rows = v.complete(k)
            c = v.metric(rows & on_clean)
            drops[p] = out[f"drop[{p.key}]"] = sign * (c - v.metric(rows & (v.pert == k)))
            rel.append(relative(drops[p], c))
        out["mean_rel_drop"] = v.mean_defined(rel)
        out["mean_drop"] = v.mean_defined(list(drops.values()))
        for level in STAGES:
            out[f"drop[{level}]"] = v.mean_defined([d for p, d in drops.items() if p.level == level])
        for intensity in INTENSITIES:
            out[f"drop[@{intensity}]"] = v.mean_defined([d for p, d in drops.items() if p.intensity == intensity])
        out["unscored_increase"] = v.unscored(~on_clean) - v.unscored(on_clean)
        return out

    def metric_n(self, table: Table, metric: str) -> int:
        """A drop rests on its pairs (a perturbed sample whose clean one is scored); a mean of drops (a
        level, an intensity) on the pairs of every perturbation it averages."""
        if not (metric.startswith("drop[") and metric.endswith("]")):
            return super().metric_n(table, metric)
        which = metric[len("drop["):-1]
        keys = [p.key for p in perturbations() if which in (p.key, p.level, f"@{p.intensity}")]
        return sum(int(self.complete_rows(table, k).sum()) for k in keys)


class _Robustness(Task):
    pillar = "robustness"
    base_metric = "clean"
    base_id: ClassVar[str]
    metric = MetricSpec(
        "mean_rel_drop", False, 0.0, 0.5,
        "mean over the perturbations run (10 kinds x 3 intensities) of the relative drop of the base task's "
        "primary metric, (clean - perturbed) / clean, each on the items that perturbation changed and where "
        "both replies were scored; 0 = no loss (a gain counts as negative); 0.5 or more maps to trust 0. "
        "CIs resample items with their clean and perturbed samples together (paired bootstrap)")
    methods = {"trustmh": RobustOwn}
    # The authors' perturbation.py the paper method reads its tables from (a task with a paper method).
    perturbation_file: ClassVar[str | None] = None

    @classmethod
    def check_options(cls, options) -> None:
        if options.get("perturbations") is not None:  # a name that is no perturbation: one line, now
            selected_perturbations(RunContext(options={"perturbations": options["perturbations"]}))

    @functools.cached_property
    def base(self) -> Task:
        if self.base_id not in TASKS:
            raise UserError(f"{self.id} needs task {self.base_id}, which this installation does not have")
        return TASKS[self.base_id]()

    # The base task's data and judge.
    @property
    def dataset(self) -> str:  # type: ignore[override]
        return self.base.dataset

    @property
    def files(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.base.files

    @property
    def rubrics(self) -> tuple[Rubric, ...]:  # type: ignore[override]
        return self.base.rubrics

    @property
    def primary_value(self) -> str:  # type: ignore[override]
        return self.base.primary_value

    @property
    def counted(self) -> Counted:  # type: ignore[override]
        """Robustness in the pillars is performance under perturbation (HELM's construct): the base task's
        metric on the perturbed replies. A drop of 0 is also what a model that does nothing reaches."""
        m = self.base.metric
        return Counted("perturbed", m.higher_is_better, m.lo, m.hi,
                       why=f"performance under perturbation ({self.base_id} {m.name} on the perturbed inputs)")

    @property
    def method_templates(self) -> tuple[MethodTemplate, ...]:  # type: ignore[override]
        """The base task's paper templates and the perturbation tables, for a task with a paper method."""
        if self.perturbation_file is None:
            return ()
        return self.base.method_templates + table_templates(self.perturbation_file)

    def missing_files(self, data: DataSource) -> list[str]:
        return self.base.missing_files(data)


@register
class RobustSupport(_Robustness):
    id = "robustness.support"
    evidence = "B"
    title = "Robustness of emotional support to perturbed dialogue context (ESConv, judged as reliability.support)"
    base_id = "reliability.support"
    methods = {"trustmh": RobustOwn, "paper": SupportRobustPaper}
    perturbation_file = ES_PERTURB
    paper_names = {"summary_metrics.judge_{c}.{key}": "judge_{c}[{key}]",
                   **{f"summary_metrics.{ours.removeprefix('ref_')}.{{key}}": f"{ours}[{{key}}]"
                      for ours in REFERENCE_NAMES.values()}}


@register
class RobustDiagnosis(_Robustness):
    id = "robustness.diagnosis"
    evidence = "B"
    title = "Robustness of diagnosis to perturbed posts (SWMH test, as reliability.diagnosis)"
    base_id = "reliability.diagnosis"
    methods = {"trustmh": RobustOwn, "paper": DiagnosisRobustPaper}
    perturbation_file = SW_PERTURB
    paper_names = {"summary_metrics.macro_f1.{key}": "score[{key}]"}


@register
class RobustCrisis(_Robustness):
    id = "robustness.crisis"
    evidence = "E"
    title = "Robustness of crisis identification to perturbed messages (as crisis.identification; beyond the paper)"
    base_id = "crisis.identification"
