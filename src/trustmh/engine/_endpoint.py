"""One model endpoint: a bounded, adaptive number of requests in flight, retries with back-off, and the
store's group commit. Generation and judging each get one; both share one writer so that no request of
either leaves before every reply received so far is stored."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable

from ._budget import Hold
from ._limiter import AdaptiveLimiter
from ..models import Model
from ..redaction import redact_url, scrub
from ._store import Store
from ..types import ModelError, Request, Response
from .spec import Limits


class AuthFailure(Exception):
    pass


class EndpointDown(Exception):
    """The endpoint cannot work (nothing listens there, or it does not know the model): the run stops
    instead of spending minutes retrying every sample and then scoring nothing."""


# Kinds that say the endpoint itself is wrong, not one request: nothing listens at the URL, or the server
# does not serve the model. Other kinds (timeouts, 5xx, 429) are the load of a working server.
_DOWN_KINDS = {"connection": "check that the server is running and that its base URL is right",
               "not_found": "check the model name and that the base URL is the API's root (e.g. ending in /v1)"}


def flight_key(request: Request, key: str, endpoint: str, by_body: bool) -> str:
    """What makes two requests one: the body the endpoint is sent (and its purpose, so a verdict re-asked is
    never answered by a first ask), where one reply answers both; else the request's own store key `key`.
    fairness.support judges its 17 identity variants of a dialogue blind to identity, and a model that
    answers them alike asks the judge one body 17 times (issue 34: 508 of 2,065 judge calls). `by_body`:
    the endpoint's reply depends on the body alone (a remote model; not a replay file, whose reply is the
    sample's). A request sampled at temperature > 0 without a seed is a draw of its own. Two requests with
    one flight key are sent once, whether at the same moment (Endpoint.pending) or apart (the store's
    `bodies`), so the calls a run pays, and the replies each sample gets, never depend on timing."""
    if not by_body:
        return key
    params = request.params
    if params.get("temperature", 1.0) != 0 and params.get("seed") is None:
        return key
    return request.body_key(endpoint)


class CallWriter:
    """Group commit for the store. The replies that arrive in one pass of the event loop are written in
    one transaction (a commit per reply cost as much as the rest of the request path). Every reply is
    still stored before anything else happens: its caller waits for the commit, and an endpoint commits
    the replies waiting before it sends a request, so a kill -9 loses no more than the calls in flight.
    Links ride with the replies: one queued before its call is sent is committed with that reply at the
    latest, never alone before a send (a judgement's link, queued just before its request, cost a commit
    of its own per judge call)."""

    def __init__(self, store: Store):
        self.store = store
        self.rows: list[tuple] = []
        self.links: list[tuple] = []  # which sample and judgement each call answers (see Store.put_links)
        self.bodies: list[tuple[str, str]] = []  # (body key, store key) of replies a body alone answers
        self.waiting: list[asyncio.Future[None]] = []  # one future per queued reply's caller

    def link(self, rows: list[tuple]) -> None:
        """Queue link rows; they are committed with the next batch of replies (or at the final flush)."""
        self.links.extend(rows)

    def add(self, key: str, endpoint: str, purpose: str, request: Request, resp: Response,
            body: str | None = None) -> Awaitable[None]:
        """Queue a reply; `body`, its body key when a body alone decides the reply (Endpoint.flight_key)."""
        loop = asyncio.get_running_loop()
        if not self.rows:
            loop.call_soon(self.commit_replies)
        self.rows.append((key, endpoint, purpose, (request.task, request.item_id, request.variant), resp))
        if body is not None and resp.ok:
            self.bodies.append((body, key))
        # A future of the caller's own, not one shared by the batch: a caller that is cancelled (a stopping
        # run, a conversation ended) lets go of its own wait only, and the commit goes on for the others.
        # (A shared future needed asyncio.shield for that: two more callbacks and a future per reply.)
        waiter = loop.create_future()
        self.waiting.append(waiter)
        return waiter

    def commit_replies(self) -> None:
        """Commit the replies received so far (and the links queued with them), if any: before a request
        leaves, and where a pass's first reply scheduled it (unless a request leaving did it first). Links
        alone wait for the next reply's commit: a link need only be stored with its call's reply, and a
        commit of links alone (a judgement's link, queued after a send had committed the pass's replies)
        was a third of a run's commits."""
        if self.rows:
            self.flush()

    def flush(self) -> None:
        if not self.rows and not self.links:
            return
        rows, links, bodies, waiting = self.rows, self.links, self.bodies, self.waiting
        self.rows, self.links, self.bodies, self.waiting = [], [], [], []
        try:
            self.store.put_calls(rows, links, bodies)
        except BaseException as e:  # noqa: BLE001 - handed to every caller waiting on this commit
            if not waiting:
                raise
            for waiter in waiting:
                if not waiter.done():  # a cancelled caller has let go
                    waiter.set_exception(e)
                    waiter.exception()  # its caller raises it; do not also log it as never retrieved
        else:
            for waiter in waiting:
                if not waiter.done():
                    waiter.set_result(None)


class Endpoint:
    """One model endpoint: an adaptive bound on requests in flight, retries with back-off, the cache."""

    def __init__(self, model: Model, store: Store, limits: Limits, *, purpose: str, offline_only: bool = False,
                 writer: CallWriter | None = None):
        self.model, self.store, self.limits, self.purpose = model, store, limits, purpose
        # Local models that answer at once (baselines, replay files) need no bound.
        self.limiter = (AdaptiveLimiter(limits.max_connections, max_pause=limits.backoff_max)
                        if model.remote and not offline_only else None)
        self.writer = writer or CallWriter(store)
        # In `trustmh score`, the tested model is never called again: only stored replies count.
        self.offline_only = offline_only
        self.n_calls = 0
        # Failed attempts of a _DOWN_KINDS kind in a row, with no reply in between (see _note_down).
        self.down_run = 0
        self.answered = False
        # Set once the endpoint is stopped: requests still waiting for a slot (many conversations share one
        # endpoint) are not sent after it.
        self.down: EndpointDown | None = None
        # Requests being answered now, by flight key (`flight_key`) -> (the store key it is answered under,
        # the reply's future). A second identical request waits for the first's reply instead of paying.
        self.pending: dict[str, tuple[str, asyncio.Future[Response]]] = {}

    @property
    def width(self) -> int:
        """How many requests this endpoint can usefully have in flight."""
        return self.limits.max_connections if self.limiter is not None else 1

    def key(self, request: Request) -> str:
        return request.cache_key(self.model.endpoint)

    def flight_key(self, request: Request, key: str) -> str:
        return flight_key(request, key, self.model.endpoint, self.model.answers_by_body)

    async def call(self, request: Request, key: str, max_chars: int | None = None) -> Response:
        """The reply to `request`, stored under `key`; a reply longer than `max_chars` is the error
        `reply_too_large`, and only that error is stored (its token counts kept: it was paid)."""
        if self.offline_only:
            stored = self.store.get_call(key)
            return stored or Response(None, error_kind="not_generated", error="no stored reply in this run")
        flight = self.flight_key(request, key)
        while (first := self.pending.get(flight)) is not None:
            try:
                resp = await asyncio.shield(first[1])
            except asyncio.CancelledError:
                if first[1].cancelled() and not asyncio.current_task().cancelling():
                    continue  # the first was cancelled, not this one: it asks itself
                raise
            return await self._shared(first[0], request, key, resp)
        # A plain future, not a task per call: the caller does the work itself (one scheduling hop less).
        # Registered before anything is awaited, so an identical request arriving meanwhile waits for it.
        if flight != key and (answered := self.store.answer_for_body(flight)) is not None:
            # asked and answered earlier (by another sample, or a run before this one over the same store)
            return await self._shared(answered[0], request, key, answered[1])
        fut = asyncio.get_running_loop().create_future()
        self.pending[flight] = (key, fut)
        try:
            resp = await self._call(request, key, None if flight == key else flight, max_chars)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
                fut.exception()  # raised here already; each waiter raises it too
            raise
        finally:
            del self.pending[flight]
        if not fut.done():
            fut.set_result(resp)
        return resp

    async def _shared(self, first_key: str, request: Request, key: str, resp: Response) -> Response:
        """An identical request's reply, for the sample `key` names: the same Response for the same key,
        else a copy stored under `key` (scoring reads each sample's own call, a rerun finds it). The copy
        has the reply's token counts, as its sample's reply has, whichever sample's request was sent first,
        and `attempts` 0: it was paid once, by the call that was sent (Store.totals counts that one). An
        error is stored as the error it is, so it is counted, and retried by the next run, as the first's is."""
        if first_key == key:
            return resp
        own = dataclasses.replace(resp, attempts=0)
        await self.writer.add(key, self.model.endpoint, self.purpose, request, own)
        return own

    async def _call(self, request: Request, key: str, body: str | None = None,
                    max_chars: int | None = None) -> Response:
        resp = await self._with_retries(request)
        if max_chars is not None and resp.ok and resp.text is not None and len(resp.text) > max_chars:
            resp = dataclasses.replace(resp, text=None, error_kind="reply_too_large",
                                       error=f"a reply of {len(resp.text):,} characters, over the {max_chars:,} "
                                             f"it may hold")
        await self.writer.add(key, self.model.endpoint, self.purpose, request, resp, body)
        return resp

    async def _attempt(self, request: Request, retry: bool = False, hold: Hold | None = None) -> Response:
        """One request to the model. It takes a slot of the limiter for this attempt only: a request
        waiting to retry must not hold one, or after a 429 the retries alone would keep the pressure on.
        Under --max-cost the attempt has reserved its worst case (`hold`) and settles once over: a reply at
        its usage, a failure after sending (a timeout, a dropped connection) at its reservation, since the
        server may have worked on it and billed it (engine/_budget.py)."""
        limiter, budget = self.limiter, self.limits.budget
        resp = kind = None
        sent = False
        try:
            if limiter is not None:
                await limiter.acquire(retry)
            try:
                if self.down is not None:  # stopped while this request waited for its slot: it never leaves
                    raise self.down
                self.writer.commit_replies()  # replies received so far are committed before a new request leaves
                epoch = limiter.epoch if limiter is not None else 0
                sent = True
                try:
                    resp = await self.model.generate(request)
                except ModelError as e:
                    kind = e.kind
                    if limiter is not None:
                        limiter.on_failure(epoch, e)  # 429s and runs of 503s slow the endpoint down
                    raise
                except Exception:  # noqa: BLE001 - untyped, after sending: it may have been billed
                    kind = "other"
                    raise
                if limiter is not None:
                    limiter.on_success(epoch)
                return resp
            finally:
                if limiter is not None:
                    limiter.release()
        finally:  # cancelled in flight: neither reply nor kind, counted at the reservation
            if hold is not None:
                budget.settle(hold, resp, kind, sent=sent)

    def _note_down(self, e: ModelError, final: bool) -> None:
        """Stop the endpoint after `limits.stop_after` failures in a row that say it cannot work. Before
        its first reply every failed attempt counts (a wrong URL or model fails at once, and retrying it
        only delays the news); once it has answered, only requests that gave up count, so a server that
        restarts mid-run is waited for by the retries as before."""
        if e.kind not in _DOWN_KINDS:
            self.down_run = 0
            return
        if "Too many open files" in e.message:  # this process, not the endpoint: retries get through
            return
        if self.answered and not final:
            return
        self.down_run += 1
        if self.limits.stop_after and self.down_run >= self.limits.stop_after:
            where = f" at {redact_url(self.model.base_url)}" if getattr(self.model, "base_url", None) else ""
            self.down = EndpointDown(f"{self.purpose} {self.model.spec}{where}: stopped after {self.down_run} "
                                     f"{e.kind} errors in a row ({e.message}); {_DOWN_KINDS[e.kind]}")
            raise self.down

    async def _with_retries(self, request: Request) -> Response:
        attempt = 0
        while True:
            attempt += 1
            self.n_calls += 1
            budget = self.limits.budget  # --max-cost: BudgetStop here ends the run, never one sample
            hold = await budget.reserve(self.model.spec, request, self.model.default_max_tokens) if budget else None
            try:
                resp = await self._attempt(request, attempt > 1, hold)
                resp.attempts = attempt
                self.down_run, self.answered = 0, True
                return resp
            except ModelError as e:
                self._note_down(e, final=not e.retryable or attempt > self.limits.max_retries)
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
            except EndpointDown:
                raise
            except Exception as e:  # noqa: BLE001
                # A backend failing in a way it does not type (a bug, a library error) must not take the
                # whole run down: the sample is counted as an error of kind "other" and the run goes on.
                message = scrub(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")[:200]
                return Response(None, error_kind="other", error=message, attempts=attempt)
