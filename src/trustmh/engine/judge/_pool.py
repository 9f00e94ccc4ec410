"""A judge endpoint shared by every tested model of a run (phase 1, collect.py)."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .._endpoint import Endpoint

if TYPE_CHECKING:
    from ...judges.rubric import Rubric
    from ...tasks import Task
    from ...types import Sample

# Replies waiting for the judge, across all models. Queued, a judgement is only its sample (built once,
# shared by the models, in memory until its task is scored anyway) and the reply's text: ~1.5 KB for a
# real reply of ~300 tokens, so ~50 MB at this bound; its prompt is rendered only when a worker takes it.
# Enough for one model to keep the judge busy through the whole benchmark's longest stretch of tasks it
# does not read.
BACKLOG = 32768


@dataclass(frozen=True, slots=True)
class Pending:
    """One reply's judgements for one judge, not rendered yet (`Judged.render` builds them when a worker
    takes it). `skip`: rubrics this judge already made (re-scoring)."""

    task: Task
    sample: Sample
    reply: str
    skip: frozenset[str] = frozenset()


class JudgeJob(NamedTuple):
    """One judgement, rendered: `Judged.judge(ep, *job)`'s arguments."""

    sample: Sample
    rubric: Rubric
    messages: list[dict[str, str]]
    exact: dict[str, Any] | None  # the judge's exact settings (the paper's protocol), or None


class Judged(Protocol):
    """What a judge pool needs of a tested model's phase 1 (collect.py's `_Collector`): the judgements of a
    queued reply for the pool's judge, and one judgement made."""

    def render(self, pool: JudgePool, pending: Pending) -> list[JudgeJob]: ...

    async def judge(self, ep: Endpoint, sample: Sample, rubric: Rubric, messages: list[dict[str, str]],
                    exact: dict[str, Any] | None) -> bool: ...


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
        self.waiting: dict[Judged, collections.deque[Pending | JudgeJob]] = {}
        # workers with nothing to do, each waiting for a model's judgement (None: the pool is closed)
        self.idle: collections.deque[asyncio.Future[tuple[Judged, Pending | JudgeJob] | None]] = collections.deque()
        self.closed = False
        self.n_queued = self.n_done = self.n_errors = 0
        # at least 16 waves of the judge a model: with 2 a whole-benchmark run fell from 0.92 to 0.83 of ideal
        self.cap = max(16 * ep.width, backlog // max(1, models))
        self.blocked: dict[Judged, collections.deque[asyncio.Future[None]]] = {}  # generations waiting for room

    async def room(self, collector: Judged) -> None:
        """Wait until `collector` has fewer than `cap` judgements waiting."""
        while len(self.waiting.get(collector, ())) >= self.cap:
            fut = asyncio.get_running_loop().create_future()
            self.blocked.setdefault(collector, collections.deque()).append(fut)
            await fut

    def put(self, collector: Judged, job: Pending | JudgeJob, *, first: bool = False) -> None:
        """Queue a judgement of `collector` (a model's phase 1): a `Pending` reply, or a rendered `JudgeJob`
        (`first`: ahead of the model's others, the rest of a reply taken)."""
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

    async def _next(self) -> tuple[Judged, Pending | JudgeJob] | None:
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

    async def _take(self, collector: Judged, job: Pending | JudgeJob) -> None:
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
