"""One model endpoint: a bounded, adaptive number of requests in flight, retries with back-off, and the
store's group commit. Generation and judging each get one; both share one writer so that no request of
either leaves before every reply received so far is stored."""

from __future__ import annotations

import asyncio
import random

from .limiter import AdaptiveLimiter
from ..models import Model
from ..redaction import redact_url, scrub
from .store import Store
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


class CallWriter:
    """Group commit for the store. The replies that arrive in one pass of the event loop are written in
    one transaction (a commit per reply cost as much as the rest of the request path). Every reply is
    still stored before anything else happens: its caller waits for the commit, and an endpoint commits
    whatever is waiting before it sends a request, so a kill -9 loses no more than the calls in flight."""

    def __init__(self, store: Store):
        self.store = store
        self.rows: list[tuple] = []
        self.links: list[tuple] = []  # which sample and judgement each call answers (see Store.put_links)
        self.done: asyncio.Future[None] | None = None

    def link(self, rows: list[tuple]) -> None:
        """Queue link rows; they are committed with the next batch of replies (or at the final flush)."""
        self.links.extend(rows)

    def add(self, key: str, endpoint: str, purpose: str, request: Request, resp: Response) -> asyncio.Future[None]:
        if not self.rows:
            loop = asyncio.get_running_loop()
            self.done = loop.create_future()
            loop.call_soon(self.flush)
        self.rows.append((key, endpoint, purpose, (request.task, request.item_id, request.variant), resp))
        return self.done

    def flush(self) -> None:
        if not self.rows and not self.links:
            return
        rows, links, done = self.rows, self.links, self.done
        self.rows, self.links, self.done = [], [], None
        try:
            self.store.put_calls(rows, links)
        except BaseException as e:  # noqa: BLE001 - handed to every caller waiting on this commit
            if done is None:
                raise
            done.set_exception(e)
            done.exception()  # the waiters raise it; do not also log it as never retrieved
        else:
            if done is not None:
                done.set_result(None)


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
        budget = self.limits.budget  # --max-cost: the call's estimated cost is reserved before it leaves
        held = await budget.reserve(self.model.spec, request) if budget is not None else 0.0
        # A plain future, not a task per call: the caller does the work itself (one scheduling hop less).
        fut = self.pending[key] = asyncio.get_running_loop().create_future()
        resp = None
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
            if budget is not None:
                budget.settle(self.model.spec, request, held, resp)
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
            if self.down is not None:  # stopped while this request waited for its slot: it never leaves
                raise self.down
            self.writer.flush()  # replies received so far are committed before a new request leaves
            epoch = limiter.epoch
            try:
                resp = await self.model.generate(request)
            except ModelError as e:
                limiter.on_failure(epoch, e)  # 429s and runs of 503s slow the endpoint down
                raise
            limiter.on_success(epoch)
            return resp
        finally:
            limiter.release()

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
            try:
                resp = await self._attempt(request, retry=attempt > 1)
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
