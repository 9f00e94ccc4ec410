"""An adaptive bound on the requests one endpoint has in flight (AIMD, as TCP does for its window).

A provider that answers 429 is saying we send faster than our quota. Retrying each request on its own
keeps the pressure on, so many requests burn their retry budget and fail. Instead the endpoint shares
one limit: a 429 cuts it (multiplicatively, at most once per round of requests: the 429s of requests
sent before the cut say nothing about the new limit) and pauses new requests for the server's
Retry-After; every success raises it by 0.25/limit, so about +1 per four round trips, back up to the
user's --max-connections. A slot is held for one attempt only: a request waiting to retry holds none, so
after a cut its retries queue behind the new limit like everything else. After a cut, sending
restarts from one request and doubles per round trip (each success admits two) up to the new limit:
when the quota is a rate rather than a number in flight, a full wave at the end of every pause would
meet one fresh token, and the rest of the wave would spend their retries on 429s.

Without any 429 the limiter behaves exactly like a semaphore of `max_limit`."""

from __future__ import annotations

import asyncio
import collections
import contextlib


class AdaptiveLimiter:
    def __init__(self, max_limit: int, *, min_limit: int = 1, decrease: float = 0.7, increase: float = 0.25):
        if max_limit < 1 or not 1 <= min_limit <= max_limit or not 0 < decrease < 1 or increase <= 0:
            raise ValueError("need 1 <= min_limit <= max_limit, 0 < decrease < 1 and increase > 0")
        self.max_limit, self.min_limit = max_limit, min_limit
        # The limit grows by increase/limit per success, i.e. by `increase` per round trip. At +1 per round
        # trip (TCP's choice) a server admitting ~1-2 requests per round trip per endpoint answered 429
        # to ~40% of all attempts, and a few requests ran out of retries; at +0.25 none did, at the
        # same settled rate (bench/rate_limit.py).
        self.decrease, self.increase = decrease, increase
        self.limit = float(max_limit)
        self.window = float(max_limit)  # slow-start cap after a cut; grows +1 per success up to `limit`
        self.in_flight = 0
        # Bumped on every cut. A 429 only cuts if its attempt was sent in the current epoch.
        self.epoch = 0
        self.paused_until = 0.0
        self.n_cuts = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    # --- admission --------------------------------------------------------------------------------
    def _can_admit(self, now: float) -> bool:
        return self.in_flight < int(min(self.limit, self.window)) and now >= self.paused_until

    async def acquire(self, retry: bool = False) -> None:
        """Wait for a slot. A retry goes to the front of the queue: it has spent attempts already, and
        the first request after a Retry-After pause is the one that finds the fresh token."""
        loop = asyncio.get_running_loop()
        if not self._waiters and self._can_admit(loop.time()):
            self.in_flight += 1
            return
        fut = loop.create_future()
        if retry:
            self._waiters.appendleft(fut)
        else:
            self._waiters.append(fut)
        self._wake(loop)  # a pause may already be over: make sure a timer or a release will admit us
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # admitted, then cancelled before using the slot: hand it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._wake(asyncio.get_running_loop())

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        """Admit waiters in order while there is room; if paused, come back when the pause ends."""
        now = loop.time()
        while self._waiters and self._can_admit(now):
            fut = self._waiters.popleft()
            if not fut.done():
                self.in_flight += 1
                fut.set_result(None)
        if self._waiters and now < self.paused_until and self._timer is None:
            self._timer = loop.call_at(self.paused_until, self._on_timer, loop)

    def _on_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._wake(loop)

    # --- feedback ---------------------------------------------------------------------------------
    def on_success(self) -> None:
        if self.window < self.limit:
            self.window += 1.0
        if self.limit < self.max_limit:
            self.limit = min(float(self.max_limit), self.limit + self.increase / self.limit)
        self._wake(asyncio.get_running_loop())

    def on_rate_limit(self, epoch: int, retry_after: float | None) -> None:
        """A 429 for an attempt sent in `epoch` (read `self.epoch` just before sending it)."""
        loop = asyncio.get_running_loop()
        if retry_after is not None and retry_after > 0:
            self.paused_until = max(self.paused_until, loop.time() + retry_after)
        if epoch == self.epoch:
            self.limit = max(float(self.min_limit), self.limit * self.decrease)
            self.window = float(self.min_limit)
            self.epoch += 1
            self.n_cuts += 1
