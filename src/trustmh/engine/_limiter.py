"""An adaptive bound on the requests one endpoint has in flight (AIMD, as TCP does for its window),
and, once 429s show that a bound on requests in flight is not enough, a pace for request starts.

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

Rate pacing. Quotas are mostly rates (requests per second or minute), and a limit on requests in flight
only approximates one: the rate it allows is limit / latency. When the quota admits about one request
per round trip or fewer, even the floor of one request in flight sends too fast, and the limit can only
swing between 1 and 2, meeting a 429 every few round trips (bench/rate_limit.py, 20 req/s at 50 ms: ~430
429s for ~370 replies, and 16% of samples lost to exhausted retries). So from its second cut
on, the limiter also learns the rate the server admits and spaces request starts just under it (see
`_learn`, `_pace`). The pace relaxes as successes come, slowly at first, then faster and faster, so a
limit that rose or a 429 that was a blip costs seconds, not the run; and it switches itself off once it
no longer holds any request back. `pacing=False` keeps the concurrency limit alone (for comparisons).

Retry-After pauses the endpoint for at most `max_pause` (the run's backoff_max): a server's 86400 or
inf would otherwise stop every request to it, silently. Repeated 503s count as 429s (`on_failure`).

Without any 429 the limiter behaves exactly like a semaphore of `max_limit`, and pacing is off: its
cost on that path is one test and one counter increment per success and one test per admission."""

from __future__ import annotations

import asyncio
import math

from ._waiting import WaitQueue

# The learned rate is taken this much under the measured one: a start rate exactly at a token bucket's
# refill rate leaves it empty, and then any jitter in our timers or the network means a 429.
_UNDER = 0.95
# A 429 while pacing always lowers the pace by at least this factor (it was too fast), and at most by the
# limiter's `decrease`, however low the measurement (it may include time we had nothing to send).
_STEP_DOWN = 0.95
# Fewer successes than this between two 429s is too few to measure a rate from (one success more or
# less would move it by more than the step); the measurement window then stays open until the next one.
_MIN_OK = 5
# The pace grows as base * (1 + _PROBE * s**2), s = successes since it was learned / base. Flat near the
# learned rate, where the server's limit most likely still is, so that probes meeting a 429 come seconds
# apart; steeper further on, so that a limit that rose or went away is found again. As s counts
# successes, which come faster as the pace grows, the pace runs away after ~8 s of successes without a
# 429 (s = tan(0.2 t) / 0.2 when the pace is what bounds us): +4% after 1 s, x2 after 3.9 s, x7 after 6 s.
# At 0.01 (x2 after 10 s) a run whose endpoints share one quota kept well under it for most of the run;
# at 0.1 it met a 429 every second or two and often stopped pacing too early (bench/rate_limit.py).
_PROBE = 0.04
# The pace never goes below one request a minute: only cuts without any success in between get it there,
# and a server refusing everything for that long is out of quota, which Retry-After handles better.
_MIN_RATE = 1 / 60
# Pacing stops after this many starts in a row that it did not hold back (each came a whole interval or
# more after it was due): the in-flight limit, or a lack of work, bounds sending now, not the pace. It
# is not stopped merely for having grown: a quota with a large burst absorbs a pace well over its rate
# for a while, and a pace stopped too early ends in a wave of 429s.
_SLACK = 16
# A 503 without Retry-After is how nginx's limit_req (and many gateways) say "too fast". One 503 may be a
# restart; this many in a row, with no success between, are taken as a 429 would be.
_OVERLOAD_503S = 2


class AdaptiveLimiter:
    def __init__(self, max_limit: int, *, min_limit: int = 1, decrease: float = 0.7, increase: float = 0.25,
                 pacing: bool = True, max_pause: float = 60.0):
        if max_limit < 1 or not 1 <= min_limit <= max_limit or not 0 < decrease < 1 or increase <= 0:
            raise ValueError("need 1 <= min_limit <= max_limit, 0 < decrease < 1 and increase > 0")
        if not 0 <= max_pause < math.inf:
            raise ValueError("need a finite max_pause >= 0")
        self.max_limit, self.min_limit = max_limit, min_limit
        # The longest a server's Retry-After pauses the endpoint: the run's retry cap (backoff_max). A
        # server's 86400 (or inf) would otherwise stop every request to the endpoint, silently.
        self.max_pause = max_pause
        self._n_503 = 0  # 503s in a row without a success
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
        self.paused_until = 0.0  # no request starts before this (Retry-After, and the pace)
        self.n_cuts = 0
        self._waiters = WaitQueue()
        self._retries = WaitQueue()  # served first
        self._timer: asyncio.TimerHandle | None = None
        # Pacing (off when `pacing` is False, e.g. to measure what it brings).
        self.pacing = pacing
        self.base_rate: float | None = None  # the learned rate, req/s; None: not pacing
        # The measurement window: opened at a 429 (time, epoch after its cut); it counts the successes
        # of attempts sent since then, so that replies to requests sent before it (a whole burst, at
        # the first 429) are not taken for what the server admits now.
        self._mark_t: float | None = None
        self._mark_epoch = 0
        self._n_window = 0
        self._n_at_base = 0  # _n_window when base_rate was set: the pace grows with successes since
        self._n_slack = 0  # consecutive starts the pace did not hold back
        self.n_paced = 0  # times pacing was switched on (for benchmarks and tests)

    # --- admission --------------------------------------------------------------------------------
    def _can_admit(self, now: float) -> bool:
        return self.in_flight < int(min(self.limit, self.window)) and now >= self.paused_until

    async def acquire(self, retry: bool = False) -> None:
        """Wait for a slot. Retries go ahead of new requests: they have spent attempts already, and the
        first request after a Retry-After pause is the one that finds the fresh token. Among themselves
        they go first come, first served: when each round admits two requests and the bucket holds one
        token, a retry put back at the very front ran behind the other one every time, and the same
        request met 429 after 429 until its retries ran out (bench/rate_limit.py, 20 req/s)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if not self._waiters and not self._retries and self._can_admit(now):
            self.in_flight += 1
            if self.base_rate is not None:
                self._pace(now)
            return
        queue = self._retries if retry else self._waiters
        # A pause may already be over: once parked, make sure a timer or a release will admit us. Admitted,
        # then cancelled before using the slot: the slot is handed on (release).
        await queue.wait(on_lost=self.release, parked=lambda: self._wake(loop))

    def release(self) -> None:
        self.in_flight -= 1
        self._wake(asyncio.get_running_loop())

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        """Admit waiters in order while there is room; if paused, come back when the pause ends."""
        now = loop.time()
        def admit() -> None:
            self.in_flight += 1
            if self.base_rate is not None:
                self._pace(now)

        while (self._retries or self._waiters) and self._can_admit(now):
            (self._retries if self._retries else self._waiters).let_go(admit)
        if (self._retries or self._waiters) and now < self.paused_until and self._timer is None:
            self._timer = loop.call_at(self.paused_until, self._on_timer, loop)

    def _on_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._wake(loop)

    # --- pacing -----------------------------------------------------------------------------------
    @property
    def rate(self) -> float | None:
        """The start rate the pace allows now (req/s), None when not pacing."""
        if self.base_rate is None:
            return None
        s = (self._n_window - self._n_at_base) / self.base_rate
        return self.base_rate * (1.0 + _PROBE * s * s)

    def _pace(self, now: float) -> None:
        """A request starts now: hold the next one back by one interval of the current pace."""
        interval = 1.0 / self.rate
        due = self.paused_until
        if now - due >= interval:  # this start was not held back: something else bounds our sending
            self._n_slack += 1
            if self._n_slack >= _SLACK:
                self._stop_pacing(now)
                return
            self.paused_until = now + interval
        else:
            self._n_slack = 0
            # From when this start was due, not from now, so that a timer firing late does not slow the
            # pace; but half an interval of lateness at most, so that two starts never come closer.
            self.paused_until = max(due, now - 0.5 * interval) + interval

    def _stop_pacing(self, now: float) -> None:
        self.base_rate = None
        # Measure afresh from here: a window spanning paced time would measure our pace, not the server.
        self._mark_t, self._mark_epoch, self._n_window, self._n_at_base = now, self.epoch, 0, 0

    def _learn(self, now: float) -> None:
        """At a cut (`self.epoch` already bumped): measure the rate the server admitted, pace just under it.

        A token bucket that answers 429 is empty at that moment, so between two 429s it admitted exactly
        what it refilled: successes between two cuts / time between them is its rate (our share of it,
        when other clients or our other endpoint use the same quota), provided we kept asking for more
        all along; when we did not (a pause, slow start, no work), the measure is low, and the step
        bounds keep one low measure from slowing a pace by more than one AIMD cut."""
        if self._mark_t is None:  # the first 429: only now does a window start whose both ends are known
            self._mark_t, self._mark_epoch, self._n_window = now, self.epoch, 0
            return
        n = self._n_window
        current = self.rate
        if n >= _MIN_OK and now > self._mark_t:
            new = _UNDER * n / (now - self._mark_t)
            if current is not None:
                new = min(max(new, self.decrease * current), _STEP_DOWN * current)
            self._mark_t, self._mark_epoch, self._n_window, self._n_at_base = now, self.epoch, 0, 0
        elif current is not None:
            new = self.decrease * current  # too few successes to measure, yet the pace was too fast
            self._n_at_base = n
        else:
            return
        if self.base_rate is None:
            self.n_paced += 1
        self.base_rate, self._n_slack = max(new, _MIN_RATE), 0

    # --- feedback ---------------------------------------------------------------------------------
    def on_success(self, epoch: int | None = None) -> None:
        """A success for an attempt sent in `epoch` (as for `on_rate_limit`; None: count it as sent now)."""
        self._n_503 = 0
        if epoch is None or epoch >= self._mark_epoch:
            self._n_window += 1
        if self.window < self.limit:
            self.window += 1.0
        if self.limit < self.max_limit:
            self.limit = min(float(self.max_limit), self.limit + self.increase / self.limit)
        self._wake(asyncio.get_running_loop())

    def on_rate_limit(self, epoch: int, retry_after: float | None) -> None:
        """A 429 for an attempt sent in `epoch` (read `self.epoch` just before sending it)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._pause(now, retry_after)
        if epoch == self.epoch:
            self.limit = max(float(self.min_limit), self.limit * self.decrease)
            self.window = float(self.min_limit)
            self.epoch += 1
            self.n_cuts += 1
            if self.pacing:
                self._learn(now)

    def on_failure(self, epoch: int, error) -> None:
        """Any failed attempt (a ModelError: its kind, status and retry_after), sent in `epoch`. The one
        call an endpoint needs: 429s cut (`on_rate_limit`); a 503 pauses for its Retry-After, and
        `_OVERLOAD_503S` in a row are a 429 (nginx limit_req sends 503, not 429); others change nothing."""
        if error.kind == "rate_limit":
            self.on_rate_limit(epoch, error.retry_after)
        elif getattr(error, "status", None) == 503:
            self._n_503 += 1
            if self._n_503 >= _OVERLOAD_503S:
                self.on_rate_limit(epoch, error.retry_after)
            else:
                self._pause(asyncio.get_running_loop().time(), error.retry_after)

    def _pause(self, now: float, retry_after: float | None) -> None:
        """No request starts for the server's Retry-After, capped at max_pause (NaN and inf included)."""
        if retry_after is not None and retry_after > 0:  # NaN > 0 is False
            self.paused_until = max(self.paused_until, now + min(retry_after, self.max_pause))
