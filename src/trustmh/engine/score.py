"""Phase 2: score every sample from the store and aggregate, writing samples.jsonl and results.json.

A pure read: a sample's reply and verdicts are found through the links phase 1 wrote, never by
rebuilding a request or rendering a judge prompt again. Re-running it (`trustmh score`) costs nothing
and cannot change what was paid for. Because it reads only the store, a task can be scored as soon as
phase 1 has all of its replies and verdicts, while other tasks are still collecting (`Phase2`), with
the result scoring it at the end would give."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import json
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Generator

import numpy as np

from ..judges.rubric import Judged, Rubric, Verdicts
from ..scoring.metrics import bootstrap, count, derived_seed, n_clusters
from ..models import ModelRef
from ..scoring.pillars import judge_usable_rate, model_summary, task_trust
from ._store import Store
from ..tasks import Method, RunContext, Task, writes
from ..tasks.paper_names import paper_block
from ..tasks.versions import scoring_version
from ..types import Sample
from ..scoring import ALPHA_MIN
from .judge import judge_ids, panel_endpoints, judge_parts
from ._tally import Tally
from ._identity import model_ref, recorded
from ._events import EventSink, PhaseDone, PhaseProgress, PhaseStarted, ignore
from .prepare import Prepared
from ._requests import param_notes
from ..files import HashingWriter, Utf8Writer, append_part, atomic_open, atomic_write
from ._slices import advance, beside, in_slices
from .spec import RunSpec, data_source, versions

if TYPE_CHECKING:  # results.json's models (pydantic schemas, built as they are imported) load where phase 2
    # first makes a result, beside phase 1 or after it: a run's first requests wait for none of it
    from ..scoring.results import ModelResults, RunResults, TaskResult

STALE = "judged with another version of the rubric (rerun to refresh it, or score with --accept-stored)"


def task_header(task: Task, ctx: RunContext) -> dict[str, Any]:
    """What results.json carries about a task so that it can be read without the task's code."""
    m, method = task.metric, task.method(ctx)
    return {"title": task.title, "description": method.metric_description(ctx), "primary_value": task.primary_value,
            "scoring_version": scoring_version(task),
            "trust_range": (m.lo, m.hi) if m.higher_is_better else (m.hi, m.lo),
            "judgements": {r.name: {"role": r.role, "version": r.version, "source": r.source}
                           for r in method.active_rubrics(ctx)},
            "protocol": task.protocol_used(ctx), "evidence": task.evidence,
            "degenerate_checks": [c.to_json() for c in task.degenerate_checks],
            "counted": task.counted.to_json() if task.counted is not None else None,
            "templates": [t.provenance() for t in task.method_templates] if task.protocol_used(ctx) == "paper" else []}


@dataclass
class Scoring:
    """What phase 2 needs besides the samples: where verdicts come from and what to accept."""

    spec: RunSpec
    ctx: RunContext
    store: Store
    judges: dict[str, str]  # rubric role -> judge endpoint id (a panel's first judge for "llm")
    accept_stored: bool = False
    panel: list[tuple[str, str]] = field(default_factory=list)  # (judge, endpoint) of a panel's judges; [] for one
    min_alpha: float = ALPHA_MIN  # a panel's judges agreeing less than this mark the task
    stale: collections.Counter = field(default_factory=collections.Counter)  # (model, task) -> stale verdicts


def _verdicts(sc: Scoring, method: Method, sample: Sample, reply: str, parts: dict[str, tuple],
              rubrics: tuple[Rubric, ...], versions_now: dict[str, str],
              judge_errors: collections.Counter, stale_key: tuple[str, str]) -> Verdicts | None:
    if not rubrics:
        return None
    out = Verdicts()
    rules = None
    for r in rubrics:
        if r.role == "llm" and "llm" not in sc.judges:
            if rules is None:
                rules = method.rules_judge(sample, reply, sc.ctx)
            out[r.name] = rules.get(r.name, Judged(reason="no rules verdict")) if isinstance(rules, Verdicts) else rules
            continue
        version, resp = parts.get(r.name, (None, None))
        if resp is None:
            out[r.name] = Judged(reason="judge not run")
        elif not resp.ok:
            judge_errors[resp.error_kind] += 1
            out[r.name] = Judged(reason=f"judge error: {resp.error_kind}")
        elif version != versions_now[r.name] and not sc.accept_stored:
            sc.stale[stale_key] += 1
            out[r.name] = Judged(reason=STALE)
        else:
            out[r.name] = Judged(text=resp.text)
    return out


def score_task(sc: Scoring, p: Prepared, model: ModelRef, out) -> TaskResult:
    """Score one task of one model, writing its samples.jsonl lines to `out`."""
    return _run(score_steps(sc, p, model, out))


def score_steps(sc: Scoring, p: Prepared, model: ModelRef, out) -> Generator[None, None, TaskResult]:
    """score_task a sample at a time: it yields after each one, so that a caller can interleave it with
    other work (the event loop's I/O while phase 1 goes on); its result is the generator's return value.
    A judge panel scores each sample once per judge first (a pass of its own: whether a value is a label
    the judges vote on or a score they average is known only from the whole task), then as one."""
    from ..scoring.results import TaskResult
    task, ctx = p.task, sc.ctx
    method = task.method(ctx)
    sc.stale.pop((model.spec, task.id), None)  # counted anew: a task may be scored again
    base = dict(task=task.id, pillar=task.pillar, metric=task.metric.name,
                higher_is_better=task.metric.higher_is_better, **task_header(task, ctx))
    if p.not_run:
        return TaskResult(status="not run", reason=p.not_run, **base)
    rubrics = method.active_rubrics(ctx)
    versions_now = {r.name: r.version for r in rubrics}  # read once per task, not per sample
    linked = sc.store.linked(model.endpoint, task.id, [sc.judges[r] for r in {r.role for r in rubrics}
                                                       if r in sc.judges])
    # A verdict the offline rules judge cannot give is "not judged" (unscored, with its reason); a judge
    # failure is a judge model's or classifier's verdict that is missing or unusable.
    tally = Tally(task, ctx, judged_by_model=any(r.role in sc.judges for r in rubrics))
    panel = sc.panel if any(r.role == "llm" for r in rubrics) else []
    if panel:
        tally.for_panel([j for j, _ in panel])
        yield from _judge_each(sc, p, model, linked, rubrics, versions_now, tally)
    for i, s in enumerate(p.samples):
        parts = linked.get((s.item.id, s.variant), {})
        asked, resp = parts.get("", (None, None))
        if resp is None or not resp.ok:
            line = tally.error(s, model.spec, resp)
        else:
            if panel:
                judged, score = tally.panel_next()
            else:
                judged = _verdicts(sc, method, s, resp.text or "", parts, rubrics, versions_now, tally.judge_errors,
                                   (model.spec, task.id))
                score = method.score(s, resp.text or "", judged, ctx)
            line = tally.add(s, model.spec, resp, asked, judged, score)
        out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
        yield
    return (yield from _task_result(sc, p, model, tally, base))


def _judge_each(sc: Scoring, p: Prepared, model: ModelRef, linked: dict, rubrics: tuple[Rubric, ...],
                versions_now: dict[str, str], tally: Tally) -> Generator[None, None, None]:
    """A panel's first pass: every scored sample's verdicts and Score from each judge in turn, and each
    judge's own per-sample values table."""
    task, ctx = p.task, sc.ctx
    method = task.method(ctx)
    llm = {r.name for r in rubrics if r.role == "llm"}
    own = [linked] + [sc.store.linked(model.endpoint, task.id, [endpoint]) for _, endpoint in sc.panel[1:]]
    for s in p.samples:
        parts = linked.get((s.item.id, s.variant), {})
        _asked, resp = parts.get("", (None, None))
        if resp is None or not resp.ok:
            continue
        verdicts, scores = [], []
        for j, by_sample in enumerate(own):
            seen = parts if j == 0 else judge_parts(parts, by_sample.get((s.item.id, s.variant), {}), llm)
            judged = _verdicts(sc, method, s, resp.text or "", seen, rubrics, versions_now, tally.judge_errors,
                               (model.spec, task.id))
            score = method.score(s, resp.text or "", judged, ctx)
            tally.judge_rows[j].add(score.values)
            for k, v in method.labels(s, score).items():
                tally.judge_labels[j][k].append(v)
            verdicts.append(judged)
            scores.append(score)
        tally.judge_clusters.append(method.cluster(s))
        tally.panel.add(scores, verdicts)
        yield
    tally.panel.settle()


def _task_result(sc: Scoring, p: Prepared, model: ModelRef, t: Tally, base: dict) -> Generator[None, None, TaskResult]:
    """The task's aggregate, bootstrap and counts as its results.json entry."""
    from ..scoring.results import MetricValue, TaskResult
    task, ctx, primary = p.task, sc.ctx, p.task.primary_value
    method = task.method(ctx)
    table = t.rows.table(t.clusters, dict(t.labels))
    values = method.aggregate(table, ctx) if len(table) else {}
    # The bootstrap (1000 aggregations) in slices too, so that phase 1's loop never waits ~0.35 s for it.
    draws: dict[str, np.ndarray] = {}
    cis = {}
    if len(set(t.clusters)) >= method.min_clusters:  # else too few clusters for any interval (INFERENCE.md §2)
        cis = yield from in_slices(lambda pause: bootstrap(
            table, lambda t: pause() or method.aggregate(t, ctx), seed=derived_seed(sc.spec.seed, task.id),
            n_boot=sc.spec.n_boot, aggregate_many=lambda t, r: pause() or method.aggregate_many(t, r, ctx),
            point=values, keep=draws))
    value = _clean(values.get(task.metric.name))
    metrics = {k: MetricValue(value=_clean(v), ci=_clean_ci(cis.get(k)), n=method.metric_n(table, k))
               for k, v in values.items()}
    paper = paper_block(task.paper_names, metrics) if ctx.protocol == "paper" and task.paper_protocol else {}
    n_primary = count(table.col(primary))
    reason = None
    if value is None:
        # A null value must say why, so that "-" is never mistaken for a bad score.
        reason = ("no sample could be scored on the primary metric (see unscored reasons and errors)"
                  if n_primary == 0 else
                  f"{task.metric.name} is undefined on the scored samples (e.g. constant ratings for a "
                  f"correlation, or a class missing from both gold and predictions)")
    trust, why = task_trust(task, table, value)
    # a free-text task's pairwise similarity of replies, in slices as the bootstrap (30 ms for 300 replies)
    degenerate = (yield from in_slices(t.degenerate_statistics)) if t.compared else t.degenerate_statistics()
    if why is not None:
        reason = f"undefined by the model's replies ({why}): trust score 0, the worst"
    panel = None
    if t.panel is not None:
        tables = [rows.table(t.judge_clusters, dict(labels)) for rows, labels in zip(t.judge_rows, t.judge_labels)]
        panel = t.panel.result(task, ctx, tables, seed=sc.spec.seed, n_boot=sc.spec.n_boot,
                               label=f"{model.spec}|{task.id}", min_alpha=sc.min_alpha)
    result = TaskResult(status="ok", value=value, ci=_clean_ci(cis.get(task.metric.name)), reason=reason, trust_score=trust,
                      undefined_by_model=why, n_judged=t.n_judged,
                      judge_usable_rate=judge_usable_rate(t.n_judged, t.n_usable),
                      n=n_primary, n_clusters=n_clusters(table.clusters), n_samples=len(p.samples),
                      n_unscored=sum(t.unscored_primary.values()), unscored_reasons=dict(t.unscored_primary),
                      unscored_by_value={k: dict(v) for k, v in t.unscored_by_value.items()},
                      n_errors=sum(t.errors.values()), error_kinds=dict(t.errors),
                      n_judge_errors=sum(t.judge_errors.values()), judge_error_kinds=dict(t.judge_errors),
                      n_no_answer=sum(t.no_answer.values()), no_answer_reasons=dict(t.no_answer), n_reasked=t.reasked,
                      n_judge_failed=sum(t.judge_failed.values()), judge_failed_reasons=dict(t.judge_failed),
                      n_stale_judgements=sc.stale.get((model.spec, task.id), 0), metrics=metrics, paper=paper,
                      n_judge_addressed=t.n_addressed, judge_addressed=t.addressed,
                      base_metric=task.base_metric, base_value=_clean(values.get(task.base_metric or "")),
                      same_reply_share=t.same_reply_share(), partial=method.partial(ctx, p.samples),
                      **degenerate,
                      panel=panel, **base)
    # The pillars' intervals come from the same draws as their rows' (not written to results.json).
    kept = (task.metric.name, task.counted.metric if task.counted is not None else None)
    result._draws = {k: draws[k] for k in kept if k in draws}
    return result


def _clean(v: float | None) -> float | None:
    """A metric value as results.json holds it: a finite number, or None (results.json has no NaN/inf)."""
    return None if v is None or not math.isfinite(v) else float(v)


def _clean_ci(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    return ci if ci is not None and all(math.isfinite(x) for x in ci) else None


def task_origins(prepared: list[Prepared]) -> dict[str, dict[str, str]]:
    """Where each task not built into trustmh came from (module, and file for a script or --include)."""
    from ..plugins import task_origin
    return {p.task.id: o for p in prepared if (o := task_origin(type(p.task))) is not None}


SAMPLE_BANNER = ("SAMPLE SUITE: a few built-in items per task, to try trustmh out; these numbers are not benchmark "
                 "results (run `trustmh data pull`, then `trustmh run --suite data`)")


def on_sample_data(kind: str, prepared: list[Prepared]) -> bool:
    """Whether a run's numbers rest on the sample suite's items: a task that ran read its files. Tasks with
    items of their own (a plugin's, built in) are not a try-out of the sample suite, and carry no banner."""
    return kind == "sample" and any(p.task.files and not p.not_run for p in prepared)


def finalize(run_dir: Path, spec: RunSpec, ctx: RunContext, prepared: list[Prepared], store: Store,
             checksums: dict[str, str], *, accept_stored: bool = False, events: EventSink = ignore) -> RunResults:
    """Phase 2: stream every sample through its task's scorer; write samples.jsonl and results.json."""
    return Phase2(run_dir, spec, ctx, prepared, store, accept_stored=accept_stored, events=events).finish(checksums)


class Phase2:
    """Phase 2 for a whole run, a task at a time. Phase 1 calls `ready(model, task)` once every reply and
    verdict of that task is stored; `background()`, run on phase 1's event loop, scores ready tasks in
    slices of a few milliseconds between the loop's I/O, so requests keep flowing (one thread: no GIL
    contention with the request path). `finish()` scores whatever is left, then joins the tasks'
    samples.jsonl lines, kept meanwhile in anonymous temporary files (nothing is left behind by a kill),
    in run order and writes results.json. Scoring reads only the store, so a task scored early gives
    exactly what scoring it in `finish` gives."""

    def __init__(self, run_dir: Path, spec: RunSpec, ctx: RunContext, prepared: list[Prepared], store: Store, *,
                 accept_stored: bool = False, events: EventSink = ignore):
        self.run_dir, self.spec, self.ctx, self.prepared, self.store = run_dir, spec, ctx, prepared, store
        self.accept_stored, self.events = accept_stored, events
        self.by_id = {p.task.id: p for p in prepared}
        self._sc: Scoring | None = None
        self._models: dict[str, ModelRef] = {}
        self.results: dict[tuple[str, str], TaskResult] = {}
        self.parts: dict[tuple[str, str], IO[bytes]] = {}
        self.queue: collections.deque[tuple[str, str]] = collections.deque()
        self.current: tuple[tuple[str, str], Generator[None, None, TaskResult]] | None = None
        self.wake: asyncio.Event | None = None
        # Replies whose task does part of its scoring ahead (Method.ahead), waiting for the background.
        self.replies: collections.deque[tuple[str, Task, Sample, str]] = collections.deque()
        self._has_ahead: dict[str, bool] = {}
        self.n_scored = 0  # samples of the tasks scored so far, for the progress bar
        self.started = False

    @property
    def total(self) -> int:  # counted ahead while phase 1 still builds samples (Prepared.expected_samples)
        return len(self.spec.models) * sum(p.expected_samples() for p in self.prepared)

    # Made on first use: phase 1 records the judges' and models' identities these are read from.
    @property
    def sc(self) -> Scoring:
        if self._sc is None:
            self._sc = Scoring(self.spec, self.ctx, self.store, judge_ids(self.spec, self.ctx, self.store),
                               self.accept_stored, panel=panel_endpoints(self.spec, self.store),
                               min_alpha=self.spec.min_judge_alpha)
        return self._sc

    def model(self, model_spec: str) -> ModelRef:
        if model_spec not in self._models:
            self._models[model_spec] = model_ref(model_spec, self.spec.model_base_url(model_spec), self.store)
        return self._models[model_spec]

    def _announce(self) -> None:
        if not self.started:
            self.started = True
            self.events(PhaseStarted("score", "scoring", self.total))

    def _start(self, key: tuple[str, str]) -> Generator[None, None, TaskResult]:
        self._announce()
        part = self.parts[key] = tempfile.TemporaryFile(dir=self.run_dir)
        return score_steps(self.sc, self.by_id[key[1]], self.model(key[0]), Utf8Writer(part))

    def _scored(self, key: tuple[str, str], result: TaskResult) -> None:
        self.results[key] = result
        self.n_scored += len(self.by_id[key[1]].samples)
        if all((m, key[1]) in self.results for m in self.spec.models):
            self.by_id[key[1]].release()  # scored by every model: its samples need not stay in memory
        self.events(PhaseProgress("score", "scoring", self.n_scored, self.total,
                                  estimated=any(p.pending is not None for p in self.prepared)))

    # --- while phase 1 runs -----------------------------------------------------------------------
    def ready(self, model_spec: str, task_id: str) -> None:
        if task_id in self.by_id and (model_spec, task_id) not in self.results:
            self.queue.append((model_spec, task_id))
            if self.wake is not None:
                self.wake.set()

    def replied(self, model_spec: str, task: Task, sample: Sample, reply: str) -> None:
        """A reply has arrived: the part of its scoring its task can do ahead (`Method.ahead`) is done in the
        background while the judge works, so that the task's scoring after its last verdict is shorter."""
        has = self._has_ahead.get(task.id)
        if has is None:
            has = self._has_ahead[task.id] = task.id in self.by_id and writes(task.method(self.ctx), "ahead")
        if has and (model_spec, task.id) not in self.results:
            self.replies.append((model_spec, task, sample, reply))
            if self.wake is not None:
                self.wake.set()

    def _ahead(self, deadline: float) -> bool:
        """Replies' work ahead until `deadline` (ready tasks come first); True while some is left."""
        while self.replies and time.perf_counter() < deadline:
            model_spec, task, sample, reply = self.replies.popleft()
            if (model_spec, task.id) in self.results:
                continue
            try:
                task.method(self.ctx).ahead(sample, reply, self.ctx)
            except Exception:  # noqa: BLE001 - only a cache: score() does the work again, and raises there
                pass
        return bool(self.replies)

    async def background(self) -> None:
        """Score ready tasks until cancelled (phase 1 is over); a task cut short is finished by `finish`.
        A task whose scoring raises is left to `finish`, which scores it again and raises there. Between
        ready tasks, the replies' work ahead (`replied`)."""
        self.wake = asyncio.Event()

        def step(deadline: float) -> bool | None:
            while self.current is None:
                if not self.queue:
                    return self._ahead(deadline)  # then wait for the next ready() or reply
                key = self.queue.popleft()
                if key not in self.results:
                    self.current = (key, self._start(key))
            key, steps = self.current
            try:
                done, result = advance(steps, deadline)
            except Exception:  # noqa: BLE001 - raised again, where it belongs, when finish() scores it
                self.current = None
                self.parts.pop(key).close()
                return None
            if done:
                self.current = None
                self._scored(key, result)
            return True

        await beside(step, self.wake)

    # --- after phase 1 ------------------------------------------------------------------------------
    def finish(self, checksums: dict[str, str]) -> RunResults:
        spec, run_dir, events = self.spec, self.run_dir, self.events
        self.replies.clear()  # what was not done ahead is done as each task is scored
        self._announce()
        if self.current is not None:  # the task phase 1 ended in the middle of
            (key, steps), self.current = self.current, None
            self._scored(key, _run(steps))
        models: dict[str, ModelResults] = {}
        for model_spec in spec.models:
            tasks = {}
            for p in self.prepared:
                key = (model_spec, p.task.id)
                if key not in self.results:
                    self._scored(key, _run(self._start(key)))
                tasks[p.task.id] = self.results[key]
            models[model_spec] = model_summary(model_spec, tasks, seed=spec.seed)
            models[model_spec].identity = recorded(model_spec, self.store)
        events(PhaseDone("score", "scoring"))
        # Each file is replaced atomically, but not both at once: results.json names the samples.jsonl it
        # belongs to by hash, so a pair torn by a kill between the two replacements is detected, not trusted.
        with atomic_open(run_dir / "samples.jsonl", binary=True) as fh:
            out = HashingWriter(fh)
            for key in ((m, p.task.id) for m in spec.models for p in self.prepared):
                append_part(out, self.parts.pop(key))
        results = self._results(models, checksums)
        results.outputs = {"samples_sha256": out.sha256.hexdigest()}
        atomic_write(run_dir / "results.json", results.model_dump_json(indent=2))
        return results

    def _results(self, models: dict[str, ModelResults], checksums: dict[str, str]) -> RunResults:
        from ..scoring.results import RunResults
        spec, store, stale = self.spec, self.store, self.sc.stale
        notes = param_notes(spec)
        from ..models.hf_files import identity_notes
        notes += [n for m in spec.models if (ident := recorded(m, store)) for n in identity_notes(m, ident)]
        if stale:
            by_task: collections.Counter = collections.Counter()
            for (_, task_id), k in stale.items():
                by_task[task_id] += k
            listed = ", ".join(f"{t}: {k}" for t, k in sorted(by_task.items()))
            notes.append(f"{sum(by_task.values())} stored judgements ({listed}) were made with another version of "
                         f"their rubric and were not used: rerun `trustmh run` to refresh them, or score with "
                         f"--accept-stored to use them as they are")
        data = data_source(spec)
        published = spec.to_json()
        origins = task_origins(self.prepared)
        if origins:  # tasks from plugins, --include files or scripts: where a reader (and `score`) finds their code
            published["task_origins"] = origins
        return RunResults(
            run_id=self.run_dir.name, created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            spec=published, data={"kind": data.kind, "root": str(data.root), "sha256": checksums},
            versions=versions(spec), bootstrap={"n_boot": spec.n_boot, "level": 0.95, "seed": spec.seed,
                                            "method": "percentile, resampling items (scenarios for leakage)"},
            models=models, notes=notes, roles=spec.roles(), banner=SAMPLE_BANNER if on_sample_data(data.kind, self.prepared) else None)


def _run(steps: Generator[None, None, TaskResult]) -> TaskResult:
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
