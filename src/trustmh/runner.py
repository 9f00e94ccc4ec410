"""Running an evaluation: build samples, get every response and judgement (cached, concurrent,
retried), then score and aggregate from the store in one streaming pass.

The two phases are separate on purpose: phase 1 is the only one that spends money, and phase 2 can
be re-run any number of times (`trustmh score`) from the store alone."""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import math
import os
import platform
import random
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .data.loaders import file_sha256
from .errors import UserError
from .limiter import AdaptiveLimiter
from .metrics import Table, bootstrap, count, derived_seed, trust_score
from .models import Model, ModelRef, env_secrets, make_model, redact_url, unsendable_params
from .models._errors import redact
from .models.replay import ReplayModel
from .results import MetricValue, ModelResults, PillarResult, RunResults, TaskResult
from .store import Store
from .tasks import PILLARS, DataSource, Judged, RunContext, Task, resolve_tasks
from .types import ModelError, Request, Response, Sample

console = Console(stderr=True)

DEFAULT_PARAMS = {"temperature": 0.0, "max_tokens": 1024}
JUDGE_PARAMS = {"temperature": 0.0, "max_tokens": 512}


@dataclass
class RunSpec:
    """Everything that decides the results. Its hash names the run directory."""

    models: list[str]
    judge: str = "rules"
    tasks: str = "all"
    seed: int = 0
    limit: int | None = None
    suite: str = "sample"  # "sample" or "data"
    data_dir: str | None = None
    base_url: str | None = None
    judge_base_url: str | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    upstream_compat: bool = False
    n_boot: int = 1000
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The spec as stored and published: base URLs lose any embedded credentials."""
        d = dict(self.__dict__)
        d["base_url"], d["judge_base_url"] = redact_url(self.base_url), redact_url(self.judge_base_url)
        return d

    def run_id(self) -> str:
        blob = json.dumps(self.to_json(), sort_keys=True).encode()
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", self.models[0].split("/", 1)[-1]).strip("-.")[:40] or "run"
        return f"{slug}-{hashlib.sha256(blob).hexdigest()[:10]}"


@dataclass
class Limits:
    max_connections: int = 32
    timeout: float = 120.0
    max_retries: int = 6
    backoff_base: float = 1.0
    backoff_max: float = 60.0


class AuthFailure(Exception):
    pass


class CallWriter:
    """Group commit for the store. The replies that arrive in one pass of the event loop are written in
    one transaction (a commit per reply cost as much as the rest of the request path). Every reply is
    still stored before anything else happens: its caller waits for the commit, and an endpoint commits
    whatever is waiting before it sends a request, so a kill -9 loses no more than the calls in flight."""

    def __init__(self, store: Store):
        self.store = store
        self.rows: list[tuple] = []
        self.done: asyncio.Future[None] | None = None

    def add(self, key: str, endpoint: str, purpose: str, request: Request, resp: Response) -> asyncio.Future[None]:
        if not self.rows:
            loop = asyncio.get_running_loop()
            self.done = loop.create_future()
            loop.call_soon(self.flush)
        self.rows.append((key, endpoint, purpose, (request.task, request.item_id, request.variant), resp))
        return self.done

    def flush(self) -> None:
        if not self.rows:
            return
        rows, done = self.rows, self.done
        self.rows, self.done = [], None
        try:
            self.store.put_calls(rows)
        except BaseException as e:  # noqa: BLE001 - handed to every caller waiting on this commit
            done.set_exception(e)
            done.exception()  # the waiters raise it; do not also log it as never retrieved
        else:
            done.set_result(None)


class Endpoint:
    """One model endpoint: an adaptive bound on requests in flight, retries with back-off, the cache."""

    def __init__(self, model: Model, store: Store, limits: Limits, *, purpose: str, offline_only: bool = False,
                 writer: CallWriter | None = None):
        self.model, self.store, self.limits, self.purpose = model, store, limits, purpose
        # Local models that answer at once (baselines, replay files) need no bound.
        self.limiter = AdaptiveLimiter(limits.max_connections) if model.remote and not offline_only else None
        self.writer = writer or CallWriter(store)
        # In `trustmh score`, the tested model is never called again: only stored replies count.
        self.offline_only = offline_only
        self.n_calls = 0
        # Requests being answered now, by cache key: two samples can share one request (a robustness
        # task's clean sample is its base task's own request), and the second waits instead of paying.
        self.pending: dict[str, asyncio.Future[Response]] = {}

    @property
    def width(self) -> int:
        """How many requests this endpoint can usefully have in flight."""
        return self.limits.max_connections if self.limiter is not None else 1

    def key(self, request: Request) -> str:
        return request.cache_key(self.model.endpoint)

    async def call(self, request: Request, key: str) -> Response:
        if self.offline_only:
            stored = self.store.get_call(key)
            return stored or Response(None, error_kind="not_generated", error="no stored reply in this run")
        shared = self.pending.get(key)
        if shared is not None:
            return await shared
        # A plain future, not a task per call: the caller does the work itself (one scheduling hop less).
        fut = self.pending[key] = asyncio.get_running_loop().create_future()
        try:
            resp = await self._call(request, key)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
                fut.exception()  # raised here already; a sharer, if any, raises it too
            raise
        finally:
            del self.pending[key]
        if not fut.done():
            fut.set_result(resp)
        return resp

    async def _call(self, request: Request, key: str) -> Response:
        resp = await self._with_retries(request)
        await self.writer.add(key, self.model.endpoint, self.purpose, request, resp)
        return resp

    async def _attempt(self, request: Request, retry: bool = False) -> Response:
        """One request to the model. It takes a slot of the limiter for this attempt only: a request
        waiting to retry must not hold one, or after a 429 the retries alone would keep the pressure on."""
        limiter = self.limiter
        if limiter is None:
            self.writer.flush()
            return await self.model.generate(request)
        await limiter.acquire(retry)
        try:
            self.writer.flush()  # replies received so far are committed before a new request leaves
            epoch = limiter.epoch
            try:
                resp = await self.model.generate(request)
            except ModelError as e:
                if e.kind == "rate_limit":
                    limiter.on_rate_limit(epoch, e.retry_after)
                raise
            limiter.on_success(epoch)
            return resp
        finally:
            limiter.release()

    async def _with_retries(self, request: Request) -> Response:
        attempt = 0
        while True:
            attempt += 1
            self.n_calls += 1
            try:
                resp = await self._attempt(request, retry=attempt > 1)
                resp.attempts = attempt
                return resp
            except ModelError as e:
                if e.kind == "auth":
                    raise AuthFailure(f"{self.purpose} {self.model.spec}: authentication failed ({e.message}); "
                                      f"check the API key in the environment") from None
                if not e.retryable or attempt > self.limits.max_retries:
                    return Response(None, error_kind=e.kind, error=e.message, attempts=attempt)
                if e.retry_after is not None:
                    delay = min(e.retry_after, self.limits.backoff_max)
                else:
                    delay = min(self.limits.backoff_base * 2 ** (attempt - 1), self.limits.backoff_max)
                    delay *= 0.5 + random.random()  # jitter so retries do not arrive in lock-step
                await asyncio.sleep(delay)
            except Exception as e:  # noqa: BLE001
                # A backend failing in a way it does not type (a bug, a library error) must not take the
                # whole run down: the sample is counted as an error of kind "other" and the run goes on.
                message = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                for secret in env_secrets():
                    message = redact(message, secret)
                return Response(None, error_kind="other", error=message, attempts=attempt)


def generation_request(sample: Sample, spec: RunSpec) -> Request:
    params = dict(DEFAULT_PARAMS)
    params["temperature"] = spec.temperature
    params.update(sample.params)
    if spec.max_tokens is not None:
        params["max_tokens"] = spec.max_tokens
    params["seed"] = spec.seed
    return Request(sample.messages, params, sample.request_task or sample.task, sample.item.id, sample.variant,
                   "generate", sample.choices)


def judge_request(sample: Sample, messages: list[dict[str, str]], spec: RunSpec) -> Request:
    params = dict(JUDGE_PARAMS, seed=spec.seed)
    return Request(messages, params, sample.request_task or sample.task, sample.item.id, sample.variant, "judge",
                   None)


# --------------------------------------------------------------------------------------------------
# Data

def data_source(spec: RunSpec) -> DataSource:
    if spec.suite == "sample":
        return DataSource(Path(__file__).parent / "data" / "sample", "sample")
    return DataSource(Path(spec.data_dir or "."), "data")


@dataclass
class Prepared:
    task: Task
    samples: list[Sample] = field(default_factory=list)
    not_run: str | None = None
    all_ids: set[str] = field(default_factory=set)


def prepare(spec: RunSpec, ctx: RunContext) -> tuple[list[Prepared], dict[str, str]]:
    """Load every selected task's items and build its samples (in data order, `--limit` first N)."""
    data = data_source(spec)
    prepared, checksums = [], {}
    for task in resolve_tasks(spec.tasks):
        p = Prepared(task)
        missing = task.missing_files(data)
        if missing:
            how = ("run `trustmh data pull` (or `trustmh data pull --from DIR`)" if data.kind == "data"
                   else "the sample suite lacks it")
            from .data.manifest import DATASETS
            gated = DATASETS.get(task.dataset)
            if gated is not None and gated.gated:  # `data pull` cannot fetch it: say how the user gets it
                how = gated.how_to_get
            p.not_run = f"{task.dataset} missing ({missing[0]}) — {how}"
            prepared.append(p)
            continue
        items = task.load(data, ctx)
        p.all_ids = {it.id for it in items}
        if spec.limit is not None:
            items = items[: spec.limit]
        for it in items:
            p.samples.extend(task.samples(it, ctx))
        for f in task.files:
            checksums[f] = file_sha256(data.path(f))
        prepared.append(p)
    if prepared and all(p.not_run for p in prepared):
        raise UserError(f"no selected task has its data in {data.root}: {prepared[0].not_run}")
    return prepared, checksums


class StoredSamples:
    """A task's samples as its run stored them, read back one at a time (sized, re-iterable)."""

    def __init__(self, store: Store, task_id: str, n: int):
        self.store, self.task_id, self.n = store, task_id, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Sample]:
        return self.store.iter_samples(self.task_id)


def record_prepared(store: Store, prepared: list[Prepared], checksums: dict[str, str]) -> None:
    store.put_samples(s for p in prepared for s in p.samples)
    store.set_meta("prepared", {"checksums": checksums,
                                "tasks": {p.task.id: {"not_run": p.not_run, "n": len(p.samples)} for p in prepared}})


def prepare_from_store(spec: RunSpec, store: Store) -> tuple[list[Prepared], dict[str, str]] | None:
    """Re-scoring: the samples the run generated, streamed from its store instead of loading the data
    again, so memory does not grow with the run. None when the store cannot stand in for the data
    (an older store, another task selection, replay files whose ids are checked against the data)."""
    meta = store.get_meta("prepared")
    if meta is None or any(m.startswith("replay/") for m in [*spec.models, spec.judge]):
        return None
    tasks = resolve_tasks(spec.tasks)
    if [t.id for t in tasks] != list(meta["tasks"]):
        return None
    counts = store.sample_counts()
    prepared = []
    for task in tasks:
        m = meta["tasks"][task.id]
        if m["not_run"]:
            prepared.append(Prepared(task, not_run=m["not_run"]))
        elif counts.get(task.id, 0) != m["n"]:
            return None
        else:
            prepared.append(Prepared(task, samples=StoredSamples(store, task.id, m["n"])))  # type: ignore[arg-type]
    return prepared, meta["checksums"]


# --------------------------------------------------------------------------------------------------
# Phase 1: responses and judgements

def _progress(enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("[red]{task.fields[errors]} errors"), TextColumn("{task.fields[rate]}"),
                    TimeElapsedColumn(), console=console, disable=not enabled, transient=False)


async def collect(spec: RunSpec, ctx: RunContext, prepared: list[Prepared], store: Store, limits: Limits,
                  *, generate: bool = True, progress: bool = True) -> dict[str, int]:
    """Make sure every sample has a stored reply (unless `generate` is False) and judgement."""
    if not generate and spec.judge == "rules":
        return {m: 0 for m in spec.models}  # re-scoring offline: nothing to fetch, phase 2 reads the store
    judge_model = None if spec.judge == "rules" else make_model(
        spec.judge, base_url=spec.judge_base_url, timeout=limits.timeout, seed=spec.seed, purpose="judge",
        transport=spec.options.get("transport", "http"), max_connections=limits.max_connections)
    # One group commit for both endpoints: no request of either leaves before every reply is stored.
    writer = CallWriter(store)
    judge_ep = Endpoint(judge_model, store, limits, purpose="judge", writer=writer) if judge_model else None
    samples = [(p.task, s) for p in prepared for s in p.samples]
    calls = collections.Counter()
    try:
        for model_spec in spec.models:
            model = make_model(model_spec, base_url=spec.base_url, timeout=limits.timeout, seed=spec.seed,
                               transport=spec.options.get("transport", "http"),
                               max_connections=limits.max_connections)
            if isinstance(model, ReplayModel):
                model.check_ids({p.task.id: p.all_ids for p in prepared if not p.not_run})
            if isinstance(judge_model, ReplayModel):
                judge_model.check_ids({p.task.id: p.all_ids for p in prepared if not p.not_run})
            gen_ep = Endpoint(model, store, limits, purpose="model", offline_only=not generate, writer=writer)
            try:
                await _collect_model(spec, ctx, samples, gen_ep, judge_ep, store, progress, model_spec)
            finally:
                await model.aclose()
            calls[model_spec] = gen_ep.n_calls
        if judge_ep:
            calls["judge"] = judge_ep.n_calls
    finally:
        writer.flush()  # interrupted (Ctrl-C, an error): replies already received are kept
        if judge_model:
            await judge_model.aclose()
    return dict(calls)


async def _collect_model(spec, ctx, samples, gen_ep: Endpoint, judge_ep: Endpoint | None, store: Store,
                         progress: bool, label: str) -> None:
    gen_reqs = [generation_request(s, spec) for _, s in samples]
    gen_keys = [gen_ep.key(r) for r in gen_reqs]
    # Cacheable models: one bulk lookup decides what is left to do, so a resumed run starts at once.
    cacheable = gen_ep.model.cacheable or gen_ep.offline_only
    done = store.ok_keys(gen_keys) if cacheable else set()
    # Counted here and shown by a ticker a few times a second: updating the bars per reply cost more
    # than the rest of the request path.
    n = {"gen": 0, "gen_errors": 0, "judge": 0, "judge_done": 0, "judge_errors": 0}

    # Generation and judging run in separate worker pools joined by a queue, so a slow or stalled judge
    # never holds up generation (and the other way round). Workers, not a task per sample: memory does
    # not grow with the run.
    judge_queue: asyncio.Queue = asyncio.Queue()

    async def generate(i: int) -> None:
        task, sample = samples[i]
        req, key = gen_reqs[i], gen_keys[i]
        if key in done:
            resp = store.get_call(key)
        else:
            resp = await gen_ep.call(req, key)
            if resp.ok and cacheable:
                done.add(key)  # a later sample with the same request reads it instead of paying again
        n["gen"] += 1
        if not resp.ok:
            n["gen_errors"] += 1
        if resp.ok and judge_ep is not None and task.uses_judge:
            judge_queue.put_nowait((i, resp.text))

    async def judge(i: int, reply: str) -> None:
        task, sample = samples[i]
        msgs = task.judge_messages(sample, reply, ctx)
        if msgs is None:
            return
        jreq = judge_request(sample, msgs, spec)
        jkey = judge_ep.key(jreq)
        n["judge"] += 1
        cached = store.get_call(jkey) if judge_ep.model.cacheable else None
        if cached is None or not cached.ok:
            jresp = await judge_ep.call(jreq, jkey)
            if not jresp.ok:
                n["judge_errors"] += 1
        n["judge_done"] += 1

    todo = iter(range(len(samples)))

    async def gen_worker() -> None:
        for i in todo:
            await generate(i)

    async def judge_worker() -> None:
        while (job := await judge_queue.get()) is not None:
            await judge(*job)

    async def generate_all(n_workers: int, n_judges: int) -> None:
        await asyncio.gather(*(gen_worker() for _ in range(n_workers)))
        for _ in range(n_judges):
            judge_queue.put_nowait(None)  # generation is over: each judge worker stops when the queue drains

    with _progress(progress) as bar:
        tid = bar.add_task(f"{label}", total=len(samples), errors=0, rate="")
        jid = bar.add_task("judge " + (spec.judge if judge_ep else "rules"), total=None, errors=0, rate="",
                           visible=judge_ep is not None)
        t_start = asyncio.get_running_loop().time()

        def show() -> None:
            elapsed = asyncio.get_running_loop().time() - t_start
            bar.update(tid, completed=n["gen"], errors=n["gen_errors"],
                       rate=f"{n['gen'] / elapsed:.1f}/s" if elapsed > 0 else "")
            bar.update(jid, total=n["judge"], completed=n["judge_done"], errors=n["judge_errors"])

        async def ticker() -> None:
            while True:
                await asyncio.sleep(0.2)
                show()

        n_gen = max(1, min(len(samples), gen_ep.width))
        n_judge = judge_ep.width if judge_ep is not None else 0
        jobs = [asyncio.create_task(generate_all(n_gen, n_judge))]
        jobs += [asyncio.create_task(judge_worker()) for _ in range(n_judge)]
        tick = asyncio.create_task(ticker()) if progress else None
        try:
            await asyncio.gather(*jobs)
        except BaseException:
            for j in jobs:
                j.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
            raise
        finally:
            if tick is not None:
                tick.cancel()
            show()


# --------------------------------------------------------------------------------------------------
# Phase 2: scoring and aggregation from the store

@dataclass
class SampleRecord:
    sample: Sample
    response: Response | None
    judged: Judged | None
    judge_response: Response | None


def iter_records(spec: RunSpec, ctx: RunContext, p: Prepared, model: ModelRef, judge: ModelRef | None,
                 store: Store) -> Iterator[SampleRecord]:
    for sample in p.samples:
        resp = store.get_call(generation_request(sample, spec).cache_key(model.endpoint))
        judged = jresp = None
        if resp is not None and resp.ok and p.task.uses_judge:
            if judge is None:
                judged = p.task.rules_judge(sample, resp.text, ctx)
            else:
                msgs = p.task.judge_messages(sample, resp.text, ctx)
                if msgs is not None:
                    jresp = store.get_call(judge_request(sample, msgs, spec).cache_key(judge.endpoint))
                    if jresp is None:
                        judged = Judged(reason="judge not run")
                    elif not jresp.ok:
                        judged = Judged(reason=f"judge error: {jresp.error_kind}")
                    else:
                        judged = Judged(text=jresp.text)
        yield SampleRecord(sample, resp, judged, jresp)


class _Columns:
    """Per-sample values as one float array per name, for `Table`: a dict kept per sample would cost
    ~200 bytes each, and a large run's re-scoring should not grow with the run."""

    def __init__(self) -> None:
        self.cols: dict[str, array.array] = {}
        self.n = 0

    def add(self, values: dict[str, float]) -> None:
        for name, v in values.items():
            col = self.cols.get(name)
            if col is None:
                col = self.cols[name] = array.array("d", [math.nan]) * self.n
            col.append(math.nan if v is None else v)
        self.n += 1
        for col in self.cols.values():
            if len(col) < self.n:
                col.append(math.nan)

    def table(self, clusters: list[str], labels: dict[str, list[Any]]) -> Table:
        columns = {name: np.frombuffer(self.cols[name], dtype=float) for name in sorted(self.cols)}
        return Table(columns, np.array(clusters, dtype=object), {k: np.array(v, dtype=object) for k, v in labels.items()})


def score_task(spec: RunSpec, ctx: RunContext, p: Prepared, model: ModelRef, judge: ModelRef | None, store: Store,
               out) -> TaskResult:
    task = p.task
    base = dict(task=task.id, pillar=task.pillar, metric=task.metric.name,
                higher_is_better=task.metric.higher_is_better)
    if p.not_run:
        return TaskResult(status="not run", reason=p.not_run, **base)
    rows, clusters, labels = _Columns(), [], collections.defaultdict(list)
    errors, judge_errors = collections.Counter(), collections.Counter()
    unscored_primary, unscored_by_value = collections.Counter(), collections.defaultdict(collections.Counter)
    primary = task.primary_value
    for rec in iter_records(spec, ctx, p, model, judge, store):
        s, resp = rec.sample, rec.response
        line: dict[str, Any] = {"model": model.spec, "task": s.task, "item_id": s.item.id, "variant": s.variant,
                                "messages": s.messages, "target": s.item.target}
        if resp is None or not resp.ok:
            kind = resp.error_kind if resp else "not_generated"
            errors[kind] += 1
            line.update(response=None, error={"kind": kind, "message": resp.error if resp else "no reply stored"})
        else:
            if rec.judge_response is not None and not rec.judge_response.ok:
                judge_errors[rec.judge_response.error_kind] += 1
            sc = task.score(s, resp.text, rec.judged, ctx)
            rows.add(sc.values)
            clusters.append(task.cluster(s))
            sample_labels = task.labels(s, sc)
            for k, v in sample_labels.items():
                labels[k].append(v)
            for name, reason in sc.unscored.items():
                unscored_by_value[name][reason] += 1
            if primary not in sc.values:
                unscored_primary[sc.unscored.get(primary, "not scored")] += 1
            line.update(response=resp.text, finish_reason=resp.finish_reason, latency_s=resp.latency_s,
                        tokens={"prompt": resp.prompt_tokens, "completion": resp.completion_tokens},
                        attempts=resp.attempts,
                        judge={"text": rec.judged.text, "reason": rec.judged.reason} if rec.judged else None,
                        parsed=sc.parsed, values=sc.values, unscored=sc.unscored, notes=sc.notes,
                        # cluster and labels let `trustmh compare` rebuild the task's Table per item
                        cluster=clusters[-1], labels=sample_labels)
        out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
    table = rows.table(clusters, dict(labels))
    values = task.aggregate(table, ctx) if len(table) else {}
    cis = bootstrap(table, lambda t: task.aggregate(t, ctx), seed=derived_seed(spec.seed, task.id),
                    n_boot=spec.n_boot, aggregate_many=lambda t, r: task.aggregate_many(t, r, ctx))
    value = _clean(values.get(task.metric.name))
    metrics = {k: MetricValue(value=_clean(v), ci=cis.get(k), n=task.metric_n(table, k))
               for k, v in values.items()}
    n_primary = count(table.col(primary))
    reason = None
    if value is None:
        # A null value must say why, so that "-" is never mistaken for a bad score.
        reason = ("no sample could be scored on the primary metric (see unscored reasons and errors)"
                  if n_primary == 0 else
                  f"{task.metric.name} is undefined on the scored samples (e.g. constant ratings for a "
                  f"correlation, or a class missing from both gold and predictions)")
    return TaskResult(status="ok", value=value, ci=cis.get(task.metric.name), reason=reason,
                      trust_score=trust_score(value, task.metric.lo, task.metric.hi, task.metric.higher_is_better),
                      n=n_primary, n_samples=len(p.samples),
                      n_unscored=sum(unscored_primary.values()), unscored_reasons=dict(unscored_primary),
                      unscored_by_value={k: dict(v) for k, v in unscored_by_value.items()},
                      n_errors=sum(errors.values()), error_kinds=dict(errors),
                      n_judge_errors=sum(judge_errors.values()), judge_error_kinds=dict(judge_errors),
                      metrics=metrics, **base)


def _clean(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def pillar_scores(tasks: dict[str, TaskResult]) -> dict[str, PillarResult]:
    out = {}
    for pillar in PILLARS:
        members = [t for t in tasks.values() if t.pillar == pillar]
        if not members:
            continue
        scores = [t.trust_score for t in members if t.trust_score is not None]
        out[pillar] = PillarResult(pillar=pillar, tasks=[t.task for t in members],
                                   trust_score=round(sum(scores) / len(scores), 2) if scores else None)
    return out


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("trustmh", "openai", "anthropic", "numpy", "scipy", "scikit-learn", "pydantic"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    return out


def param_notes(spec: RunSpec) -> list[str]:
    """One line per model or judge whose backend could not send some of the run's generation settings:
    results.json records temperature 0, and a reader must learn that it did not apply."""
    notes = []
    judges = [] if spec.judge == "rules" else [("judge", spec.judge)]
    for role, model_spec in [("model", m) for m in spec.models] + judges:
        unsent = unsendable_params(model_spec)
        if unsent:
            notes.append(f"{role} {model_spec}: {' and '.join(unsent)} not sent (the installed provider SDK and "
                         f"API version no longer accept sampling parameters); its replies were sampled at the "
                         f"provider's defaults, so reruns may differ")
    return notes


def finalize(run_dir: Path, spec: RunSpec, ctx: RunContext, prepared: list[Prepared], store: Store,
             checksums: dict[str, str], limits: Limits) -> RunResults:
    """Phase 2: stream every sample through its task's scorer; write samples.jsonl and results.json."""
    judge = None if spec.judge == "rules" else ModelRef(spec.judge, spec.judge_base_url)
    models: dict[str, ModelResults] = {}
    tmp = run_dir / "samples.jsonl.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        out = _HashingWriter(fh)
        for model_spec in spec.models:
            model = ModelRef(model_spec, spec.base_url)
            tasks = {p.task.id: score_task(spec, ctx, p, model, judge, store, out) for p in prepared}
            pillars = pillar_scores(tasks)
            ps = [p.trust_score for p in pillars.values() if p.trust_score is not None]
            models[model_spec] = ModelResults(model=model_spec, tasks=tasks, pillars=pillars,
                                              trust_score=round(sum(ps) / len(ps), 2) if ps else None)
    data = data_source(spec)
    results = RunResults(
        run_id=run_dir.name, created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        spec=spec.to_json(), data={"kind": data.kind, "root": str(data.root), "sha256": checksums},
        versions=versions(), bootstrap={"n_boot": spec.n_boot, "level": 0.95, "seed": spec.seed,
                                        "method": "percentile, resampling items (scenarios for leakage)"},
        models=models, notes=param_notes(spec))
    # Each file is replaced atomically, but not both at once: results.json names the samples.jsonl it
    # belongs to by hash, so a pair torn by a kill between the two replacements is detected, not trusted.
    results.outputs = {"samples_sha256": out.sha256.hexdigest()}
    os.replace(tmp, run_dir / "samples.jsonl")
    _atomic_write(run_dir / "results.json", results.model_dump_json(indent=2))
    return results


class _HashingWriter:
    """Writes text lines to a file and keeps the sha256 of the bytes written."""

    def __init__(self, fh):
        self.fh, self.sha256 = fh, hashlib.sha256()

    def write(self, text: str) -> None:
        self.fh.write(text)
        self.sha256.update(text.encode("utf-8"))

    def flush(self) -> None:
        self.fh.flush()


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@contextlib.contextmanager
def run_lock(run_dir: Path):
    """One process per run directory: a second `trustmh run` on it refuses instead of interleaving."""
    fh = (run_dir / "run.lock").open("a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise UserError(f"another trustmh process is using {run_dir}; wait for it or pass a different --out")
    try:
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def open_run_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to output directory {path}: {e.strerror or e}") from None
    return path


def run(spec: RunSpec, out: Path | None = None, *, runs_root: Path = Path("runs"), limits: Limits | None = None,
        progress: bool = True, generate: bool = True, executor=None) -> tuple[Path, RunResults, dict[str, int]]:
    """Run (or resume) an evaluation and write its outputs. Returns (run dir, results, calls made).
    `executor` (see trustmh.executors) runs phase 1 elsewhere, e.g. on Ray; phase 2 always runs here."""
    limits = limits or Limits()
    ctx = RunContext(seed=spec.seed, upstream_compat=spec.upstream_compat, judge=spec.judge,
                     options=spec.options)
    run_dir = open_run_dir(out or runs_root / spec.run_id())
    with run_lock(run_dir):
        store = Store(run_dir / "store.sqlite")
        try:
            if generate:
                store.set_meta("spec", spec.to_json())
            from_store = None if generate else prepare_from_store(spec, store)
            if from_store is not None:
                prepared, checksums = from_store
            else:
                prepared, checksums = prepare(spec, ctx)
                record_prepared(store, prepared, checksums)
            try:
                if executor is not None and generate:
                    calls = executor(spec, ctx, prepared, store, limits, progress=progress)
                else:
                    calls = asyncio.run(collect(spec, ctx, prepared, store, limits, generate=generate,
                                                progress=progress))
            except AuthFailure as e:
                raise UserError(str(e)) from None
            results = finalize(run_dir, spec, ctx, prepared, store, checksums, limits)
        finally:
            store.close()
    return run_dir, results, calls


def load_spec(run_dir: Path) -> RunSpec:
    db = run_dir / "store.sqlite"
    if not db.is_file():
        raise UserError(f"{run_dir} is not a trustmh run directory (no store.sqlite)")
    store = Store(db)
    try:
        raw = store.get_meta("spec")
    finally:
        store.close()
    if raw is None:
        raise UserError(f"{db}: no run spec stored")
    return RunSpec(**raw)
