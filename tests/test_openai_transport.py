"""The `openai/` backend's three transports (the lean "http" client, the default; "aiohttp"; the openai
"sdk") behave the same: same request body, same Response, same typed ModelError for every failure a
provider, or a broken or hostile server, shows, and the API key never in an error message. The matrix at
the end (HOSTILE x TRANSPORTS) is the contract. Everything goes through FakeLLMServer on loopback."""

import asyncio
import secrets

import pytest

from conftest import run_cli, run_quiet, run_spec
from trustmh.models import make_model
from trustmh.models.openai_api import OpenAIModel
from trustmh.engine import Limits
from trustmh.testing.fake_server import Fault, FakeLLMServer
from trustmh.types import ModelError, Request

TRANSPORTS = ["http", "aiohttp", "sdk"]
KEY = f"sk-test-{secrets.token_hex(16)}"
MSGS = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "I feel low today."}]


class EchoingServer(FakeLLMServer):
    """Status faults answer with an error body quoting the credentials sent, as a careless gateway might."""

    async def _fault_response(self, request, provider, fault, n, body):
        if fault.kind == "status":
            cred = request.headers.get("Authorization")
            return self._error(provider, fault.status, f"rejected credentials {cred!r}", fault.retry_after)
        return await super()._fault_response(request, provider, fault, n, body)


def call(srv, transport, *, params=None, timeout=5.0):
    """One generate() on a fresh model in a fresh loop, closing the model after."""
    async def go():
        model = OpenAIModel("openai/fake", "fake", api_key=KEY, base_url=srv.openai_base_url, timeout=timeout,
                            transport=transport)
        try:
            return await model.generate(Request(messages=MSGS, params=params or {"temperature": 0.0}))
        finally:
            await model.aclose()
    return asyncio.run(go())


def error_of(srv, transport, **kw) -> ModelError:
    with pytest.raises(ModelError) as info:
        call(srv, transport, **kw)
    assert KEY not in str(info.value) and KEY.split("-")[-1] not in str(info.value)
    return info.value


def always(fault):
    return lambda n, body: fault


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_normal_reply_and_request_body(transport):
    with FakeLLMServer(reply=lambda body: "I hear you. That sounds hard.") as srv:
        r = call(srv, transport, params={"temperature": 0.3, "max_tokens": 32, "seed": 5, "top_p": 0.9})
        body = srv.requests[-1]
    assert r.text == "I hear you. That sounds hard." and r.finish_reason == "stop"
    assert r.prompt_tokens == 6 and r.completion_tokens == 6 and r.latency_s > 0
    # A custom base_url gets max_tokens (compatible servers may not know max_completion_tokens).
    assert body == {"model": "fake", "messages": MSGS, "temperature": 0.3, "max_tokens": 32, "seed": 5,
                    "top_p": 0.9}


def test_both_transports_send_the_same_body():
    bodies = {}
    for transport in TRANSPORTS:
        with FakeLLMServer() as srv:
            call(srv, transport, params={"temperature": 0.0, "max_tokens": 8})
            bodies[transport] = srv.requests[-1]
    assert bodies["http"] == bodies["sdk"] == bodies["aiohttp"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_rate_limit_carries_retry_after(transport):
    with EchoingServer(faults=always(Fault("status", status=429, retry_after=1.5))) as srv:
        e = error_of(srv, transport)
    assert e.kind == "rate_limit" and e.status == 429 and e.retry_after == pytest.approx(1.5)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("status,kind", [(500, "server_error"), (503, "server_error"), (401, "auth"),
                                         (403, "auth"), (404, "not_found"), (400, "bad_request"),
                                         (422, "bad_request")])
def test_status_maps_to_kind_and_key_is_redacted(transport, status, kind):
    with EchoingServer(faults=always(Fault("status", status=status))) as srv:
        e = error_of(srv, transport)
    assert e.kind == kind and e.status == status
    # The body's error.message is kept (so a 400 says what was wrong), with the key taken out.
    assert "rejected credentials" in str(e) and "[redacted]" in str(e)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_bad_request_keeps_the_servers_message(transport):
    with FakeLLMServer(faults=always(Fault("status", status=400))) as srv:
        e = error_of(srv, transport)
    assert e.kind == "bad_request" and "injected fault: HTTP 400" in str(e)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_key_in_a_server_error_from_the_reply_is_redacted(transport):
    def reply(body):
        raise ValueError(f"cannot answer for {KEY}")
    with FakeLLMServer(reply=reply) as srv:
        e = error_of(srv, transport)
    assert e.kind == "server_error" and "[redacted]" in str(e)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_dropped_connection(transport):
    with FakeLLMServer(faults=always(Fault("close"))) as srv:
        assert error_of(srv, transport).kind == "connection"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stall_times_out(transport):
    with FakeLLMServer(faults=always(Fault("stall", stall_s=5.0))) as srv:
        assert error_of(srv, transport, timeout=0.3).kind == "timeout"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("fault,kind", [("malformed", "malformed"), ("empty_choices", "empty_response"),
                                        ("content_filter", "content_filter")])
def test_broken_replies(transport, fault, kind):
    with FakeLLMServer(faults=always(Fault(fault))) as srv:
        assert error_of(srv, transport).kind == kind


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_length_is_a_reply(transport):
    with FakeLLMServer(reply=lambda body: "one two three four", faults=always(Fault("length"))) as srv:
        r = call(srv, transport)
    assert r.text == "one two" and r.finish_reason == "length"


def test_refused_connection_is_connection_error():
    with FakeLLMServer() as srv:
        url = srv.openai_base_url
    model = OpenAIModel("openai/fake", "fake", api_key=KEY, base_url=url, timeout=2, transport="http")

    async def go():
        try:
            await model.generate(Request(messages=MSGS, params={}))
        finally:
            await model.aclose()
    with pytest.raises(ModelError) as info:
        asyncio.run(go())
    assert info.value.kind == "connection"


def test_official_api_gets_max_completion_tokens_and_org_headers(monkeypatch):
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-1")
    m = OpenAIModel("openai/gpt-x", "gpt-x", api_key=KEY, base_url=None, timeout=1)
    assert m._url == "https://api.openai.com/v1/chat/completions"
    assert m._body(Request(messages=MSGS, params={"max_tokens": 7}))["max_completion_tokens"] == 7
    assert m._headers["OpenAI-Organization"] == "org-1" and m._headers["OpenAI-Project"] == "proj-1"
    assert m._headers["Authorization"] == f"Bearer {KEY}"


def test_transport_is_not_part_of_the_endpoint(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    eps = {t: make_model("openai/fake", base_url="http://127.0.0.1:1/v1", transport=t).endpoint for t in TRANSPORTS}
    assert eps["http"] == eps["sdk"] == eps["aiohttp"]
    with pytest.raises(ValueError):
        OpenAIModel("openai/fake", "fake", api_key=KEY, base_url=None, timeout=1, transport="carrier-pigeon")


def test_a_run_through_one_transport_is_reused_by_the_other(tmp_path):
    """Same requests, same cache keys: a run resumed with --transport sdk pays for nothing already stored."""
    fast = Limits(max_connections=8, timeout=5, max_retries=2, backoff_base=0.01)
    with FakeLLMServer() as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="privacy.awareness_tier1",
                        suite="sample", limit=5)
        _, res, calls = run_quiet(spec, tmp_path / "run", limits=fast)
        paid = srv.n_requests
        assert paid > 0 and calls["openai/fake"] == paid
        spec.transport = "sdk"
        _, res2, calls2 = run_quiet(spec, tmp_path / "run", limits=fast)
        assert calls2["openai/fake"] == 0 and srv.n_requests == paid
    t, t2 = res.models["openai/fake"].tasks, res2.models["openai/fake"].tasks
    assert t["privacy.awareness_tier1"].value == t2["privacy.awareness_tier1"].value


def test_cli_transport_option(tmp_path):
    """--transport sdk is recorded in the run's spec (so it shows in results); the default records nothing,
    keeping the run ids of existing runs; anything else is a one-line user error."""
    import json

    def cli(*args):
        return run_cli("run", "-m", "baseline/counselor", "-t", "privacy.awareness_tier1", "--suite", "sample",
                       "--limit", "2", "--bootstrap", "10", "--no-progress", *args, cwd=tmp_path)
    bad = cli("--transport", "pigeon")
    assert bad.returncode != 0 and "--transport must be http, aiohttp or sdk" in bad.stderr + bad.stdout
    assert cli("--out", "a").returncode == 0 and cli("--out", "b", "--transport", "sdk").returncode == 0
    spec_a = json.loads((tmp_path / "a" / "results.json").read_text())["spec"]
    spec_b = json.loads((tmp_path / "b" / "results.json").read_text())["spec"]
    assert "transport" not in spec_a["options"] and spec_b["options"]["transport"] == "sdk"


# --- the conformance matrix: hostile servers (issue 14) --------------------------------------------

from trustmh.types import RETRYABLE  # noqa: E402

# fault -> (error kind, a fragment its message must hold). The kind decides the retry (RETRYABLE), so
# one kind per fault over every transport is one retry decision too.
HOSTILE = {
    "429 with Retry-After as an HTTP-date": (Fault("status", status=429, retry_after=30, retry_after_date=True),
                                             "rate_limit", "HTTP 429"),
    "nginx 503 page": (Fault("html_status", status=503), "server_error",
                       "HTTP 503: 503 Service Temporarily Unavailable"),
    "redirect to another host": (Fault("redirect", location="http://u:pw@127.0.0.2:1/v1/chat?token=t0p#frag"),
                                 "other", "redirect to http://127.0.0.2:1/v1/chat refused"),
    "gzip bomb": (Fault("gzip_bomb"), "malformed", "MiB once decompressed"),
    "endless chunked reply": (Fault("endless_chunked"), "malformed", "MiB"),
    "one byte per 50 ms past the timeout": (Fault("trickle"), "timeout", "timed out"),
    # the provider faults of the fault campaign (test_faults.py), in the same table
    "connection closed mid-reply": (Fault("close"), "connection", "connection"),
    "stall past the timeout": (Fault("stall", stall_s=30), "timeout", "timed out"),
    "truncated JSON": (Fault("malformed"), "malformed", "unreadable response"),
    "HTTP 500": (Fault("status", status=500), "server_error", "HTTP 500: injected fault"),
    "HTTP 400": (Fault("status", status=400), "bad_request", "HTTP 400: injected fault"),
}
# Faults that end at the client's timeout: 0.5 s, not 20 (ten of the trickle's 50 ms gaps between bytes,
# so only a bound on the whole reply ends it, never one per read; 2 s before, ~12 s of the suite's wait).
SHORT_TIMEOUT = ("trickle", "stall")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_server_matrix(transport, name):
    fault, kind, fragment = HOSTILE[name]
    with FakeLLMServer(faults=always(fault)) as srv:
        e = error_of(srv, transport, timeout=0.5 if fault.kind in SHORT_TIMEOUT else 20.0)
    assert (e.kind, e.retryable) == (kind, kind in RETRYABLE), str(e)
    assert fragment in str(e) and "\n" not in str(e) and "\r" not in str(e), str(e)
    assert "pw" not in str(e) and "t0p" not in str(e)
    if fault.retry_after_date:
        assert 20 <= e.retry_after <= 31  # an HTTP-date has whole seconds; the clock moved a little


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("fault", ["bare_lf", "raw_deflate"])
def test_lenient_framing_is_a_normal_reply(transport, fault):
    """A head in bare LFs (RFC 9112 lets a client accept it) and raw deflate are replies, not errors."""
    with FakeLLMServer(reply=lambda body: "I hear you.", faults=always(Fault(fault))) as srv:
        r = call(srv, transport)
    assert (r.text, r.finish_reason, r.completion_tokens) == ("I hear you.", "stop", 3)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_values_sqlite_cannot_hold_become_a_clean_response(transport, tmp_path):
    """A lone \\ud800 escape in the text, token counts that are an object or >= 2^63, an object as
    finish_reason: one such reply crashed the run's commit. Now it is a reply with those fields cleaned."""
    from trustmh.engine._store import Store
    with FakeLLMServer(reply=lambda body: "I hear you.", faults=always(Fault("bad_types"))) as srv:
        r = call(srv, transport)
    assert (r.text, r.finish_reason, r.prompt_tokens, r.completion_tokens) == ("I hear you. \ufffd", None, None, None)
    store = Store(tmp_path / "s.sqlite")
    store.put_calls([("k", "openai/fake", "generate", ("t", "1", ""), r)])
    assert store.get_call("k").text == "I hear you. \ufffd"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_key_echoed_in_a_reply_is_redacted(transport, monkeypatch):
    other = f"sk-ant-{secrets.token_hex(8)}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", other)
    with FakeLLMServer(reply=lambda body: f"your keys are {KEY} and {other}.") as srv:
        r = call(srv, transport)
    assert r.text == "your keys are [redacted] and [redacted]."


@pytest.mark.parametrize("placeholder", ["EMPTY", "not-needed"])
def test_a_placeholder_key_for_a_local_server_is_not_taken_out_of_replies(monkeypatch, placeholder):
    """vLLM's convention is OPENAI_API_KEY=EMPTY: that word in a reply is the model's, not a secret."""
    monkeypatch.setenv("OPENAI_API_KEY", placeholder)
    with FakeLLMServer(reply=lambda body: f"The box is {placeholder}, not-needed.") as srv:
        model = make_model("openai/fake", base_url=srv.openai_base_url)

        async def go():
            try:
                return await model.generate(Request(messages=MSGS, params={}))
            finally:
                await model.aclose()
        assert asyncio.run(go()).text == f"The box is {placeholder}, not-needed."


def call_anthropic(srv, *, timeout=20.0):
    from trustmh.models.anthropic_api import AnthropicModel

    async def go():
        model = AnthropicModel("anthropic/fake", "fake", api_key=KEY, base_url=srv.base_url, timeout=timeout)
        try:
            return await model.generate(Request(messages=MSGS, params={"max_tokens": 16}))
        finally:
            await model.aclose()
    return asyncio.run(go())


@pytest.mark.parametrize("name", list(HOSTILE))
def test_anthropic_meets_hostile_servers_like_the_openai_transports(name):
    fault, kind, fragment = HOSTILE[name]
    with FakeLLMServer(faults=always(fault)) as srv:
        with pytest.raises(ModelError) as info:
            call_anthropic(srv, timeout=0.5 if fault.kind in SHORT_TIMEOUT else 20.0)
    e = info.value
    assert (e.kind, fragment in str(e), "pw" in str(e), KEY in str(e)) == (kind, True, False, False), str(e)


def test_anthropic_reply_with_unstorable_values_and_an_echoed_key():
    with FakeLLMServer(reply=lambda body: f"key {KEY}", faults=always(Fault("bad_types"))) as srv:
        r = call_anthropic(srv)
    assert (r.text, r.prompt_tokens, r.completion_tokens) == ("key [redacted] \ufffd", None, None)


H2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # the first bytes of an HTTP/2 (prior knowledge) server


@pytest.mark.parametrize("client", [*TRANSPORTS, "anthropic"])
@pytest.mark.parametrize("when", ["on connect", "after the request"])
def test_an_http2_only_server_is_malformed_at_once_everywhere(client, when):
    """Not `other` under the openai SDK, `connection` under Anthropic's, or a wait for --timeout."""
    from trustmh.models.anthropic_api import AnthropicModel

    async def go():
        async def handle(reader, writer):
            if when == "on connect":
                writer.write(H2_SETTINGS)
            try:
                await reader.read(100)
                if when == "after the request":
                    writer.write(H2_SETTINGS)
                await reader.read()
            except ConnectionError:
                pass
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        if client == "anthropic":
            model = AnthropicModel("anthropic/m", "m", api_key=KEY, base_url=url, timeout=60)
        else:
            model = OpenAIModel("openai/m", "m", api_key=KEY, base_url=url + "/v1", timeout=60, transport=client)
        try:
            with pytest.raises(ModelError) as info:
                await model.generate(Request(messages=MSGS, params={"max_tokens": 8}))
        finally:
            await model.aclose()
            server.close()
        return info.value
    e = asyncio.run(go())
    assert (e.kind, "\n" in str(e)) == ("malformed", False), str(e)
