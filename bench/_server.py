"""A lean loopback OpenAI-compatible server for benchmarks, meant to run in its own process.

Why not trustmh.testing.fake_server: that one builds an aiohttp app with counters, faults and a lock
per request, and on 2 cores it tops out near the rate the client must reach at 256 connections and
50 ms (~5,000 req/s), so it would measure itself. This one is a bare asyncio.Protocol: no task per
request, the reply is scheduled with loop.call_later after the fixed latency, and the body is the
smallest valid chat.completion. It handles only what the benchmarks send (POST with Content-Length,
keep-alive, no pipelining beyond one request at a time per connection).

Optional token bucket (--rate-limit R): over it, answer 429 with Retry-After at once, like a gateway.

Run: python bench/_server.py --latency 0.05 [--rate-limit R] ; it prints "PORT <n>" then serves.
It counts requests and answers b"GET /stats" with JSON {"requests", "ok", "rate_limited", "max_in_flight",
"by_endpoint", "first_request", "last_answer", "per_second", "reuse_wait"}: `by_endpoint` counts requests by the path before "/v1/" ("" for a plain
base URL, "/judge" for http://host:port/judge/v1), so one server can stand for the model and the judge
and still say which endpoint was busier; `first_request` and `last_answer` are time.monotonic()
(system-wide on Linux, so comparable with another process's) when the first request arrived and when
the last reply was written; `per_second` lists, per endpoint, the requests that arrived in each second
since the first request (how busy each endpoint was over the run); `reuse_wait`, per endpoint and tenth of a second,
[seconds, count] of the waits between a reply written on a connection and the next request on it (the
client's own time per reply: where a run falls behind transport speed, and when).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import zlib

class Stats:
    requests = 0
    ok = 0
    rate_limited = 0
    in_flight = 0
    max_in_flight = 0
    by_endpoint: dict[str, int] = {}
    per_second: dict[str, list[int]] = {}  # endpoint -> requests in each second since the first request
    # endpoint -> [seconds, count] in each tenth of a second: how long a connection stood idle between its
    # reply and its next request (the client's own time per reply, what transport speed leaves out)
    reuse_wait: dict[str, list[list[float]]] = {}
    first_request = 0.0
    last_answer = 0.0


class Bucket:
    def __init__(self, rps: float):
        self.rps, self.cap = rps, max(1.0, rps)
        self.tokens, self.t = self.cap, time.monotonic()

    def take(self) -> float | None:
        now = time.monotonic()
        self.tokens = min(self.cap, self.tokens + (now - self.t) * self.rps)
        self.t = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rps


def _reply_body(text: str) -> bytes:
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}).encode()


def _http(status: str, body: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{extra}Connection: keep-alive\r\n\r\n").encode() + body


OK = _http("200 OK", _reply_body("Answer: 1"))
MODEL_REPLY: str | None = None  # what model endpoints (any path but /judge/...) answer, --reply; None: OK
VARIED = False  # --varied: a model endpoint's reply also carries a hash of the request body (no two alike)
_BY_ENDPOINT: dict[str, bytes] = {}


def model_ok(endpoint: str) -> bytes:
    """--reply TEXT, followed by the endpoint's path ("/m3"), so that each model's replies differ as real
    models' do and their judge requests are not one shared call."""
    if MODEL_REPLY is None:
        return OK
    body = _BY_ENDPOINT.get(endpoint)
    if body is None:
        body = _BY_ENDPOINT[endpoint] = _http("200 OK", _reply_body(f"{MODEL_REPLY} {endpoint}".rstrip()))
    return body


class Conn(asyncio.Protocol):
    def __init__(self, latency: float, bucket: Bucket | None, jitter: float = 0.0):
        self.latency, self.bucket, self.jitter = latency, bucket, jitter
        self.buf = bytearray()
        self.transport = None
        self.answered_at: float | None = None  # when this connection's last reply was written

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = bytes(self.buf[:head_end]).lower()
            length = 0
            i = head.find(b"content-length:")
            if i >= 0:
                length = int(head[i + 15:head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None])
            end = head_end + 4 + length
            if len(self.buf) < end:
                return
            body = bytes(self.buf[head_end + 4:end]) if VARIED else b""
            del self.buf[:end]
            self.handle(head, body)

    def handle(self, head: bytes, body: bytes = b"") -> None:
        if head.startswith(b"get /stats"):
            body = json.dumps({"requests": Stats.requests, "ok": Stats.ok, "rate_limited": Stats.rate_limited,
                               "max_in_flight": Stats.max_in_flight, "by_endpoint": Stats.by_endpoint,
                               "first_request": Stats.first_request, "last_answer": Stats.last_answer,
                               "per_second": Stats.per_second, "reuse_wait": Stats.reuse_wait}).encode()
            self.transport.write(_http("200 OK", body))
            return
        if not Stats.requests:
            Stats.first_request = time.monotonic()
        Stats.requests += 1
        endpoint = head[head.find(b" ") + 1:max(head.find(b"/v1/"), 0)].decode("latin-1")
        Stats.by_endpoint[endpoint] = Stats.by_endpoint.get(endpoint, 0) + 1
        second = int(time.monotonic() - Stats.first_request)
        counts = Stats.per_second.setdefault(endpoint, [])
        counts.extend([0] * (second + 1 - len(counts)))
        counts[second] += 1
        if self.answered_at is not None:
            now = time.monotonic()
            tenth = int(10 * (now - Stats.first_request))
            waits = Stats.reuse_wait.setdefault(endpoint, [])
            waits.extend([0.0, 0] for _ in range(tenth + 1 - len(waits)))
            waits[tenth][0] += now - self.answered_at
            waits[tenth][1] += 1
        if self.bucket is not None:
            wait = self.bucket.take()
            if wait is not None:
                Stats.rate_limited += 1
                self.answered_at = None  # the wait before a retry is the client's back-off, not its own time
                body = b'{"error": {"message": "rate limit", "type": "rate_limit_error", "code": null}}'
                self.transport.write(_http("429 Too Many Requests", body, f"Retry-After: {wait:.3f}\r\n"))
                return
        Stats.in_flight += 1
        Stats.max_in_flight = max(Stats.max_in_flight, Stats.in_flight)
        delay = self.latency * (1 + self.jitter * (2 * random.random() - 1)) if self.jitter else self.latency
        reply = OK if endpoint == "/judge" else model_ok(endpoint)
        if VARIED and endpoint != "/judge":  # a reply of its own for each request (--varied)
            reply = _http("200 OK", _reply_body(f"{MODEL_REPLY or 'Answer: 1'} {endpoint} {zlib.crc32(body):08x}"))
        asyncio.get_running_loop().call_later(delay, self.answer, reply)

    def answer(self, body: bytes = OK) -> None:
        Stats.in_flight -= 1
        if not self.transport.is_closing():  # a client killed mid-request was never answered: not paid
            self.transport.write(body)
            Stats.ok += 1
            Stats.last_answer = self.answered_at = time.monotonic()


async def serve(latency: float, rate_limit: float | None, port: int, jitter: float = 0.0) -> None:
    loop = asyncio.get_running_loop()
    bucket = Bucket(rate_limit) if rate_limit else None
    server = await loop.create_server(lambda: Conn(latency, bucket, jitter), "127.0.0.1", port, backlog=4096)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--rate-limit", type=float, default=None)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--jitter", type=float, default=0.0, help="latency varies uniformly by +- this fraction")
    ap.add_argument("--reply", default=None, help="model endpoints answer this text and their path (default "
                                                  "'Answer: 1' alone); the judge, at /judge/v1, 'Answer: 1'")
    ap.add_argument("--varied", action="store_true", help="model endpoints add a hash of the request's body to "
                                                         "their reply, so that conversations do not repeat")
    a = ap.parse_args()
    global VARIED
    VARIED = a.varied
    if a.reply is not None:
        global MODEL_REPLY
        MODEL_REPLY = a.reply
    try:  # the server should cost as little as it can: its own CPU adds to the latency the client sees
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    try:
        asyncio.run(serve(a.latency, a.rate_limit, a.port, a.jitter))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
