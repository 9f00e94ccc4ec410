"""Tests for trustmh.testing.fake_server, driven through the real OpenAI / Anthropic SDKs.

Sync tests with asyncio.run (no pytest-asyncio).  The server lives in its own
thread, so each asyncio.run loop talks to it over real loopback sockets.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import pytest

from conftest import Lazy
from trustmh.testing.fake_server import FakeLLMServer, Fault, fault_schedule, request_key

anthropic, openai = Lazy("anthropic"), Lazy("openai")

MSGS = [{"role": "user", "content": "how are you feeling today"}]


def oai_client(srv: FakeLLMServer, **kw) -> openai.AsyncOpenAI:
    # Must be built inside a running loop: the aiohttp transport binds to it.
    kw.setdefault("max_retries", 0)
    return openai.AsyncOpenAI(
        base_url=srv.base_url + "/v1", api_key="test", http_client=openai.DefaultAioHttpClient(), **kw
    )


def ant_client(srv: FakeLLMServer, **kw) -> anthropic.AsyncAnthropic:
    kw.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="test", **kw)


async def oai_call(srv: FakeLLMServer, messages=MSGS, **kw):
    create_kw = kw.pop("create_kw", {})
    async with oai_client(srv, **kw) as c:
        return await c.chat.completions.create(model="gpt-fake", messages=messages, **create_kw)


async def ant_call(srv: FakeLLMServer, messages=MSGS, **kw):
    async with ant_client(srv, **kw) as c:
        return await c.messages.create(model="claude-fake", max_tokens=64, messages=messages)


CALLERS = {"openai": oai_call, "anthropic": ant_call}


def only_first(fault: Fault):
    return lambda n, body: fault if n == 0 else None


# --------------------------------------------------------------------------- #
# normal replies


def test_openai_normal_reply_and_reply_sees_request():
    seen = []

    def reply(body):
        seen.append(body)
        return "echo: " + body["messages"][-1]["content"]

    with FakeLLMServer(reply=reply) as srv:
        r = asyncio.run(oai_call(srv, create_kw={"temperature": 0.0}))
    assert r.object == "chat.completion"
    assert r.model == "gpt-fake"
    assert len(r.choices) == 1
    ch = r.choices[0]
    assert ch.index == 0 and ch.finish_reason == "stop"
    assert ch.message.role == "assistant"
    assert ch.message.content == "echo: how are you feeling today"
    assert r.usage.prompt_tokens == 5
    assert r.usage.completion_tokens == 6
    assert r.usage.total_tokens == 11
    # The reply callable got the exact body the SDK sent, params included.
    assert seen[0]["model"] == "gpt-fake"
    assert seen[0]["messages"] == MSGS
    assert seen[0]["temperature"] == 0.0
    assert srv.requests == seen
    assert srv.n_requests == 1 and srv.n_completed == 1


def test_anthropic_normal_reply_and_reply_sees_request():
    seen = []

    def reply(body):
        seen.append(body)
        return "I hear you"

    with FakeLLMServer(reply=reply) as srv:
        r = asyncio.run(ant_call(srv))
    assert r.type == "message" and r.role == "assistant"
    assert r.model == "claude-fake"
    assert r.stop_reason == "end_turn"
    assert [b.type for b in r.content] == ["text"]
    assert r.content[0].text == "I hear you"
    assert r.usage.input_tokens == 5 and r.usage.output_tokens == 3
    assert seen[0]["max_tokens"] == 64 and seen[0]["messages"] == MSGS
    assert srv.n_completed == 1


def test_default_reply_is_ok_and_models_endpoint():
    async def go(srv):
        async with oai_client(srv) as oc, ant_client(srv) as ac:
            r = await oc.chat.completions.create(model="m", messages=MSGS)
            om = await oc.models.list()
            am = await ac.models.list()
            return r, [m.id async for m in om], [m.id async for m in am]

    with FakeLLMServer() as srv:
        assert srv.openai_base_url == srv.base_url + "/v1"
        assert srv.base_url.startswith("http://127.0.0.1:")
        r, oids, aids = asyncio.run(go(srv))
        assert r.choices[0].message.content == "OK"
        assert oids == ["fake-model"] and aids == ["fake-model"]
        # models requests count as received but are not paid completions
        assert srv.n_requests == 3 and srv.n_completed == 1


# --------------------------------------------------------------------------- #
# error statuses


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_429_with_retry_after_is_rate_limit_error(provider):
    sdk = openai if provider == "openai" else anthropic
    with FakeLLMServer(faults=only_first(Fault("status", status=429, retry_after=2.5))) as srv:
        with pytest.raises(sdk.RateLimitError) as ei:
            asyncio.run(CALLERS[provider](srv))
        assert srv.n_completed == 0
    e = ei.value
    assert e.status_code == 429
    assert e.response.headers["retry-after"] == "2.5"
    # error body in the provider's own format
    body = e.body if provider == "openai" else e.body["error"]
    assert body["type"] == "rate_limit_error"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_500_is_internal_server_error(provider):
    sdk = openai if provider == "openai" else anthropic
    with FakeLLMServer(faults=only_first(Fault("status", status=500))) as srv:
        with pytest.raises(sdk.InternalServerError) as ei:
            asyncio.run(CALLERS[provider](srv))
    assert ei.value.status_code == 500
    assert "retry-after" not in ei.value.response.headers


@pytest.mark.parametrize(
    "status,exc_name",
    [(400, "BadRequestError"), (401, "AuthenticationError"), (503, "InternalServerError")],
)
def test_other_statuses_map_to_sdk_errors(status, exc_name):
    with FakeLLMServer(faults=lambda n, b: Fault("status", status=status)) as srv:
        with pytest.raises(getattr(openai, exc_name)):
            asyncio.run(oai_call(srv))
        with pytest.raises(getattr(anthropic, exc_name)):
            asyncio.run(ant_call(srv))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_sdk_retry_honours_retry_after_and_pays_once(provider):
    # First request 503 with a tiny Retry-After; the SDK's own retry succeeds.
    # Only the delivered reply counts as paid.
    with FakeLLMServer(faults=only_first(Fault("status", status=503, retry_after=0.01))) as srv:
        r = asyncio.run(CALLERS[provider](srv, max_retries=2))
        assert srv.n_requests == 2 and srv.n_completed == 1
        assert srv.duplicate_paid_calls() == 0
    assert (r.choices[0].message.content if provider == "openai" else r.content[0].text) == "OK"


# --------------------------------------------------------------------------- #
# broken transports / bodies


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_malformed_json_raises_plain_json_decode_error(provider):
    # Both SDKs let json.JSONDecodeError (a ValueError) escape un-wrapped for a
    # 200 response with an invalid JSON body: callers must catch ValueError too,
    # and the SDK's retry loop does not retry it.
    sdk = openai if provider == "openai" else anthropic
    with FakeLLMServer(faults=only_first(Fault("malformed"))) as srv:
        with pytest.raises(json.JSONDecodeError) as ei:
            asyncio.run(CALLERS[provider](srv, max_retries=2))
        assert not isinstance(ei.value, sdk.APIError)
        assert srv.n_requests == 1 and srv.n_completed == 0


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_close_is_connection_error(provider):
    sdk = openai if provider == "openai" else anthropic
    with FakeLLMServer(faults=only_first(Fault("close"))) as srv:
        with pytest.raises(sdk.APIConnectionError) as ei:
            asyncio.run(CALLERS[provider](srv))
        assert not isinstance(ei.value, sdk.APITimeoutError)
        assert srv.n_completed == 0 and srv.fault_counts["close"] == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_stall_with_short_timeout_is_timeout_error(provider):
    sdk = openai if provider == "openai" else anthropic
    t0 = time.monotonic()
    with FakeLLMServer(faults=only_first(Fault("stall", stall_s=20))) as srv:
        with pytest.raises(sdk.APITimeoutError):
            asyncio.run(CALLERS[provider](srv, timeout=0.3))
        # The abandoned handler is cancelled: not in flight, never counted as paid.
        deadline = time.monotonic() + 2
        while srv.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.in_flight == 0
        assert srv.n_completed == 0 and not srv.calls
    assert time.monotonic() - t0 < 3  # stop() did not wait out the stall


def test_short_stall_then_normal_reply():
    with FakeLLMServer(faults=only_first(Fault("stall", stall_s=0.2))) as srv:
        t0 = time.monotonic()
        r = asyncio.run(oai_call(srv, timeout=5))
        assert time.monotonic() - t0 >= 0.2
        assert r.choices[0].message.content == "OK"
        # The server counts a reply once its handler returns, which may be just after the client has it.
        deadline = time.monotonic() + 2
        while srv.n_completed < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.n_completed == 1


# --------------------------------------------------------------------------- #
# 200 responses with unusable content


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_empty_choices(provider):
    with FakeLLMServer(faults=only_first(Fault("empty_choices"))) as srv:
        r = asyncio.run(CALLERS[provider](srv))
        assert srv.n_completed == 0  # not a normal reply: not counted as paid
    if provider == "openai":
        assert r.choices == []
    else:
        assert r.content == []


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_length_truncates(provider):
    with FakeLLMServer(reply=lambda b: "one two three four five six", faults=only_first(Fault("length"))) as srv:
        r = asyncio.run(CALLERS[provider](srv))
    if provider == "openai":
        assert r.choices[0].finish_reason == "length"
        assert r.choices[0].message.content == "one two three"
    else:
        assert r.stop_reason == "max_tokens"
        assert r.content[0].text == "one two three"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_content_filter(provider):
    with FakeLLMServer(faults=only_first(Fault("content_filter"))) as srv:
        r = asyncio.run(CALLERS[provider](srv))
    if provider == "openai":
        assert r.choices[0].finish_reason == "content_filter"
        assert r.choices[0].message.content is None
    else:
        assert r.stop_reason == "refusal"
        assert r.content == []


# --------------------------------------------------------------------------- #
# counters


def test_calls_counter_and_duplicate_paid_calls():
    a = [{"role": "user", "content": "a"}]
    b = [{"role": "user", "content": "b"}]

    async def go(srv):
        async with oai_client(srv) as c:
            await c.chat.completions.create(model="m", messages=a)  # n=0 paid
            await c.chat.completions.create(model="m", messages=a)  # n=1 paid again -> duplicate
            await c.chat.completions.create(model="m", messages=b)  # n=2 paid
            with pytest.raises(openai.InternalServerError):
                await c.chat.completions.create(model="m", messages=b)  # n=3 failed: not paid
            # a different param makes a different call
            await c.chat.completions.create(model="m", messages=b, temperature=0.5)  # n=4

    faults = lambda n, body: Fault("status", status=500) if n == 3 else None
    with FakeLLMServer(faults=faults) as srv:
        asyncio.run(go(srv))
        calls = srv.calls
        assert srv.n_requests == 5 and srv.n_completed == 4
        assert calls[request_key({"model": "m", "messages": a})] == 2
        assert calls[request_key({"model": "m", "messages": b})] == 1
        assert calls[request_key({"model": "m", "messages": b, "temperature": 0.5})] == 1
        assert sum(calls.values()) == 4
        assert srv.duplicate_paid_calls() == 1
        # key is canonical: key order does not matter
        assert request_key({"messages": a, "model": "m"}) == request_key({"model": "m", "messages": a})
        srv.reset_counters()
        assert srv.n_requests == 0 and srv.duplicate_paid_calls() == 0 and srv.requests == []


def test_max_in_flight_reaches_client_concurrency():
    async def go(srv):
        async with oai_client(srv) as oc:
            await asyncio.gather(
                *(oc.chat.completions.create(model="m", messages=[{"role": "user", "content": str(i)}]) for i in range(50))
            )

    # A second per reply: the SDK's client sends 50 requests well within it even on a loaded machine (at
    # 0.1 s the first replies came back before the last requests left, and CI saw 29 in flight)
    with FakeLLMServer(latency_s=1.0) as srv:
        t0 = time.monotonic()
        asyncio.run(go(srv))
        elapsed = time.monotonic() - t0
        assert srv.max_in_flight == 50
        assert srv.n_completed == 50 and srv.duplicate_paid_calls() == 0
        assert srv.in_flight == 0
    assert elapsed < 10.0  # served concurrently, not 50 x 1 s


def test_rate_limit_token_bucket():
    async def go(srv):
        ok, limited = 0, []
        async with oai_client(srv) as c:
            for i in range(8):
                try:
                    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": str(i)}])
                    ok += 1
                except openai.RateLimitError as e:
                    limited.append(float(e.response.headers["retry-after"]))
        return ok, limited

    with FakeLLMServer(rate_limit_rps=4) as srv:
        ok, limited = asyncio.run(go(srv))
        # bucket holds 4 tokens; 8 back-to-back requests take well under 1/4 s each
        assert ok >= 4 and len(limited) >= 1 and ok + len(limited) == 8
        assert all(0 < s <= 0.25 for s in limited)
        assert srv.n_rate_limited == len(limited)
        # after waiting the advertised Retry-After, a token is available again
        time.sleep(max(limited))
        r = asyncio.run(oai_call(srv))
        assert r.choices[0].message.content == "OK"


def test_bad_requests_from_plain_http():
    # Sync client with no SDK: invalid JSON and stream=true are refused with 400.
    with FakeLLMServer() as srv:
        for data in (b"not json", json.dumps({"model": "m", "messages": MSGS, "stream": True}).encode()):
            req = urllib.request.Request(
                srv.base_url + "/v1/chat/completions", data=data, headers={"Content-Type": "application/json"}
            )
            with pytest.raises(urllib.error.HTTPError) as ei:
                urllib.request.urlopen(req, timeout=5)
            assert ei.value.code == 400
            assert "error" in json.loads(ei.value.read())
        assert srv.n_completed == 0


# --------------------------------------------------------------------------- #
# fault schedule / Fault


def test_fault_schedule_is_deterministic_and_hits_rate():
    kinds = [Fault("status", status=500), Fault("close"), Fault("malformed")]
    s1 = fault_schedule(7, 0.2, kinds)
    s2 = fault_schedule(7, 0.2, kinds)
    seq1 = [s1(n, {}) for n in range(5000)]
    # same seed -> same sequence regardless of call order
    assert [s2(n, {}) for n in reversed(range(5000))][::-1] == seq1
    hits = [f for f in seq1 if f is not None]
    assert 0.17 < len(hits) / 5000 < 0.23
    for k in kinds:
        assert 0.25 < sum(f is k for f in hits) / len(hits) < 0.42
    assert [fault_schedule(8, 0.2, kinds)(n, {}) for n in range(5000)] != seq1
    assert all(fault_schedule(1, 0.0, kinds)(n, {}) is None for n in range(1000))
    assert all(fault_schedule(1, 1.0, kinds)(n, {}) is not None for n in range(1000))
    with pytest.raises(ValueError):
        fault_schedule(1, 1.5, kinds)
    with pytest.raises(ValueError):
        fault_schedule(1, 0.5, [])


def test_fault_validation():
    with pytest.raises(ValueError):
        Fault("explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Fault("status", status=200)
