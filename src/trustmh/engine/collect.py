"""Phase 1: make sure every sample has a stored reply and every judgement it needs a stored verdict.

This is the only phase that spends money. Generation and each judge run in worker pools of their own,
joined by queues, so a slow or stalled judge never holds up generation (nor the other way round).
Workers, not a task per sample: memory does not grow with the run. Every tested model runs at the same
time as the others, each through its own endpoint and concurrency; a judge endpoint is one pool shared
by all of them, taking their judgements in turn (`JudgePool`). Every call is recorded with a link naming
the sample and rubric it answers, which is all that scoring (phase 2) reads."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
from typing import Any, Awaitable, Callable, Iterator, Sequence

from ..models import make_model
from ._store import Store
from ..tasks import TASKS, RunContext, Task
from ..types import Chain, Request, Response, Sample
from . import _conversation as conversation
from ._endpoint import CallWriter, Endpoint
from ._generation_share import GenerationShare
from .judge import JudgeJob, JudgePool, Judges, Pending, identified_judges, judge_backends, judge_chain
from . import _identity as identity
from ._identity import model_ref
from ._events import EventSink, PhaseDone, PhaseProgress, PhaseStarted, TaskProgress, ignore
from .prepare import Prepared, samples_except
from ._requests import generation_request, judge_request
from .spec import Limits, RunSpec


def _needed_roles(prepared: list[Prepared], ctx: RunContext) -> set[str]:
    return {r.role for p in prepared if not p.not_run for r in p.task.method(ctx).active_rubrics(ctx)}


def _judge_models(spec: RunSpec, ctx: RunContext, prepared: list[Prepared], limits: Limits) -> dict[str, list[Any]]:
    """The judge backends by role, for the roles the run's rubrics name ("llm": one per judge of the panel)."""
    return judge_backends(spec, ctx, _needed_roles(prepared, ctx), limits, make_model)


def judged_first(prepared: list[Prepared], ctx: RunContext, roles: Any) -> list[Prepared]:
    """The tasks in run order, those with a judgement for one of `roles` (the run's judge pools) first:
    the judge then has work from the first replies on instead of idling while the unjudged tasks (crisis,
    privacy tiers) generate (one model at --limit 300: 0.71 -> 0.93 of the ideal window, bench/README.md).
    Only the order the model is asked in changes: outputs, scoring and the Recorder keep run order."""
    judged = {p.task.id for p in prepared
              if not p.not_run and any(r.role in roles for r in p.task.method(ctx).active_rubrics(ctx))}
    return sorted(prepared, key=lambda p: p.task.id not in judged)  # stable: run order within each group


async def collect(spec: RunSpec, ctx: RunContext, prepared: list[Prepared], store: Store, limits: Limits,
                  *, generate: bool = True, force: bool = False, events: EventSink = ignore,
                  models: dict[str, Any] | None = None, ready: Callable[[str, str], None] | None = None,
                  beside: Sequence[Callable[[], Awaitable[None]]] = (),
                  replied: Callable[[str, Task, Sample, str], None] | None = None) -> dict[str, int]:
    """Phase 1 for every model of the run. With `generate` False (re-scoring) the tested models are never
    called: only judgements missing for this run's judges are made. `models` gives ready backends for some
    specs (judge validation: the human-rated replies stand in for a tested model). `ready(model, task)` is
    told each task whose replies and verdicts are all stored (score.Phase2 scores it then), `replied(model,
    task, sample, reply)` each reply as it arrives (Phase2 does then what scoring it needs of it); `beside` are
    coroutines run on this event loop while phase 1 goes on (recording samples, scoring ready tasks), in
    slices between its I/O, and cancelled when it ends. Returns the calls made per model spec (and
    "judge")."""
    judge_models = _judge_models(spec, ctx, prepared, limits)
    for judge, jm in identified_judges(spec, ctx, judge_models):
        identity.record(judge, jm, store, force=force)
    if not generate and not judge_models:
        return {m: 0 for m in spec.models}  # re-scoring offline: nothing to fetch, phase 2 reads the store
    ids = {p.task.id: p.all_ids for p in prepared if not p.not_run}
    every_judge = [jm for ms in judge_models.values() for jm in ms]
    for jm in every_judge:
        if getattr(jm, "answers_by_id", False):
            jm.check_ids(ids, TASKS)
    # One group commit for every endpoint: no request of any leaves before every reply is stored.
    writer = CallWriter(store)
    judges = Judges({role: [Endpoint(m, store, limits, purpose="judge", writer=writer) for m in ms]
                     for role, ms in judge_models.items()})
    # One pool per judge endpoint (a panel's judges each work at their own pace), listed by role.
    pools = {role: [JudgePool(role, ep, models=len(spec.models)) for ep in eps]
             for role, eps in judges.endpoints.items()}
    calls: collections.Counter = collections.Counter()
    side_jobs = [asyncio.create_task(job()) for job in beside]
    collectors: list[_Collector] = []
    opened: list[Any] = []
    user_ep = conversation.user_endpoint(spec, ctx, prepared, limits, store, writer, events) if generate else None
    if user_ep is not None:
        opened.append(user_ep.model)
    try:
        for model_spec in spec.models:
            if generate:
                model = (models or {}).get(model_spec) or make_model(
                    model_spec, base_url=spec.model_base_url(model_spec), timeout=limits.timeout, seed=spec.seed,
                    transport=spec.transport, max_connections=limits.max_connections,
                    batch_size=limits.batch_size)
                opened.append(model)
                if getattr(model, "answers_by_id", False):
                    model.check_ids(ids, TASKS)
                # A local model whose files changed since this run began is refused (--force: a new run).
                identity.record(model_spec, model, store, force=force)
                gen_ep = Endpoint(model, store, limits, purpose="model", writer=writer)
                collector: _Collector = _Generating(spec, ctx, prepared, judges, store, events, model_spec,
                                                    gen_ep.model.endpoint, pools=pools, writer=writer, gen_ep=gen_ep,
                                                    user_ep=user_ep)
            else:
                ref = model_ref(model_spec, spec.model_base_url(model_spec), store)
                collector = _Rejudging(spec, ctx, prepared, judges, store, events, model_spec, ref.endpoint,
                                       pools=pools, writer=writer)
            if ready is not None:
                collector.ready = functools.partial(ready, model_spec)
            if replied is not None:
                collector.replied = functools.partial(replied, model_spec)
            collectors.append(collector)
        await _run_together(collectors, pools, events)
        for c in collectors:
            calls[c.label] = c.n_calls()
        if judges.endpoints:
            calls["judge"] = sum(ep.n_calls for ep in judges.all())
        if user_ep is not None:
            calls["user"] = user_ep.n_calls
    finally:
        writer.flush()  # interrupted (Ctrl-C, an error): replies already received are kept
        for job in side_jobs:  # what they had left is done after phase 1 (Recorder.finish, Phase2.finish)
            job.cancel()
        await asyncio.gather(*side_jobs, return_exceptions=True)
        for m in [*opened, *every_judge]:
            await m.aclose()
    return dict(calls)


async def _run_together(collectors: list["_Collector"], pools_by_role: dict[str, list[JudgePool]],
                        events: EventSink) -> None:
    """Every model's phase 1 at once, with the shared judge pools; the first failure (an endpoint down, a
    rejected key) stops them all."""
    pools = {pool.ep.model.endpoint: pool for ps in pools_by_role.values() for pool in ps}
    for c in collectors:  # every model's bar from the start: the run's total is known before any call
        events(PhaseStarted("generate", c.label, c.n_samples(), estimated=c.building()))
    for pool in pools.values():
        events(PhaseStarted("judge", pool.label, None))
    loop = asyncio.get_running_loop()
    t_start = loop.time()

    async def models_then_close() -> None:
        try:
            await asyncio.gather(*(c.run() for c in collectors))
        finally:
            for pool in pools.values():
                pool.close()  # no judgement is queued any more: each worker stops when the pool drains

    generating = [c for c in collectors if isinstance(c, _Generating)]
    share = GenerationShare(list(pools.values()), generating) if pools and generating else None
    for c in generating:
        c.share = share
    jobs = [asyncio.create_task(models_then_close())]
    jobs += [asyncio.create_task(pool.work()) for pool in pools.values() for _ in range(pool.ep.width)]

    def show() -> None:
        elapsed = loop.time() - t_start
        for c in collectors:
            c.show(elapsed)
        for pool in pools.values():
            ahead = sum(c.judgements_ahead(pool.ep.model.endpoint) for c in collectors)
            events(PhaseProgress("judge", pool.label, pool.n_done, pool.n_queued + ahead, pool.n_errors,
                                 estimated=ahead > 0))

    async def ticker() -> None:
        # Progress is counted on the way and shown a few times a second: an event per reply cost more
        # than the rest of the request path.
        while True:
            await asyncio.sleep(0.2)
            show()
    tick = asyncio.create_task(ticker())
    watch = asyncio.create_task(share.watch()) if share is not None else None
    try:
        await asyncio.gather(*jobs)
    except BaseException:
        for j in jobs:
            j.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise
    finally:
        tick.cancel()
        if watch is not None:
            watch.cancel()
        show()
        for c in collectors:
            events(PhaseDone("generate", c.label))
        for pool in pools.values():
            events(PhaseDone("judge", pool.label))


@dataclasses.dataclass
class Counts:
    """One model's phase-1 counts, read by the progress ticker: replies in (a failed one too) and failed,
    in all and per task; judgements queued per judge endpoint (the estimate of those ahead rests on them),
    judgements failed per task, and a conversation's turns answered."""

    generated: int = 0
    gen_errors: int = 0
    done: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)  # task -> replies in
    errors: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)  # task -> failed
    judgements: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)  # judge endpoint
    judge_failed: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)  # task
    turns: int = 0  # conversation turns answered (crisis.conversation), in all
    turns_of: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)  # task -> turns


class _Collector:
    """Phase 1 for one tested model: its replies (`_Generating` asks for them, `_Rejudging` reads them from
    the store), each queued for its judgements with the shared judge pools, and when each task is ready.
    What the judge pools need of it is `judge_pool.Judged` (render, judge); what the generation share
    reads, `generation_share.Generation` (width, generations_left, judgements_ahead)."""

    def __init__(self, spec: RunSpec, ctx: RunContext, prepared: list[Prepared], judges: Judges, store: Store,
                 events: EventSink, label: str, model_id: str, *, pools: dict[str, list[JudgePool]],
                 writer: CallWriter):
        self.spec, self.ctx, self.prepared = spec, ctx, prepared
        self.judges, self.store, self.events, self.label = judges, store, events, label
        self.model_id, self.writer = model_id, writer
        # Counted here and reported by a ticker a few times a second: an event per reply cost more than
        # the rest of the request path.
        self.n = Counts()
        # The run's judge pools by role, shared with the other models (their workers run in _run_together).
        self.pools = pools
        self._active: dict[str, dict[str, Any]] = {}  # task id -> its active rubrics by name (`_rubrics`)
        self._params: dict[tuple[str, str], Any] = {}  # (task id, rubric) -> its judge settings
        self.judging = 0  # judgements this model queued that are not finished yet
        self.judged_all: asyncio.Future[None] | None = None  # set once generation is over and judging is 0
        # Set by collect when a scorer waits for tasks: called with a task's id once all its calls are stored.
        self.ready: Callable[[str], None] | None = None
        self.replied: Callable[[Task, Sample, str], None] | None = None  # told each reply (collect's `replied`)
        self.left: collections.Counter = collections.Counter()  # task -> its calls not finished yet
        self.built: set[str] = set()  # tasks whose samples are all built (and counted in `left`)
        self._talking: dict[str, bool] = {}  # task id -> whether its samples are conversations

    # --- what a mode supplies -------------------------------------------------------------------------
    def _jobs(self) -> Iterator[tuple[Request | None, Task, Sample, str]]:
        raise NotImplementedError

    async def _reply(self, request: Request | None, task: Task, sample: Sample, key: str) -> Response | None:
        raise NotImplementedError

    def _to_ask(self, rubric, key: tuple[str, str, str]) -> list[JudgePool]:
        """The judges to ask for `rubric` of the sample `key` (task, item, variant)."""
        return list(self.pools.get(rubric.role, ()))

    @property
    def width(self) -> int:
        """Generation requests in flight at most."""
        return 1

    def n_calls(self) -> int:
        return 0

    # --- every model's replies, then their judgements -----------------------------------------------
    async def run(self) -> None:
        """This model's replies, then until its last judgement is made (by the shared judge pools)."""
        todo = self._jobs()
        side_by_side = conversation.Spawner()

        async def gen_worker() -> None:
            for request, task, sample, key in todo:
                if self._talks(task):  # a conversation: a chain of its own, all of them at once
                    await side_by_side.spawn(self._one(request, task, sample, key))
                else:
                    await self._one(request, task, sample, key)

        try:
            await asyncio.gather(*(gen_worker() for _ in range(self.width)))
        except BaseException:
            side_by_side.cancel()  # a worker failed: the conversations stop too, each one's end retrieved
            await asyncio.gather(*list(side_by_side.running), return_exceptions=True)
            raise
        await side_by_side.wait()
        if self.judging:
            self.judged_all = asyncio.get_running_loop().create_future()
            await self.judged_all

    async def _one(self, request: Request | None, task: Task, sample: Sample, key: str) -> None:
        """One sample's reply, then its judgements queued."""
        resp = await self._reply(request, task, sample, key)
        self.n.generated += 1
        self.n.done[sample.task] += 1
        if resp is None or not resp.ok:
            self.n.gen_errors += 1
            self.n.errors[sample.task] += 1
        elif self.pools:
            for pools in self.pools.values():  # bounded: a busy judge holds generation back
                for pool in pools:
                    await pool.room(self)
            self._queue_judgements(task, sample, resp.text or "")
        if resp is not None and resp.ok and self.replied is not None:
            self.replied(task, sample, resp.text or "")
        self._settle(sample.task)

    def _talks(self, task: Task) -> bool:
        if task.id not in self._talking:
            self._talking[task.id] = conversation.talks(task, self.ctx)
        return self._talking[task.id]

    async def _until_parsed(self, ep: Endpoint, tries: list[tuple[Request, tuple]],
                            parses: Callable[[str], bool] | None) -> Response:
        """Each try in turn (a request and its link without the key: the part of a sample it answers), read
        from the store or asked, until one fails or its reply `parses` (None: the first one counts). The
        link names the latest try, committed with its reply, so scoring reads the reply that parsed or the
        last; every try is a stored call of its own."""
        resp: Response | None = None
        for req, (*names, version) in tries:
            key = ep.key(req)
            self.writer.link([(*names, key, version)])
            resp = self.store.get_call(key) if ep.model.cacheable else None
            if resp is None or not resp.ok:
                resp = await ep.call(req, key)
            if not resp.ok or parses is None or parses(resp.text or ""):
                break
        assert resp is not None, "no try to make"
        return resp

    # --- judgements ---------------------------------------------------------------------------------
    def _queue_judgements(self, task: Task, sample: Sample, reply: str) -> None:
        """Queue the reply with every judge its rubrics ask (each judge of a panel), as a `Pending` whose
        prompts the judge's worker renders when it takes it (`render`): a long backlog holds replies, not
        prompts. Re-scoring skips what a judge already judged."""
        rubrics = self._rubrics(task)
        key = (sample.task, sample.item.id, sample.variant)
        asked: dict[JudgePool, set[str]] = {}  # pool -> the rubrics it is asked, in the pools' order
        for r in rubrics.values():
            for pool in self._to_ask(r, key):
                asked.setdefault(pool, set()).add(r.name)
        for pool, names in asked.items():
            skip = frozenset(name for name, r in rubrics.items() if r.role == pool.role and name not in names)
            self.n.judgements[pool.ep.model.endpoint] += 1
            self.left[sample.task] += 1
            self.judging += 1
            pool.put(self, Pending(task, sample, reply, skip))

    def _rubrics(self, task: Task) -> dict[str, Any]:
        if task.id not in self._active:
            self._active[task.id] = {r.name: r for r in task.method(self.ctx).active_rubrics(self.ctx)}
        return self._active[task.id]

    def _judge_params(self, task: Task, rubric) -> dict[str, Any] | None:
        key = (task.id, rubric.name)  # read once: a task's method-file lookup cost ~20 µs a judgement
        if key not in self._params:
            self._params[key] = task.method(self.ctx).judge_params(rubric, self.ctx)
        return self._params[key]

    def render(self, pool: JudgePool, pending: Pending) -> list[JudgeJob]:
        """A queued reply's judgements for the judge of `pool` (judge()'s arguments), rendered by the worker
        that took it; the reply counted one judgement while it waited, now it counts what it needs."""
        task, sample = pending.task, pending.sample
        rubrics = self._rubrics(task)
        out = []
        for name, messages in task.method(self.ctx).judgements(sample, pending.reply, self.ctx).items():
            rubric = rubrics.get(name)
            if rubric is None:
                raise ValueError(f"{task.id}: judgement '{name}' is not one of its active rubrics {list(rubrics)}")
            if rubric.role == pool.role and name not in pending.skip:
                out.append(JudgeJob(sample, rubric, messages, self._judge_params(task, rubric)))
        endpoint = pool.ep.model.endpoint
        if not out:
            self.n.judgements[endpoint] -= 1
            self._judgement_done(sample.task)
            return out
        more = len(out) - 1
        self.n.judgements[endpoint] += more
        self.left[sample.task] += more
        self.judging += more
        return out

    async def judge(self, ep: Endpoint, sample: Sample, rubric, messages: list[dict[str, str]],
                     exact: dict[str, Any] | None) -> bool:
        """One judgement of this model's (made by a worker of the judge's pool); False on a judge error."""
        link = (self.model_id, sample.task, sample.item.id, sample.variant, rubric.name, ep.model.endpoint,
                rubric.version)
        if isinstance(messages, Chain):  # a rubric walk: one question after another
            ok = (await judge_chain(self, ep, sample, rubric, messages, exact)).ok
        else:
            tries = [(judge_request(sample, messages, self.spec, rubric.name, exact, attempt), link)
                     for attempt in range(1, rubric.attempts + 1)]
            ok = (await self._until_parsed(ep, tries, rubric.parses)).ok
        if not ok:
            self.n.judge_failed[sample.task] += 1
        self._judgement_done(sample.task)
        return ok

    def _judgement_done(self, task_id: str) -> None:
        self._settle(task_id)
        self.judging -= 1
        if self.judging == 0 and self.judged_all is not None and not self.judged_all.done():
            self.judged_all.set_result(None)

    def _settle(self, task_id: str) -> None:
        """One call of a task finished (a generation, or a judgement it queued): the task is ready for
        scoring when none is left, its replies and links committed first."""
        self.left[task_id] -= 1
        if self.left[task_id] == 0 and task_id in self.built and self.ready is not None:
            self.writer.flush()
            self.ready(task_id)

    # --- progress -----------------------------------------------------------------------------------
    def n_samples(self) -> int:
        """The samples of the run: exact once built, counted ahead from the items while phase 1 still builds
        them as it goes (Prepared.expected_samples), so a bar's total is known from its start."""
        return sum(p.expected_samples() for p in self.prepared)

    def generations_left(self) -> int:
        """Its samples not answered yet."""
        return self.n_samples() - self.n.generated

    def building(self) -> bool:
        """Whether some of its samples are still being built (its total an estimate until then)."""
        return any(p.pending is not None for p in self.prepared)

    def judgements_ahead(self, endpoint: str) -> int:
        """Judgements for the judge at `endpoint` this model will still queue: its replies still to come, each
        asking the judge as those so far did (an estimate that converges; 0 once every reply is in)."""
        n = self.n
        left = max(0, self.generations_left())
        return round(left * n.judgements[endpoint] / n.generated) if n.generated else 0

    def show(self, elapsed: float) -> None:
        """Its progress so far, as events (the ticker calls it a few times a second)."""
        n = self.n
        self.events(PhaseProgress("generate", self.label, n.generated, self.n_samples(), n.gen_errors,
                                  n.generated / elapsed if elapsed > 0 else None, estimated=self.building()))
        for p in self.prepared:
            tid = p.task.id
            if p.not_run or not (n.done[tid] or tid in self.built):
                continue
            self.events(TaskProgress(self.label, tid, n.done[tid], p.expected_samples(), n.errors[tid],
                                     n.judge_failed[tid], tid in self.built and self.left[tid] == 0,
                                     turns=n.turns_of[tid] if self._talks(p.task) else None))


class _Generating(_Collector):
    """A run's phase 1 for one model: every sample asked of the model (a stored reply read instead)."""

    def __init__(self, *args, gen_ep: Endpoint, user_ep: Endpoint | None = None, **kw):
        super().__init__(*args, **kw)
        self.gen_ep = gen_ep
        self.user_ep = user_ep  # the simulated person of a conversation task (engine/_conversation.py)
        self.share: GenerationShare | None = None  # set by _run_together: every model's requests in flight
        self.done: set[str] = set()  # call keys stored already, or answered during this run (cacheable)
        # Tasks whose paper protocol asks the model again while a reply does not parse: (attempts, parses).
        # Not for replay files and baselines: the same request gets the same reply again.
        self.reasks = {p.task.id: r for p in self.prepared
                       if (r := p.task.method(self.ctx).reask(self.ctx)) is not None} \
            if gen_ep.model.cacheable else {}

    @property
    def width(self) -> int:
        return max(1, self.gen_ep.width)

    def n_calls(self) -> int:
        return self.gen_ep.n_calls

    def _jobs(self) -> Iterator[tuple[Request, Task, Sample, str]]:
        """Every sample's request and call key, a batch at a time as the samples are built (a lazy prepare
        builds them here, as the workers reach them), each batch's links queued (committed with its first
        replies, engine/_endpoint.CallWriter) and the calls already
        stored looked up in bulk (into `done`), so a resumed run skips them at once. Tasks a judge reads go
        first (`judged_first`)."""
        gen_ep, done = self.gen_ep, self.done
        for p in judged_first(self.prepared, self.ctx, self.pools):
            for batch in p.batches(self.ctx):
                reqs = [generation_request(s, self.spec, gen_ep.model.spec) for s in batch]
                keys = [gen_ep.key(r) for r in reqs]
                self.writer.link([(self.model_id, s.task, s.item.id, s.variant, "", "", k, "")
                                  for s, k in zip(batch, keys)])
                if gen_ep.model.cacheable:
                    # This batch's keys only: the samples before were all looked up already, and a reply is
                    # committed before its call returns, so a later sample asking the same is found here.
                    done.clear()
                    done.update(self.store.ok_keys(keys))
                for s in batch:
                    self.left[s.task] += 1
                yield from zip(reqs, [p.task] * len(batch), batch, keys)
            self.built.add(p.task.id)
            if self.left[p.task.id] == 0 and self.ready is not None:  # its last calls were all stored already
                self.writer.flush()
                self.ready(p.task.id)

    async def _reply(self, request: Request | None, task: Task, sample: Sample, key: str) -> Response | None:
        assert request is not None
        if self._talks(task):  # its turns go through the endpoints' own bounds, not the share
            return await conversation.converse(self, task.method(self.ctx).conversation(sample, self.ctx),
                                               request, task, sample)
        if self.share is None:
            return await self._ask(request, task, sample, key)
        waited = await self.share.acquire()
        try:
            return await self._ask(request, task, sample, key, look_again=waited)
        finally:
            self.share.release()

    async def _ask(self, request: Request, task: Task, sample: Sample, key: str, *,
                   look_again: bool = False) -> Response | None:
        """The sample's reply: stored, or asked (and asked again while it does not parse, where the paper
        does). `look_again`: it waited in the share, and `done` holds the keys of the current batch only, so
        an identical request answered after its batch was looked up would otherwise be paid again."""
        cacheable = self.gen_ep.model.cacheable
        if key in self.done:
            resp = self.store.get_call(key)
        else:
            resp = self.store.get_call(key) if look_again and cacheable else None
            if resp is None or not resp.ok:
                resp = await self.gen_ep.call(request, key)
            if resp.ok and cacheable:
                self.done.add(key)  # a later sample with the same request reads it instead of paying again
        reask = self.reasks.get(task.id)
        if reask is not None and resp is not None and resp.ok and not reask[1](resp.text or ""):
            resp = await self._reask(sample, request, reask)
        return resp

    async def _reask(self, sample: Sample, first: Request, reask: tuple[int, Any]) -> Response:
        """Ask again while the reply does not parse (the paper's protocol, where its code does): attempt k
        is the same request under purpose generate#k; the generation link's version says which ("asked k")."""
        attempts, parses = reask
        tries = [(dataclasses.replace(first, purpose=f"generate#{k}"),
                  (self.model_id, sample.task, sample.item.id, sample.variant, "", "", f"asked {k}"))
                 for k in range(2, attempts + 1)]
        return await self._until_parsed(self.gen_ep, tries, parses)



class _Rejudging(_Collector):
    """Re-scoring (`trustmh score`): the model's replies read from the store, never asked; each judge asked
    only what it has not judged yet, so a judge added to a finished run makes exactly its own calls."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        # Judgements each judge (by endpoint) already made successfully.
        self.judged = {ep.model.endpoint: self.store.linked_keys(self.model_id, ep.model.endpoint)
                       for ep in self.judges.all()}

    def _to_ask(self, rubric, key: tuple[str, str, str]) -> list[JudgePool]:
        return [p for p in self.pools.get(rubric.role, ())
                if (*key, rubric.name) not in self.judged[p.ep.model.endpoint]]

    def _jobs(self) -> Iterator[tuple[None, Task, Sample, str]]:
        """Re-scoring: the samples that have a judgement of this run's judges still to make, each with its
        generation's call key from the links (rebuilt, and linked, only in a store written before links
        existed). A sample whose every judgement is stored is skipped unread, so re-scoring a finished
        run reads back almost nothing here."""
        linked = self.store.generation_links(self.model_id)
        judged: dict[tuple[str, str, str], set[tuple[str, str]]] = collections.defaultdict(set)
        for endpoint, made in self.judged.items():
            for task_id, item_id, variant, rubric in made:
                judged[(task_id, item_id, variant)].add((rubric, endpoint))
        nothing: frozenset[tuple[str, str]] = frozenset()
        for p in self.prepared:
            task_id = p.task.id
            wanted = {(r.name, pool.ep.model.endpoint) for r in p.task.method(self.ctx).active_rubrics(self.ctx)
                      for pool in self.pools.get(r.role, ())}

            def settled(item_id: str, variant: str) -> bool:
                key = (task_id, item_id, variant)
                if key in linked and wanted <= judged.get(key, nothing):
                    self.n.generated += 1
                    self.n.done[task_id] += 1
                    return True
                return False

            new_links = []
            for s in list(samples_except(p.samples, settled)):  # read whole: no cursor open across writes
                key = linked.get(s.key)
                if key is None:
                    key = generation_request(s, self.spec, self.model_id).cache_key(self.model_id)
                    new_links.append((self.model_id, s.task, s.item.id, s.variant, "", "", key, ""))
                yield None, p.task, s, key
            self.store.put_links(new_links)

    async def _reply(self, request: Request | None, task: Task, sample: Sample, key: str) -> Response | None:
        return self.store.get_call(key)
