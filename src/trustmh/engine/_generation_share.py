"""How many generation requests all tested models may have in flight together (phase 1, collect.py)."""

from __future__ import annotations

import asyncio
from typing import Protocol, Sequence

from ._waiting import WaitQueue
from .judge import JudgePool


class Generation(Protocol):
    """What the share reads of a model's phase 1 (collect.py's `_Generating`)."""

    @property
    def width(self) -> int:
        """Its generation requests in flight at most (its endpoint's connections)."""

    def generations_left(self) -> int:
        """Its samples not answered yet (counted ahead while they are still being built)."""

    def judgements_ahead(self, endpoint: str) -> int:
        """Judgements for the judge at `endpoint` it will still queue."""


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

    def __init__(self, pools: Sequence[JudgePool], models: Sequence[Generation]):
        self.pools, self.models = pools, models
        self.total = max(1, sum(m.width for m in models))
        self.cap = self.total
        self.in_flight = 0
        self.waiters = WaitQueue()
        self.low = self.total  # the smallest share so far, for tests and the bench

    async def acquire(self) -> bool:
        """A place in the share; True when it had to wait for one."""
        waited = False
        while self.in_flight >= self.cap:
            waited = True
            await self.waiters.wait(on_lost=self._wake)  # let go, then cancelled: the room goes to the next
        self.in_flight += 1
        return waited

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        room = self.cap - self.in_flight
        while room > 0 and self.waiters.let_go():
            room -= 1

    def _judge_bound(self) -> bool:
        """Whether some judge has MARGIN times more waves of work left (its judgements waiting, in flight
        and still to come, over its connections) than every model has of generation."""
        judge = max(((p.n_queued - p.n_done + sum(m.judgements_ahead(p.ep.model.endpoint) for m in self.models))
                     / max(1, p.ep.width) for p in self.pools), default=0.0)
        return judge > self.MARGIN * max((m.generations_left() / max(1, m.width) for m in self.models), default=0.0)

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
