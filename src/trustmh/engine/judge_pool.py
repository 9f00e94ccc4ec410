"""A judge endpoint shared by every tested model of a run (phase 1, collect.py)."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any

from .endpoint import Endpoint

# Replies waiting for the judge, across all models. Queued, a judgement is only its sample (built once,
# shared by the models, in memory until its task is scored anyway) and the reply's text: ~1.5 KB for a
# real reply of ~300 tokens, so ~50 MB at this bound; its prompt is rendered only when a worker takes it.
# Enough for one model to keep the judge busy through the whole benchmark's longest stretch of tasks it
# does not read.
BACKLOG = 32768


@dataclass(frozen=True, slots=True)
class Pending:
    """One reply's judgements for one judge, not rendered yet (`_Collector.render` builds them when a worker
    takes it). `skip`: rubrics this judge already made (re-scoring)."""

    task: Any
    sample: Any
    reply: str
    skip: frozenset[str] = frozenset()


class JudgePool:
    """One judge endpoint shared by every tested model of the run: `ep.width` workers, each taking the
    next judgement from the models in turn (round robin over those with one waiting). A model whose
    generation runs ahead, or answers at once (a baseline, a replay file), so cannot queue the others
    out of the judge: each model with judgements waiting gets an equal share of it, and a share it does
    not use goes to the others. A model may have at most `cap` judgements waiting (`room` holds its
    generation until one is taken), its share of BACKLOG; they wait as `Pending` replies, whose prompts
    (most of a whole-benchmark run's memory when they were rendered at once) are built by the worker that
    takes them."""

    def __init__(self, role: str, ep: Endpoint, models: int = 1, backlog: int = BACKLOG):
        self.role, self.ep = role, ep
        self.label = f"judge {ep.model.spec}"
        # model -> its judgements waiting; dict order is the turn (a model served goes to the back)
        self.waiting: dict[Any, collections.deque] = {}
        self.idle: collections.deque[asyncio.Future] = collections.deque()  # workers with nothing to do
        self.closed = False
        self.n_queued = self.n_done = self.n_errors = 0
        # at least 16 waves of the judge a model: with 2 a whole-benchmark run fell from 0.92 to 0.83 of ideal
        self.cap = max(16 * ep.width, backlog // max(1, models))
        self.blocked: dict[Any, collections.deque[asyncio.Future]] = {}  # generations waiting for room

    async def room(self, collector: Any) -> None:
        """Wait until `collector` has fewer than `cap` judgements waiting."""
        while len(self.waiting.get(collector, ())) >= self.cap:
            fut = asyncio.get_running_loop().create_future()
            self.blocked.setdefault(collector, collections.deque()).append(fut)
            await fut

    def put(self, collector: Any, job: Any, *, first: bool = False) -> None:
        """Queue a judgement of `collector` (a model's _Collector): a `Pending` reply, or a rendered job,
        judge(ep, *job)'s arguments (`first`: ahead of the model's others, the rest of a reply taken)."""
        self.n_queued += 1
        while self.idle:  # an idle worker means nothing waits: it takes this one at once
            fut = self.idle.popleft()
            if not fut.done():
                fut.set_result((collector, job))
                return
        queue = self.waiting.setdefault(collector, collections.deque())
        queue.appendleft(job) if first else queue.append(job)

    def close(self) -> None:
        self.closed = True
        while self.idle:
            fut = self.idle.popleft()
            if not fut.done():
                fut.set_result(None)

    async def _next(self) -> tuple[Any, Any] | None:
        if self.waiting:
            collector = next(iter(self.waiting))
            queue = self.waiting.pop(collector)
            job = queue.popleft()
            if queue:
                self.waiting[collector] = queue  # back of the turn
            held = self.blocked.get(collector)
            while held:  # room for one more of this model's judgements
                fut = held.popleft()
                if not fut.done():
                    fut.set_result(None)
                    break
            return collector, job
        if self.closed:
            return None
        fut = asyncio.get_running_loop().create_future()
        self.idle.append(fut)
        return await fut

    async def work(self) -> None:
        while (got := await self._next()) is not None:
            await self._take(*got)
            # Not held while this worker waits for the next: the sample of a task every model has scored
            # can leave memory (engine/prepare.py, Prepared.release).
            got = None

    async def _take(self, collector: Any, job: Any) -> None:
        if isinstance(job, Pending):  # a reply: its judgements for this judge are rendered now
            jobs = collector.render(self, job)
            self.n_queued -= 1
            if not jobs:
                return
            job = jobs[0]
            self.n_queued += 1
            for rest in reversed(jobs[1:]):  # the reply's other rubrics go next, in their order
                self.put(collector, rest, first=True)
        if not await collector.judge(self.ep, *job):
            self.n_errors += 1
        self.n_done += 1


class GenerationShare:
    """How many generation requests all models may have in flight together. Every model's replies and
    every judgement share one event loop, and with many models at once (12 x 64 connections) the models'
    replies came faster than the loop could take them: the judge, the busiest endpoint of a judged run,
    sent its requests late, at 40-70 % of transport speed for the first third of a 12-model run at
    --limit 300 (bench/README.md). A timer measures how late the loop runs. While it is late, a judge has
    work waiting and a judge has clearly more waves of work left than any model (a judge, not a model,
    is what the run waits for), the share shrinks (x0.7); otherwise it grows back by 1/16 of the models'
    connections a tick. Generation takes what the judges leave of the loop, and a run whose busiest
    endpoint is a model's is never held back."""

    TICK = 0.02  # s between the timer's readings
    LATE = 0.01  # s late that counts as the loop falling behind
    FLOOR = 8  # requests in flight at the least, so that generation always goes on
    # A judge counts as what the run waits for only with this many times a model's waves left: near a tie
    # (one model at --limit 300: its 9,309 generations, the judge's 6,165) holding the model back cost
    # 0.98 -> 0.95 of the window.
    MARGIN = 2.0

    def __init__(self, pools: list[JudgePool], collectors: list[Any]):
        self.pools, self.collectors = pools, collectors
        self.total = max(1, sum(c._width() for c in collectors))
        self.cap = self.total
        self.in_flight = 0
        self.waiters: collections.deque[asyncio.Future] = collections.deque()
        self.low = self.total  # the smallest share so far, for tests and the bench

    async def acquire(self) -> bool:
        """A place in the share; True when it had to wait for one."""
        waited = False
        while self.in_flight >= self.cap:
            waited = True
            fut = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            await fut
        self.in_flight += 1
        return waited

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        room = self.cap - self.in_flight
        while room > 0 and self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                room -= 1

    def _judge_bound(self) -> bool:
        """Whether some judge has MARGIN times more waves of work left (its judgements waiting, in flight
        and still to come, over its connections) than every model has of generation."""
        judge = max(((p.n_queued - p.n_done + sum(c._judgements_ahead(p.ep.model.endpoint) for c in self.collectors))
                     / max(1, p.ep.width) for p in self.pools), default=0.0)
        return judge > self.MARGIN * max(((c._n_samples() - c.n["gen"]) / max(1, c._width()) for c in self.collectors),
                                         default=0.0)

    async def watch(self) -> None:
        """Until cancelled: resize the share every TICK seconds."""
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(self.TICK)
            late = loop.time() - t - self.TICK
            if late > self.LATE and any(p.waiting for p in self.pools) and self._judge_bound():
                self.cap = max(self.FLOOR, int(self.cap * 0.7))
                self.low = min(self.low, self.cap)
            elif self.cap < self.total:
                self.cap = min(self.total, self.cap + max(1, self.total // 16))
                self._wake()
