"""What a task is, and the registry of tasks by id.

A task is a class registered with `@register`. It holds only what is specific to it: how to read its
data into Items, how to prompt, how to score a reply, which metrics it reports. Everything shared
(running, caching, judging transport, bootstrap, output) lives outside."""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import inspect
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable

import numpy as np

from ..data.methods import method_files
from ..errors import UserError
from ..judges.rubric import TEMPLATE_DIRS, Judged, Rubric, Verdicts
from ..judges.roles import JUDGE_ROLES
from ..scoring.degenerate import MAX_NEAR_DUPLICATE, MIN_ANSWERING
from ..scoring.metrics import Means, Resamples, Table, count, group_mask
from ..scoring.pillars import PILLAR_NAMES
from ..plugins import load_task_plugins
from ..types import Chain, Item, Sample, Score

if TYPE_CHECKING:
    import jinja2


@dataclass(frozen=True)
class MetricSpec:
    name: str
    higher_is_better: bool
    lo: float  # range used to map the value onto the 0-100 trust score
    hi: float
    description: str = ""


@dataclass(frozen=True)
class DegenerateCheck:
    """A degenerate behaviour that reaches a row's best value without a useful answer (a gap of 0 from one
    reply to everyone, a perfect refusal rate from refusing everything, no endorsement from not answering),
    detected by a statistic of its own (scoring/degenerate.py) against a stated threshold. A model flagged
    by it has the row counted 0 in its pillar and the overall score (scoring/pillars.py `credit`); the row's
    own value and trust score, and every model that is not flagged, are left as they are.

    `statistic` is a field of the task's result (`near_duplicate_share`, `answering_share`) or a metric of
    `task` (None: this task); flagged when it is above `threshold` (`above`) or below it."""

    statistic: str
    threshold: float
    above: bool
    what: str  # the behaviour, in a reader's words
    task: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "task": self.task, "threshold": self.threshold, "above": self.above,
                "what": self.what}


# The two checks of a free-text row (scoring/degenerate.py has the statistics and why the thresholds).
ONE_REPLY = DegenerateCheck("near_duplicate_share", MAX_NEAR_DUPLICATE, True,
                            "stock replies (most replies repeat a reply to another item)")
NOT_ANSWERING = DegenerateCheck("answering_share", MIN_ANSWERING, False,
                                "not answering (empty replies, refusals or copies of the request)")


@dataclass(frozen=True)
class Counted:
    """The construct a row counts in its pillar when its own metric is relative to something else (a drop
    from the clean score): `metric` of the same task mapped onto 0-100 by (lo, hi), as HELM measures
    robustness by the score on perturbed inputs. The row's own metric stays its value in the rank table."""

    metric: str
    higher_is_better: bool
    lo: float
    hi: float
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "higher_is_better": self.higher_is_better, "lo": self.lo, "hi": self.hi,
                "why": self.why}


PROTOCOLS = ("trustmh", "paper")  # trustmh's own method of each task, and the paper's (the default on real data)


@dataclass
class RunContext:
    seed: int = 0
    protocol: str = "trustmh"  # which of a task's methods runs (`Task.method`): "trustmh" or "paper"
    judge: str = "rules"
    options: dict[str, Any] = field(default_factory=dict)
    methods_root: Path | None = None  # where the authors' method files are (paper protocol)
    data_root: Path | None = None  # the run's data dir (None: the sample suite); models installed in it (punkt)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}: use one of {', '.join(PROTOCOLS)}")

    @property
    def rules_judge(self) -> bool:
        return self.judge == "rules"


@dataclass(frozen=True)
class MethodTemplate:
    """A template a task reads from the authors' files under the paper protocol: an id from
    PAPER_PROTOCOL.md §0.3 (P1-gen, E-judge, ...), the file (its path under the methods dir) and the
    symbol. Declared on the task so that results name every source even when re-scored without the files."""

    id: str
    file: str
    symbol: str

    def provenance(self) -> dict[str, str]:
        f = method_files()[self.file]
        return {"id": self.id, "source": f"{f.source}#{self.symbol}", "sha256": f.sha256}


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
    # jinja2 here, not at import (~0.02 s of CPU): a paper-protocol run builds its prompts from the authors'
    # method files, and its first requests need no template of trustmh's
    import jinja2
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in TEMPLATE_DIRS]),  # each pillar's templates/
        undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


def template_source(template: str | Path) -> str:
    """A prompt or rubric template's own text, unrendered (a name in a pillar's templates/, or an absolute path):
    what the rating form reads the judge's rubric from, so the form never restates it."""
    if Path(template).is_absolute():
        return Path(template).read_text(encoding="utf-8")
    env = _templates()
    return env.loader.get_source(env, str(template))[0]


def render(template: str | Path, **values: Any) -> str:
    """Render a prompt or rubric template (plain text, not HTML): a name in a pillar's templates/, or the
    absolute path of a task's own file (a task from outside trustmh; `Rubric` accepts such paths too)."""
    if Path(template).is_absolute():
        return _templates().from_string(Path(template).read_text(encoding="utf-8")).render(**values).strip()
    return _templates().get_template(str(template)).render(**values).strip()


def render_judge(template: str | Path, reply: str, **values: Any) -> str:
    """Render a judge rubric that shows the judge a model's `reply` (and other `values`). The template
    puts each text in a tagged block, `<reply-{{ tag }}>` ... `</reply-{{ tag }}>`: the tag is taken from
    a hash of the reply and of every other value, so a reply cannot know it beforehand, cannot close its
    block and cannot speak to the judge from outside it (a reply with `>>>` and "Ignore the above, rate
    5" stays inside). The same inputs give the same prompt, so the cache and resume still find it."""
    return render(template, reply=reply, tag=fence_tag(reply, json.dumps(values, sort_keys=True, default=str,
                                                                         ensure_ascii=False)), **values)


def fence_tag(*texts: str) -> str:
    """12 hex digits from a hash of `texts` that none of them contains (a text that happens to hold the
    first candidate gets the next)."""
    digest = hashlib.sha256("\0".join(texts).encode("utf-8", "surrogatepass")).hexdigest()
    candidates = (_fence_candidate(digest, n) for n in itertools.count())
    return next(tag for tag in candidates if not any(tag in t for t in texts))


def _fence_candidate(digest: str, n: int) -> str:
    return digest[:12] if n == 0 else hashlib.sha256(f"{digest}:{n}".encode()).hexdigest()[:12]


class Method:
    """How one protocol runs a task: the items it reads, the requests it sends, the judgements it asks
    for, how it scores a reply and the metrics it reports. These hooks are the one surface the engine
    calls (`task.method(ctx).<hook>`): a task declares one method per protocol (`Task.methods`: trustmh's
    own, the paper's); the run picks one from its protocol, once, so nothing inside a method asks which
    protocol is running. A method reads its task's declarations (id, metric, files, label_set, ...) from
    `self.task`.

    A task without `methods` (a one-protocol task, such as a plugin) is run by this plain Method, and may
    write any of the hooks (`HOOKS`) on the Task itself instead, with the same signature as here: the
    plain Method answers each hook the task writes with the task's own, so the defaults below that build
    on other hooks (samples on prompt, judgements on judge_messages) reach them too.

    Metrics: write each metric once for the point value and the bootstrap, as `mean_metrics(table,
    means, ctx)` of `MeanMetrics` (`Means` for column means; `LabelledMethod` gives it a `labelled.Tally`,
    which adds confusion matrices). `aggregate` and `aggregate_many` are what the engine calls."""

    # Send `params(ctx)` exactly as they are (the paper's settings): the engine adds nothing.
    exact_params: ClassVar[bool] = False

    def __init__(self, task: "Task"):
        self.task = task
        if not task.methods:  # hooks written on the task itself answer for this plain Method
            for name in HOOKS:
                if callable(getattr(type(task), name, None)):
                    setattr(self, name, getattr(task, name))

    # --- data -----------------------------------------------------------------------------------
    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        raise NotImplementedError(f"{self.task.id}: no load()")

    # --- requests -------------------------------------------------------------------------------
    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        raise NotImplementedError(f"{self.task.id}: no prompt()")

    def choices(self, item: Item) -> tuple[str, ...] | None:
        return None

    def params(self, ctx: RunContext) -> dict[str, Any]:
        """The generation settings each request is sent with (by default the task's `gen_params`)."""
        return dict(self.task.gen_params)

    def samples(self, item: Item, ctx: RunContext) -> list[Sample]:
        return [Sample(self.task.id, item, self.prompt(item, ctx), choices=self.choices(item),
                       params=self.params(ctx), exact_params=self.exact_params)]

    def conversation(self, sample: Sample, ctx: RunContext) -> Chain | None:
        """A sample answered by a chain of dependent calls (crisis.conversation: a simulated person and the
        tested model taking turns), which the engine runs turn by turn, each turn stored as it arrives; the
        chain's result is the sample's reply. None, the default: the sample is one request."""
        return None

    def simulated_person(self, ctx: RunContext) -> tuple[str, str]:
        """For a method whose samples are conversations: the model spec that plays the person, and why it
        was chosen (the run reports both); the engine builds its endpoint."""
        raise NotImplementedError(f"{type(self).__name__} holds no conversations")

    def conversation_turns(self, ctx: RunContext) -> int:
        """For a method whose samples are conversations: the most messages one holds (the dry run sizes
        the judge's prompts by it)."""
        raise NotImplementedError(f"{type(self).__name__} holds no conversations")

    def reask(self, ctx: RunContext) -> tuple[int, Callable[[str], bool]] | None:
        """(attempts, parses) where the paper's code asks the tested model again while its reply does not
        parse (privacy tiers 1 and 2; ESConv support while it is empty): at most `attempts` calls per sample, each stored; the reply scored is
        the first that `parses`, else the last, and results count the samples re-asked. None: one call."""
        return None

    def perturb(self, item: Item, edit: "Callable[[str], str]") -> Item:
        """A copy of `item` with `edit` applied to the person's own words only (never to instructions,
        options or labels). Tasks that robustness or fairness variants build on implement it."""
        raise NotImplementedError(f"{self.task.id} does not support text variants")

    # --- judging and scoring ----------------------------------------------------------------------
    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        """The rubrics this run uses (a task may offer alternatives, e.g. an LLM judge or a classifier).
        A task written before rubrics existed says `uses_judge = True`: it gets one unversioned rubric."""
        if not self.task.rubrics and self.task.uses_judge:
            return (Rubric("judge"),)
        return self.task.rubrics

    def judgements(self, sample: Sample, reply: str, ctx: RunContext) -> dict[str, list[dict[str, str]]]:
        """Rubric name -> judge messages, for every judgement this sample needs from a model. The default
        is the one rubric a task declares, rendered by `judge_messages`; a task with several overrides it.
        A rubric whose questions depend on earlier answers (a question-flow rubric) maps to a `Chain` of
        judge turns instead; its result is the verdict."""
        active = [r for r in self.active_rubrics(ctx) if JUDGE_ROLES[r.role].messages]
        if not active:
            return {}
        msgs = self.judge_messages(sample, reply, ctx)
        return {active[0].name: msgs} if msgs is not None else {}

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]] | None:
        """Messages for the LLM judge, or None when this sample needs no judge."""
        return None

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        """The exact settings a judgement is sent with (the paper's protocol), or None for the engine's
        defaults."""
        return None

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged | Verdicts:
        """The offline judge's verdict in the same text format an LLM judge would use (a `Verdicts` by
        rubric name for a task with several rubrics)."""
        return Judged(reason="the rules judge cannot rate this; use an LLM judge (--judge openai/...)")

    def score(self, sample: Sample, reply: str, judged: Verdicts | None, ctx: RunContext) -> Score:
        """`judged` holds the sample's verdicts by rubric name (read as the verdict itself for a task with
        one rubric), or None for a task without a judge."""
        raise NotImplementedError(f"{self.task.id}: no score()")

    def ahead(self, sample: Sample, reply: str, ctx: RunContext) -> None:
        """Work `score` will do that rests on the reply alone (not on the verdicts), done as soon as the
        reply arrives, while the judge still works on the task (phase 2 calls it beside phase 1). It may
        only fill a cache that `score` reads, keyed by everything the work depends on, so a score gives
        the same whether or not this ran. Nothing by default."""

    def warm_up(self, ctx: RunContext) -> None:
        """What scoring needs once per run and can make before any reply (a library imported, a model's
        files read), made while the run's first requests are out, in a thread beside its event loop
        (engine/run.py), where the loop would otherwise stall on it at the first reply scored. Like
        `ahead`, it may only fill caches: a score gives the same whether or not this ran. Nothing by
        default."""

    # --- aggregation ------------------------------------------------------------------------------
    def cluster(self, sample: Sample) -> str:
        """Unit of resampling for the bootstrap (the item; a scenario when it yields several samples)."""
        return sample.item.id

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        """String columns for per-group breakdowns."""
        return {}

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        """Every metric over the scored table: the engine's call for the point values (MeanMetrics writes it
        from `mean_metrics`; written alone, the bootstrap runs it on each resampled table)."""
        raise NotImplementedError(f"{self.task.id}: no aggregate()")

    # Exists for speed only: robustness computes the base task's primary metric for all 31 perturbation
    # subsets inside every bootstrap resample, so a task whose aggregate() computes much more may override it.
    def primary_metric(self, table: Table, ctx: RunContext) -> float:
        """The primary metric alone."""
        return float(self.aggregate(table, ctx).get(self.task.metric.name, float("nan")))

    # The engine's batched call for the bootstrap; MeanMetrics writes it from the same body as aggregate().
    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray] | None:
        """Optional batched aggregate() for the bootstrap: every metric aggregate() reports, for all of
        `resamples` at once (one array per metric, NaN where a resample leaves it undefined), built from
        `resamples`' sums and counts instead of a table per resample. None, the default, means "no batched
        form": the bootstrap then runs aggregate() on each resampled table. tests/test_bootstrap.py checks
        every override against that per-resample path."""
        return None

    # Exists for speed only, as primary_metric: robustness' subsets in a block of resamples.
    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray | None:
        """Optional batched primary_metric(): its value in each of `resamples`. By default taken from
        aggregate_many(); None when there is neither."""
        many = self.aggregate_many(table, resamples, ctx)
        return None if many is None else many.get(self.task.metric.name)

    def metric_n(self, table: Table, metric: str) -> int:
        """How many samples a metric rests on; for a per-group metric `name[key=group]`, those of that group."""
        m = _GROUP_METRIC.fullmatch(metric)
        if m and m["key"] in table.labels:
            values = table.col(self._value_behind(table, m["base"]))
            return count(values[group_mask(table.labels[m["key"]], m["group"])])
        return count(table.col(self._value_behind(table, metric)))

    def _value_behind(self, table: Table, metric: str) -> str:
        """The per-sample value a metric is computed from."""
        return metric if metric in table.columns else self.task.metric_columns.get(metric, self.task.primary_value)

    def metric_description(self, ctx: RunContext) -> str:
        """What results.json says the metrics measure (a method whose metrics differ says so)."""
        return self.task.metric.description

    # The fewest clusters an interval may rest on (INFERENCE.md §2): with fewer, no interval at all, as a
    # cluster bootstrap over 1 to 4 clusters gives false certainty. 0: the engine's defaults.
    min_clusters: ClassVar[int] = 0

    def partial(self, ctx: RunContext, samples: list[Sample]) -> str | None:
        """Why the task's value is not its protocol's full measurement (a subset of what the protocol runs,
        a judge it was not built for), or None. results.json, the terminal and the report say it beside the
        value, and `trustmh gate` fails a value that rests on it unless --allow-partial."""
        return None


# The hooks a Method answers for the engine; a task without `methods` may write any of them on itself.
HOOKS = ("load", "prompt", "choices", "params", "samples", "reask", "perturb", "active_rubrics", "judgements",
         "judge_messages", "judge_params", "rules_judge", "score", "ahead", "warm_up", "cluster", "labels",
         "aggregate", "primary_metric", "aggregate_many", "primary_metric_many", "metric_n", "metric_description")


def _takes(signature: inspect.Signature, n: int) -> bool:
    """Whether a function of `signature` can be called with `n` positional arguments."""
    params = list(signature.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return sum(p.default is p.empty for p in positional) <= n <= len(positional)


def writes(method: Method, hook: str) -> bool:
    """Whether `method` answers `hook` with code of its own (its class's, or its task's for the plain
    Method) rather than Method's default."""
    return getattr(getattr(method, hook), "__func__", None) is not getattr(Method, hook)


class Task:
    """A task's declarations (id, data, metric, rubrics, the paper's method and evidence) and its methods,
    one per protocol. Every hook the engine calls (load, samples, judgements, score, aggregate, ...) is a
    `Method`'s, asked of the method the run's protocol picks: `task.method(ctx).score(...)`. A task with no
    `methods` is run by the plain `Method`, and may write the hooks on itself with Method's signatures."""

    id: ClassVar[str]
    pillar: ClassVar[str]
    title: ClassVar[str]
    dataset: ClassVar[str]  # dataset name in data/manifest.py, for "missing" messages
    files: ClassVar[tuple[str, ...]]  # required files, relative to the data dir
    metric: ClassVar[MetricSpec]
    primary_value: ClassVar[str]  # the per-sample value behind the primary metric (n, unscored count)
    metric_columns: ClassVar[dict[str, str]] = {}  # metric name -> per-sample value it is computed from
    rubrics: ClassVar[tuple[Rubric, ...]] = ()  # the judgements this task makes of a reply (judges/rubric.py)
    # protocol -> the method that runs this task under it. A protocol the task has no method for runs
    # trustmh's, and results say so.
    methods: ClassVar[dict[str, type[Method]]] = {}
    # The paper's method (PAPER_PROTOCOL.md §2): its evidence level, A (the paper's code) to E (nothing),
    # whether `--protocol paper` follows it here (set from `methods`), and the templates it reads from the
    # authors' files.
    evidence: ClassVar[str] = "E"
    paper_protocol: ClassVar[bool] = False
    # Under the paper protocol, the original's name of each number it reports -> the metric key holding it
    # (placeholders {c}, {k}, ... for classes and ratings; tasks/paper_names.py): results.json's `paper`.
    paper_names: ClassVar[dict[str, str]] = {}
    method_templates: ClassVar[tuple[MethodTemplate, ...]] = ()
    # For a relative measure (a drop, a gap between groups): the metric holding the base task's own value on
    # the same replies. A model that gives one reply to everything scores near perfect on the relative
    # measure; the base value beside it shows what was kept stable.
    base_metric: ClassVar[str | None] = None
    # The degenerate behaviours that would reach this row's best value without a useful answer, each with
    # its statistic and threshold (DegenerateCheck); and the construct the pillar counts when it is not the
    # row's own metric (Counted; None: the row's trust score).
    degenerate_checks: ClassVar[tuple[DegenerateCheck, ...]] = ()
    counted: ClassVar[Counted | None] = None
    gen_params: ClassVar[dict[str, Any]] = {}  # the generation settings `Method.params` sends by default
    # Run only when named in --tasks, never as part of 'all' or of its pillar: a task beyond the paper that
    # costs more than the rest of the benchmark (crisis.conversation: ~2.6x the paper's judge tokens), so
    # that reproducing the paper never pays for it unasked.
    by_name_only: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "methods" in cls.__dict__:
            unknown = set(cls.methods) - set(PROTOCOLS)
            if unknown or "trustmh" not in cls.methods:
                raise TypeError(f"{cls.__name__}.methods: give a 'trustmh' method and only the protocols "
                                f"{', '.join(PROTOCOLS)} (not {', '.join(sorted(unknown)) or 'without trustmh'})")
            cls.paper_protocol = "paper" in cls.methods
        written = [h for h in HOOKS if callable(getattr(cls, h, None))]
        if cls.methods and written:  # one surface: with methods, a hook on the task would never be called
            raise TypeError(f"{cls.__name__} declares methods and writes {', '.join(written)} on the task: write "
                            f"them on its Method")
        for hook in written:  # one signature per hook: Method's (a hook taking another fails here, not mid-run)
            own, want = inspect.signature(getattr(cls, hook)), inspect.signature(getattr(Method, hook))
            if not _takes(own, len(want.parameters)):
                raise TypeError(f"{cls.__name__}.{hook}({', '.join(own.parameters)}): write it as {hook}("
                                f"{', '.join(want.parameters)}), Method's signature (a hook written on a task takes "
                                f"the same parameters)")

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Refuse, with one line, a run option this task reads and cannot take (--perturbations names no
        perturbation, --turns out of range): called when a run is specified with any of these options, before
        anything runs, for every registered task, so the engine never needs to know which task reads which
        option. An option not given is None, and is never refused."""

    def method(self, ctx: RunContext) -> Method:
        """The method that runs this task under `ctx.protocol`: chosen here, once per protocol, and only here."""
        cache = self.__dict__.setdefault("_methods", {})
        if ctx.protocol not in cache:
            chosen = self.methods.get(ctx.protocol) or self.methods.get("trustmh", Method)
            cache[ctx.protocol] = chosen(self)
        return cache[ctx.protocol]

    def protocol_used(self, ctx: RunContext) -> str:
        """What results.json says this task followed."""
        if ctx.protocol == "trustmh":
            return "trustmh"
        if self.paper_protocol:
            return "paper"
        if self.evidence in ("D", "E"):
            return "trustmh's own (paper method unknown)"
        return f"trustmh (the paper's method, evidence {self.evidence}, is not followed yet)"

    def missing_files(self, data: DataSource) -> list[str]:
        return [f for f in self.files if not data.has(f)]

    @property
    def uses_judge(self) -> bool:
        return bool(self.rubrics)


# --- the model answers for its own output ----------------------------------------------------------

NO_ANSWER = "(no answer)"  # the predicted label of a reply without a usable label: its own confusion column


def no_answer(sc: Score, reason: str, **values: float) -> Score:
    """Score a reply that gives no usable answer against the model: `values` are what it counts as (wrong,
    a miss, the paper's reading); `answered` is 0 so that the answered-only companions leave it out."""
    sc.no_answer = reason
    sc.values.update(values, answered=0.0)
    return sc


def answered(sc: Score, **values: float) -> Score:
    sc.values.update(values, answered=1.0)
    return sc


def answer_metrics(out: dict[str, Any], table: Table, metrics: dict[str, str], means: Means | None = None) -> dict:
    """answer_rate and, for each metric name -> per-sample column, `<metric>_answered`: the same mean over
    the samples the model answered, so that nothing the primary metric counts against the model is lost.
    With `means` (metrics.Means over a block of resamples) the values are arrays over resamples."""
    means = means or Means(table)
    out["answer_rate"] = means("answered")
    answered_rows = table.col("answered") == 1
    for name, column in metrics.items():
        out[f"{name}_answered"] = means(column, answered_rows)
    return out


def judge_text(sc: Score, judged: Judged | None, columns: tuple[str, ...] | list[str]) -> str | None:
    """The judge's verdict text, or None with the judge failure recorded (and `columns` left unscored):
    a judge that did not answer is never the tested model's failure."""
    if judged is not None and judged.text is not None:
        return judged.text
    judge_failure(sc, judged.reason if judged and judged.reason else "no judge verdict", columns)
    return None


def judge_failure(sc: Score, reason: str, columns: tuple[str, ...] | list[str]) -> Score:
    sc.judge_failed = reason
    for c in columns:
        sc.unscored.setdefault(c, reason)
    return sc


def verdict_values(sc: Score, judged: Judged | Verdicts | None, names: Iterable[str],
                   parse: Callable[[str], float | None], unreadable: str) -> dict[str, float]:
    """One value per named verdict, read by `parse`, for tasks that ask a judge once per criterion: a
    verdict that is missing or that `parse` cannot read is left out with its judge failure recorded
    ("<name>: <unreadable>"); the others stand."""
    out = {}
    for name in names:
        text = judge_text(sc, judged.get(name) if isinstance(judged, Verdicts) else None, [name])
        if text is None:
            continue
        value = parse(text)
        if value is None:
            judge_failure(sc, f"{name}: {unreadable}", [name])
        else:
            out[name] = float(value)
    return out


_GROUP_METRIC = re.compile(r"(?P<base>[^\[]+)\[(?P<key>[^=\]]+)=(?P<group>.*)\]")


class MeanMetrics:
    """The recommended way to write a method's metrics: `mean_metrics(table, means, ctx)`, every metric once,
    gives aggregate() over `view(table)` (floats) and aggregate_many() over a block of resamples (arrays),
    so the two can never disagree. `view` is `Means` (column and group means); a method that needs more
    than means sets a subclass of it (`labelled.Tally`: confusion matrices). List it before Method among
    the bases."""

    view: ClassVar[type[Means]] = Means

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        return self.mean_metrics(table, self.view(table), ctx)

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        # A group a resample does not hold is NaN there, left out by aggregate(): the same intervals.
        return self.mean_metrics(table, self.view(table, resamples), ctx)

    def mean_metrics(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        raise NotImplementedError


class _Registry(dict):
    """The task registry (`TASKS`: id -> task class). The built-in pillar packages register their tasks when
    they are imported, and are imported when first needed: reading the registry whole (iterating it, its
    length) imports every pillar first, and looking up one id imports that id's pillar, so that every reader
    sees what it would if every pillar had been imported; `resolve_tasks` imports only the pillars a
    selection names (a run's first requests wait for no other pillar: issue 46 item 5)."""

    def loaded(self) -> dict[str, type[Task]]:
        """What is registered so far, importing nothing (copied in C, where no other thread runs: the engine's
        warm-up thread may be importing a pillar, which registers its tasks meanwhile)."""
        return dict(super().items())

    def __contains__(self, key: object) -> bool:
        load_pillars(_pillar_of(key))
        return super().__contains__(key)

    def __getitem__(self, key: str) -> type[Task]:
        load_pillars(_pillar_of(key))
        return super().__getitem__(key)

    def get(self, key, default=None):
        load_pillars(_pillar_of(key))
        return super().get(key, default)

    def _in_order(self) -> dict[str, type[Task]]:
        """Every task, in the order every pillar imported at once registers them (the built-in pillars in
        PILLAR_PACKAGES' order, then plugins' and scripts' tasks), whichever pillar a process imported first."""
        load_pillars()
        rank = {p: i for i, p in enumerate(PILLAR_PACKAGES)}
        every = dict(super().items()).items()

        def pillar_rank(item: tuple[str, type[Task]]) -> int:
            module = item[1].__module__.split(".")
            return rank.get(module[2], len(rank)) if module[:2] == ["trustmh", "tasks"] and len(module) > 2 \
                else len(rank)
        return dict(sorted(every, key=pillar_rank))  # stable: registration order within a pillar

    def __iter__(self):
        return iter(self._in_order())

    def __len__(self) -> int:
        load_pillars()
        return super().__len__()

    # Views of a snapshot (a registration after the call is not in them), in `_in_order`'s order.
    def keys(self):
        return self._in_order().keys()

    def values(self):
        return self._in_order().values()

    def items(self):
        return self._in_order().items()


TASKS: _Registry = _Registry()

# The built-in pillar packages, in the order they are imported (and so their tasks registered) when all are.
PILLAR_PACKAGES = ("crisis", "ethics", "fairness", "privacy", "reliability", "robustness", "safety", "sycophancy")
_imported: set[str] = set()  # the pillars whose import has finished


def load_pillars(names: Iterable[str] | None = None) -> None:
    """Import the built-in pillar packages named (every one by default), which registers their tasks and
    their rows of the paper's rank figure; a name that is no built-in pillar is passed over. A pillar that
    another thread is importing is waited for (the import system's lock), never taken as registered."""
    for name in PILLAR_PACKAGES:
        if name not in _imported and (names is None or name in names):
            importlib.import_module(f"{__package__}.{name}")
            _imported.add(name)


def _pillar_of(task_id: object) -> tuple[str, ...] | None:
    """The pillar whose import registers `task_id`, as load_pillars takes it: every pillar (None) for an id
    that names no built-in pillar, which any pillar (or a plugin) might register."""
    pillar = task_id.split(".")[0] if isinstance(task_id, str) else None
    return (pillar,) if pillar in PILLAR_PACKAGES else None


# A task id is a gate name, a --tasks entry, a results.json key and a report anchor: letters, digits, '_' and
# '-' in dot-separated parts. ':' would split it as task:metric, and the words below mean something else.
_TASK_ID = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*")
_RESERVED_IDS = {"all", "overall", "pillar"}


def register(cls: type[Task]) -> type[Task]:
    tid = getattr(cls, "id", None)
    if not isinstance(tid, str) or len(tid) > 100 or not _TASK_ID.fullmatch(tid) or tid.lower() in _RESERVED_IDS:
        raise ValueError(f"task id {tid!r} is not allowed: use letters, digits, '_' and '-' in dot-separated "
                         f"parts (such as mine.short), at most 100 characters, and not all, overall or pillar")
    if not cls.__module__.startswith(f"{__package__}."):  # a plugin's or a script's: checked against every
        load_pillars()  # built-in task, as when every pillar was imported first
    if dict.__contains__(TASKS, cls.id):
        raise ValueError(f"task id registered twice: {cls.id}")
    TASKS[cls.id] = cls
    return cls


PILLARS = tuple(PILLAR_NAMES)  # the paper's eight, in its order (scoring/pillars.py)


def selects(selection: str | None, task_id: str) -> bool:
    """Whether a --tasks selection holds `task_id`, read from the names alone as resolve_tasks reads them
    (nothing is loaded or built): the task's own name, its pillar's, or 'all' (or nothing) for a task that
    is not run by name only."""
    names = {n.strip() for n in (selection or "all").split(",")} - {""}
    everyday = not getattr(TASKS.get(task_id), "by_name_only", False)
    return task_id in names or (everyday and bool({"all", task_id.split(".")[0]} & names or not names))


def resolve_tasks(selection: str | None) -> list[Task]:
    """Task instances for a comma-separated list of task ids and/or pillar names ('all' or None: every task
    but those run by name only, which `all,crisis.conversation` adds). Installed task plugins (entry
    points) are loaded first, so they are part of 'all' and of their pillars."""
    load_task_plugins()
    # Only the pillars the selection names are imported (every one for 'all' and for a name of no built-in
    # pillar): every task of a pillar is declared in its package, so the others cannot change what it selects.
    names = [n.strip() for n in (selection or "all").split(",")]
    load_pillars(None if any(_pillar_of(n) is None for n in names if n) else {n.split(".")[0] for n in names if n})
    registered = TASKS.loaded()
    everyday = [k for k in sorted(registered) if not registered[k].by_name_only]  # what 'all' and the pillars hold
    if not selection or selection.strip() == "all":
        return [registered[k]() for k in everyday]
    chosen: list[str] = []
    for raw in selection.split(","):
        name = raw.strip()
        if not name:
            continue
        if name in registered:
            matches = [name]
        elif name == "all":
            matches = everyday
        else:
            matches = [k for k in everyday if k.split(".")[0] == name]
        if not matches:
            options = list(TASKS) + sorted({k.split(".")[0] for k in TASKS})
            close = difflib.get_close_matches(name, options, n=3, cutoff=0.5)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UserError(f"unknown task or pillar '{name}'{hint}; `trustmh list` shows them all")
        chosen += [m for m in matches if m not in chosen]
    return [registered[k]() for k in chosen]
