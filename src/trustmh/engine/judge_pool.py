"""A judge endpoint shared by every tested model of a run (phase 1, collect.py)."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from .endpoint import Endpoint


class JudgePool:
    """One judge endpoint shared by every tested model of the run: `ep.width` workers, each taking the
    next judgement from the models in turn (round robin over those with one waiting). A model whose
    generation runs ahead, or answers at once (a baseline, a replay file), so cannot queue the others
    out of the judge: each model with judgements waiting gets an equal share of it, and a share it does
    not use goes to the others. A model may have at most `cap` judgements waiting (`room` holds its
    generation until one is taken): the judge is often the busiest endpoint, and an unbounded backlog of
    rendered judge prompts was most of a whole-benchmark run's memory."""

    def __init__(self, role: str, ep: Endpoint):
        self.role, self.ep = role, ep
        self.label = f"judge {ep.model.spec}"
        # model -> its judgements waiting; dict order is the turn (a model served goes to the back)
        self.waiting: dict[Any, collections.deque] = {}
        self.idle: collections.deque[asyncio.Future] = collections.deque()  # workers with nothing to do
        self.closed = False
        self.n_queued = self.n_done = self.n_errors = 0
        # 16 waves of the judge: enough to keep it busy through a stretch of tasks it does not read (at 2
        # waves a whole-benchmark run fell from 0.92 to 0.83 of its ideal), ~7 MB of prompts a model at 64
        self.cap = max(64, 16 * ep.width)
        self.blocked: dict[Any, collections.deque[asyncio.Future]] = {}  # generations waiting for room

    async def room(self, collector: Any) -> None:
        """Wait until `collector` has fewer than `cap` judgements waiting."""
        while len(self.waiting.get(collector, ())) >= self.cap:
            fut = asyncio.get_running_loop().create_future()
            self.blocked.setdefault(collector, collections.deque()).append(fut)
            await fut

    def put(self, collector: Any, job: tuple) -> None:
        """Queue a judgement of `collector` (a model's _Collector): job = judge(ep, *job)'s arguments."""
        self.n_queued += 1
        while self.idle:  # an idle worker means nothing waits: it takes this one at once
            fut = self.idle.popleft()
            if not fut.done():
                fut.set_result((collector, job))
                return
        self.waiting.setdefault(collector, collections.deque()).append(job)

    def close(self) -> None:
        self.closed = True
        while self.idle:
            fut = self.idle.popleft()
            if not fut.done():
                fut.set_result(None)

    async def _next(self) -> tuple[Any, tuple] | None:
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
            collector, job = got
            if not await collector.judge(self.ep, *job):
                self.n_errors += 1
            self.n_done += 1
