"""What a task is, and the registry of tasks by id.

A task is a class registered with `@register`. It holds only what is specific to it: how to read its
data into Items, how to prompt, how to score a reply, which metrics it reports. Everything shared
(running, caching, judging transport, bootstrap, output) lives outside."""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import jinja2
import numpy as np

from ..errors import UserError
from ..metrics import Resamples, Table, count, group_mask
from ..types import Item, Sample, Score


@dataclass(frozen=True)
class MetricSpec:
    name: str
    higher_is_better: bool
    lo: float  # range used to map the value onto the 0-100 trust score
    hi: float
    description: str = ""


@dataclass
class RunContext:
    seed: int = 0
    upstream_compat: bool = False
    judge: str = "rules"
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def rules_judge(self) -> bool:
        return self.judge == "rules"


@dataclass
class Judged:
    """The judge's reply for one sample, or why there is none (rules judge cannot rate, API error...)."""

    text: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class DataSource:
    root: Path
    kind: str  # "sample" (built-in sample suite) or "data" (a data dir with upstream files)

    def path(self, rel: str) -> Path:
        return self.root / rel

    def has(self, rel: str) -> bool:
        return (self.root / rel).is_file()


@functools.lru_cache(maxsize=1)
def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


def render(template: str, **values: Any) -> str:
    """Render a prompt or rubric template from tasks/templates (plain text, not HTML)."""
    return _templates().get_template(template).render(**values).strip()


class Task:
    id: ClassVar[str]
    pillar: ClassVar[str]
    title: ClassVar[str]
    dataset: ClassVar[str]  # dataset name in data/manifest.py, for "missing" messages
    files: ClassVar[tuple[str, ...]]  # required files, relative to the data dir
    metric: ClassVar[MetricSpec]
    primary_value: ClassVar[str]  # the per-sample value behind the primary metric (n, unscored count)
    metric_columns: ClassVar[dict[str, str]] = {}  # metric name -> per-sample value it is computed from
    uses_judge: ClassVar[bool] = False  # whether some values come from a judge
    gen_params: ClassVar[dict[str, Any]] = {}
    upstream_gen_params: ClassVar[dict[str, Any]] = {}  # the paper's settings, used by --upstream-compat

    # --- data -----------------------------------------------------------------------------------
    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        raise NotImplementedError

    def missing_files(self, data: DataSource) -> list[str]:
        return [f for f in self.files if not data.has(f)]

    # --- prompting ------------------------------------------------------------------------------
    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        raise NotImplementedError

    def choices(self, item: Item) -> tuple[str, ...] | None:
        return None

    def samples(self, item: Item, ctx: RunContext) -> list[Sample]:
        params = dict(self.gen_params)
        if ctx.upstream_compat:
            params.update(self.upstream_gen_params)
        return [Sample(self.id, item, self.prompt(item, ctx), choices=self.choices(item), params=params)]

    def perturb(self, item: Item, edit: "Callable[[str], str]") -> Item:
        """A copy of `item` with `edit` applied to the person's own words only (never to instructions,
        options or labels). Tasks that robustness or fairness variants build on implement it."""
        raise NotImplementedError(f"{self.id} does not support text variants")

    # --- judging and scoring ----------------------------------------------------------------------
    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]] | None:
        """Messages for the LLM judge, or None when this sample needs no judge."""
        return None

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged:
        """The offline judge's verdict in the same text format an LLM judge would use."""
        return Judged(reason="the rules judge cannot rate this; use an LLM judge (--judge openai/...)")

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        raise NotImplementedError

    # --- aggregation ------------------------------------------------------------------------------
    def cluster(self, sample: Sample) -> str:
        """Unit of resampling for the bootstrap (the item; a scenario when it yields several samples)."""
        return sample.item.id

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        """String columns for per-group breakdowns."""
        return {}

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        raise NotImplementedError

    def primary_metric(self, table: Table, ctx: RunContext) -> float:
        """The primary metric alone. Robustness tasks compute it for all 31 perturbation subsets inside every
        bootstrap resample, so a task whose aggregate() computes much more can override this cheaply."""
        return float(self.aggregate(table, ctx).get(self.metric.name, float("nan")))

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray] | None:
        """Optional batched aggregate() for the bootstrap: every metric aggregate() reports, for all of
        `resamples` at once (one array per metric, NaN where a resample leaves it undefined), built from
        `resamples`' sums and counts instead of a table per resample. None, the default, means "no batched
        form": the bootstrap then runs aggregate() on each resampled table. tests/test_bootstrap.py checks
        every override against that per-resample path."""
        return None

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray | None:
        """Optional batched primary_metric(): its value in each of `resamples` (robustness computes it for
        every perturbation subset). By default taken from aggregate_many(); None when there is neither."""
        many = self.aggregate_many(table, resamples, ctx)
        return None if many is None else many.get(self.metric.name)

    def metric_n(self, table: Table, metric: str) -> int:
        """How many samples a metric rests on; for a per-group metric `name[key=group]`, those of that group."""
        m = _GROUP_METRIC.fullmatch(metric)
        if m and m["key"] in table.labels:
            values = table.col(self._value_behind(table, m["base"]))
            return count(values[group_mask(table.labels[m["key"]], m["group"])])
        return count(table.col(self._value_behind(table, metric)))

    def _value_behind(self, table: Table, metric: str) -> str:
        """The per-sample value a metric is computed from."""
        return metric if metric in table.columns else self.metric_columns.get(metric, self.primary_value)


_GROUP_METRIC = re.compile(r"(?P<base>[^\[]+)\[(?P<key>[^=\]]+)=(?P<group>.*)\]")


TASKS: dict[str, type[Task]] = {}


def register(cls: type[Task]) -> type[Task]:
    if cls.id in TASKS:
        raise ValueError(f"task id registered twice: {cls.id}")
    TASKS[cls.id] = cls
    return cls


PILLARS = ("reliability", "crisis", "safety", "fairness", "privacy", "robustness", "sycophancy", "ethics")


def resolve_tasks(selection: str | None) -> list[Task]:
    """Task instances for a comma-separated list of task ids and/or pillar names ('all' or None: every task)."""
    if not selection or selection.strip() == "all":
        return [TASKS[k]() for k in sorted(TASKS)]
    chosen: list[str] = []
    for raw in selection.split(","):
        name = raw.strip()
        if not name:
            continue
        if name in TASKS:
            matches = [name]
        else:
            matches = [k for k in sorted(TASKS) if k.split(".")[0] == name]
        if not matches:
            options = list(TASKS) + sorted({k.split(".")[0] for k in TASKS})
            close = difflib.get_close_matches(name, options, n=3, cutoff=0.5)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UserError(f"unknown task or pillar '{name}'{hint}; `trustmh list` shows them all")
        chosen += [m for m in matches if m not in chosen]
    return [TASKS[k]() for k in chosen]
