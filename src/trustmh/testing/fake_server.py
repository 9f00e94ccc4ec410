"""A fake OpenAI / Anthropic compatible LLM API server for tests and benchmarks.

The server runs an aiohttp app on 127.0.0.1 (ephemeral port) in a background
thread with its own event loop, so it can be used both from synchronous pytest
tests and from async client code running in another loop of the same process.

Endpoints:
    POST /v1/chat/completions   OpenAI Chat Completions (non-streaming)
    POST /v1/messages           Anthropic Messages (non-streaming)
    GET  /v1/models             model list, readable by both SDKs

Faults (see :class:`Fault`, in faults.py) let tests inject the failure modes real
providers show: error statuses with Retry-After, dropped connections, stalls,
broken JSON, empty / truncated / filtered completions.  A token bucket
(``rate_limit_rps``) emulates provider rate limits.  The reply and error bodies
of both providers are built in wire.py; this module is the server.

Counters are kept so tests can assert on client behaviour, most importantly
"no call was paid twice" (:meth:`FakeLLMServer.duplicate_paid_calls`).
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import gzip
import json
import threading
import time
import zlib
from typing import Callable

from aiohttp import web

from .faults import FAULT_KINDS, HOSTILE_KINDS, Fault, fault_schedule
from .wire import JSON, MALFORMED_BODY, USAGE_MODES, completion, error_body, fmt_seconds, request_key

# Fault, fault_schedule and request_key are re-exported: tests and benchmarks import them from here.
__all__ = ["Fault", "FakeLLMServer", "fault_schedule", "request_key", "FAULT_KINDS", "HOSTILE_KINDS"]
# A gzip bomb's decompressed size: far over any client cap, ~64 KB on the wire.
BOMB_BYTES = 64 * 1024 * 1024

REQUESTS_KEPT = 10_000


class FakeLLMServer:
    """Fake LLM API server on 127.0.0.1, served from a background thread.

    Counters are updated on the server thread and read from any thread; all
    mutable containers are returned as snapshots taken under a lock.
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        reply: Callable[[dict], str] | None = None,
        faults: Callable[[int, dict], Fault | None] | None = None,
        rate_limit_rps: float | None = None,
        usage: str = "honest",
    ):
        """reply(request_json) -> completion text (default: the fixed text 'OK');
        faults(n, request_json) -> a Fault for the n-th request (0-based, over all
        endpoints) or None; rate_limit_rps: token-bucket limit (bucket size = one
        second's worth, at least 1), over it answer 429 with Retry-After.

        ``latency_s`` delays every answer the handler produces (normal or fault)
        with asyncio.sleep; rate-limit rejections are immediate, as at a gateway.

        ``usage``: the token counts replies report (wire.USAGE_MODES): honestly (the words received and
        sent), or zero, missing, inflated, 2^63-1, negative or not numbers at all.
        """
        if usage not in USAGE_MODES:
            raise ValueError(f"unknown usage mode {usage!r}; expected one of {USAGE_MODES}")
        if rate_limit_rps is not None and rate_limit_rps <= 0:
            raise ValueError("rate_limit_rps must be > 0 or None")
        self.latency_s = float(latency_s)
        self._reply = reply
        self._faults = faults
        self._usage = usage
        self._rps = rate_limit_rps
        self._bucket_cap = max(1.0, rate_limit_rps) if rate_limit_rps else 0.0
        self._tokens = self._bucket_cap
        self._bucket_t = time.monotonic()

        self._lock = threading.Lock()
        self._n_requests = 0
        self._n_completed = 0
        self._n_rate_limited = 0
        self._calls: collections.Counter[str] = collections.Counter()
        self._fault_counts: collections.Counter[str] = collections.Counter()
        self._requests: collections.deque[dict] = collections.deque(maxlen=REQUESTS_KEPT)
        self._in_flight = 0
        self._max_in_flight = 0

        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self.port: int | None = None

    # ------------------------------------------------------------------ #
    # public counters

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def n_requests(self) -> int:
        return self._n_requests

    @property
    def n_completed(self) -> int:
        return self._n_completed

    @property
    def n_rate_limited(self) -> int:
        """429s sent by the token bucket (not counting injected status faults)."""
        return self._n_rate_limited

    @property
    def fault_counts(self) -> collections.Counter:
        """Snapshot: fault kind -> how many times it was injected."""
        with self._lock:
            return collections.Counter(self._fault_counts)

    @property
    def calls(self) -> collections.Counter:
        """Snapshot: request_key(body) -> number of normal replies delivered for that body."""
        with self._lock:
            return collections.Counter(self._calls)

    @property
    def requests(self) -> list[dict]:
        """Snapshot of the last 10,000 received JSON bodies (POST endpoints)."""
        with self._lock:
            return list(self._requests)

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def duplicate_paid_calls(self) -> int:
        with self._lock:
            return sum(c - 1 for c in self._calls.values() if c > 1)

    def reset_counters(self) -> None:
        """Zero all counters (e.g. between benchmark phases); the request index restarts at 0."""
        with self._lock:
            self._n_requests = 0
            self._n_completed = 0
            self._n_rate_limited = 0
            self._calls.clear()
            self._fault_counts.clear()
            self._requests.clear()
            self._max_in_flight = self._in_flight

    # ------------------------------------------------------------------ #
    # lifecycle

    def start(self) -> "FakeLLMServer":
        if self._thread is not None:
            raise RuntimeError("server already started")
        self._thread = threading.Thread(target=self._thread_main, name="FakeLLMServer", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("fake server did not start within 30 s")
        if self._start_error is not None:
            self._thread.join()
            self._thread = None
            raise RuntimeError("fake server failed to start") from self._start_error
        return self

    def stop(self) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        self._thread = None

    def __enter__(self) -> "FakeLLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._astart())
        except BaseException as e:  # surfaced to start() in the caller's thread
            self._start_error = e
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            try:
                if self._runner is not None:
                    loop.run_until_complete(self._runner.cleanup())
                pending = asyncio.all_tasks(loop)
                for t in pending:
                    t.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _astart(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle_openai)
        app.router.add_post("/v1/messages", self._handle_anthropic)
        app.router.add_get("/v1/models", self._handle_models)
        # access_log=None: per-request logging would dominate the handler cost.
        # handler_cancellation=True: when a client gives up (timeout, cancel) the
        # handler is cancelled, so a stalled reply is never counted as delivered
        # and stop() does not wait out a 30 s stall.
        # shutdown_timeout: stop() should not wait for handlers still stalling.
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
        )
        await self._runner.setup()
        # A large backlog so hundreds of simultaneous connects are not dropped
        # (a dropped SYN costs the client a 1 s retransmit and skews benchmarks).
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        self.port = self._runner.addresses[0][1]

    # ------------------------------------------------------------------ #
    # request handling

    def _take_token(self) -> float | None:
        """Token bucket; returns None if admitted, else seconds until a token is available."""
        now = time.monotonic()
        self._tokens = min(self._bucket_cap, self._tokens + (now - self._bucket_t) * self._rps)
        self._bucket_t = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return None
        return (1.0 - self._tokens) / self._rps

    def _error(self, provider: str, status: int, message: str, retry_after: float | None = None,
               retry_after_date: bool = False) -> web.Response:
        headers = {"Retry-After": fmt_seconds(retry_after)} if retry_after is not None else None
        if retry_after is not None and retry_after_date:
            headers = {"Retry-After": email.utils.formatdate(time.time() + retry_after, usegmt=True)}
        return web.Response(status=status, body=json.dumps(error_body(provider, status, message)).encode(),
                            content_type=JSON, headers=headers)

    async def _handle_openai(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "openai")

    async def _handle_anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "anthropic")

    async def _handle_models(self, request: web.Request) -> web.Response:
        # Counted in n_requests (it consumes a request index) but never faulted or
        # rate-limited: it is metadata, not a paid call.
        with self._lock:
            self._n_requests += 1
        # One object readable by both SDKs: OpenAI reads object/created/owned_by,
        # Anthropic reads type/display_name/created_at and the paging fields.
        data = [
            {
                "id": "fake-model",
                "object": "model",
                "created": 0,
                "owned_by": "trustmh",
                "type": "model",
                "display_name": "Fake model",
                "created_at": "1970-01-01T00:00:00Z",
            }
        ]
        payload = {"object": "list", "data": data, "has_more": False, "first_id": "fake-model", "last_id": "fake-model"}
        return web.Response(body=json.dumps(payload).encode(), content_type=JSON)

    async def _handle(self, request: web.Request, provider: str) -> web.StreamResponse:
        with self._lock:
            n = self._n_requests
            self._n_requests += 1
            self._in_flight += 1
            if self._in_flight > self._max_in_flight:
                self._max_in_flight = self._in_flight
        try:
            raw = await request.read()
            try:
                body = json.loads(raw)
            except ValueError:
                return self._error(provider, 400, "request body is not valid JSON")
            if not isinstance(body, dict):
                return self._error(provider, 400, "request body must be a JSON object")
            with self._lock:
                self._requests.append(body)
            if body.get("stream"):
                # Refuse loudly rather than send a non-stream body the SDK would misparse.
                return self._error(provider, 400, "the fake server does not support stream=true")

            if self._rps is not None:
                wait = self._take_token()
                if wait is not None:
                    with self._lock:
                        self._n_rate_limited += 1
                    # Round up to whole ms so a client honouring it finds a token.
                    return self._error(provider, 429, "rate limit exceeded", retry_after=max(0.001, -(-wait // 0.001) * 0.001))

            fault = self._faults(n, body) if self._faults is not None else None
            if self.latency_s > 0:
                await asyncio.sleep(self.latency_s)
            if fault is not None:
                with self._lock:
                    self._fault_counts[fault.kind] += 1
                if fault.kind != "stall":
                    return await self._fault_response(request, provider, fault, n, body)
                await asyncio.sleep(fault.stall_s)  # then fall through to a normal reply

            try:
                text = self._reply(body) if self._reply is not None else "OK"
            except Exception as e:  # a broken test callable should be visible, not hang the client
                return self._error(provider, 500, f"reply callable raised {type(e).__name__}: {e}")
            payload = completion(provider, n, body, text, "normal", self._usage)
            resp = web.Response(body=json.dumps(payload).encode(), content_type=JSON)
            # Send it here (not after returning) so we only count replies whose
            # bytes actually went out; a disconnected client raises or cancels us.
            await resp.prepare(request)
            await resp.write_eof()
            key = request_key(body)
            with self._lock:
                self._n_completed += 1
                self._calls[key] += 1
            return resp
        finally:
            with self._lock:
                self._in_flight -= 1

    async def _fault_response(
        self, request: web.Request, provider: str, fault: Fault, n: int, body: dict
    ) -> web.StreamResponse:
        kind = fault.kind
        if kind == "status":
            return self._error(provider, fault.status, f"injected fault: HTTP {fault.status}", fault.retry_after,
                               fault.retry_after_date)
        if kind in HOSTILE_KINDS:
            return await self._hostile_response(request, provider, fault, n, body)
        if kind == "malformed":
            # Valid headers and status, truncated JSON: the body cannot be parsed.
            return web.Response(body=MALFORMED_BODY, content_type=JSON)
        if kind == "close":
            full = json.dumps(completion(provider, n, body, "OK", "normal")).encode()
            resp = web.StreamResponse(status=200)
            resp.content_type = JSON
            resp.content_length = len(full)  # promise the full body, deliver half
            await resp.prepare(request)
            await resp.write(full[: len(full) // 2])
            transport = request.transport
            if transport is not None:
                transport.close()  # flushes the partial bytes, then FIN
            # aiohttp's write_eof on the closed transport raises ConnectionError,
            # which it treats as "client went away" and does not log.
            return resp
        if kind == "empty_choices":
            payload = completion(provider, n, body, None, "empty_choices")
        elif kind == "length":
            try:
                text = self._reply(body) if self._reply is not None else "OK"
            except Exception as e:
                return self._error(provider, 500, f"reply callable raised {type(e).__name__}: {e}")
            words = text.split()
            # Truncate to the first half of the words: what a max_tokens cut looks like.
            text = " ".join(words[: max(1, (len(words) + 1) // 2)]) if words else text
            payload = completion(provider, n, body, text, "length", self._usage)
        else:  # content_filter
            payload = completion(provider, n, body, None, "content_filter")
        return web.Response(body=json.dumps(payload).encode(), content_type=JSON)

    async def _hostile_response(
        self, request: web.Request, provider: str, fault: Fault, n: int, body: dict
    ) -> web.StreamResponse:
        """Replies a broken or hostile server sends. Those a client must read as a normal reply (bare_lf,
        raw_deflate) carry the reply text; the others never end in a normal reply."""
        kind = fault.kind
        text = self._reply(body) if self._reply is not None else "OK"
        full = json.dumps(completion(provider, n, body, text, "normal")).encode()
        if kind == "redirect":
            return web.Response(status=307, headers={"Location": fault.location}, text="moved")
        if kind == "html_status":  # nginx's own error page (limit_req answers 503 with it)
            page = (f"<html>\r\n<head><title>{fault.status} Service Temporarily Unavailable</title></head>\r\n"
                    f"<body>\r\n<center><h1>{fault.status} Service Temporarily Unavailable</h1></center>\r\n"
                    f"<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
            return web.Response(status=fault.status, text=page, content_type="text/html")
        if kind == "bad_types":  # JSON a typed client would refuse, which SQLite cannot store as it is
            payload = completion(provider, n, body, text + " \ud800", "normal")
            if provider == "anthropic":
                payload["usage"] = {"input_tokens": {"n": 1}, "output_tokens": 2**63}
            else:
                payload["usage"] = {"prompt_tokens": {"n": 1}, "completion_tokens": 2**63, "total_tokens": 2**64}
                payload["choices"][0]["finish_reason"] = {"reason": "stop"}
            return web.Response(body=json.dumps(payload).encode(), content_type=JSON)
        if kind == "gzip_bomb":
            bomb = gzip.compress(b"\0" * BOMB_BYTES, compresslevel=9)
            return web.Response(body=bomb, content_type=JSON, headers={"Content-Encoding": "gzip"})
        if kind == "raw_deflate":  # "deflate" as many servers send it: no zlib header
            squeeze = zlib.compressobj(wbits=-15)
            raw = squeeze.compress(full) + squeeze.flush()
            return web.Response(body=raw, content_type=JSON, headers={"Content-Encoding": "deflate"})
        transport = request.transport
        if kind == "bare_lf":  # a head whose lines end in LF alone, which RFC 9112 lets a client accept
            head = f"HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: {len(full)}\n\n"
            if transport is not None:
                transport.write(head.encode() + full)
                transport.close()
            return web.Response()  # never sent: the transport is closed
        resp = web.StreamResponse(status=200)
        resp.content_type = JSON
        if kind == "endless_chunked":
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            block = b" " * 65536  # JSON whitespace, forever, until the client gives up
            while True:
                await resp.write(block)
        # trickle: a valid reply, one byte every 50 ms, so no gap between reads is long
        resp.content_length = len(full)
        await resp.prepare(request)
        for i in range(len(full)):
            await resp.write(full[i:i + 1])
            await asyncio.sleep(0.05)
        return resp
