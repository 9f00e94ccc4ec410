"""A prompt longer than the model's context is a counted error of kind `context_length`, never a score and
never cut to fit (issue 16): how servers say so (OpenAI's code, vLLM's, TGI's, llama.cpp's and Anthropic's
messages) on every transport, and crisis.severity sending every post of every C-SSRS user, the users a
model cannot take counted apart; and an hf/ model refusing a prompt that fills its positions."""

import ast
import asyncio
import csv
import html
import json
import sys

import pytest
from aiohttp import web

from conftest import run_quiet, run_spec
from trustmh.models._errors import is_context_length
from trustmh.models.openai_api import OpenAIModel
from trustmh.testing.fake_server import Fault, FakeLLMServer
from trustmh.types import ModelError, Request

OPENAI_CODE = {"error": {"message": "Please reduce the length of the messages.", "type": "invalid_request_error",
                         "param": "messages", "code": "context_length_exceeded"}}
VLLM = {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                   "(4744 in the messages, 256 in the completion). Please reduce the length of the messages."}
TGI = {"error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` "
                "tokens and 256 `max_new_tokens`", "error_type": "validation"}
LLAMA_CPP = {"error": {"code": 400, "type": "exceed_context_size_error",
                       "message": "the request exceeds the available context size, try increasing it"}}
ANTHROPIC = {"type": "error", "error": {"type": "invalid_request_error",
                                        "message": "prompt is too long: 210000 tokens > 200000 maximum"}}
NOT_CONTEXT = {"error": {"message": "temperature must be <= 2", "type": "invalid_request_error", "code": None}}


class RefusingServer(FakeLLMServer):
    """Refuses every request whose last message is longer than `limit` characters with `status` and `body`."""

    def __init__(self, status, body, limit=0, **kw):
        super().__init__(faults=lambda n, req: Fault("status", status=status)
                         if len(req["messages"][-1]["content"]) > limit else None, **kw)
        self.body = body

    async def _fault_response(self, request, provider, fault, n, body):
        return web.Response(status=fault.status, body=json.dumps(self.body).encode(), content_type="application/json")


def error_of(srv, provider="openai", transport="http"):
    async def go():
        if provider == "anthropic":
            from trustmh.models.anthropic_api import AnthropicModel  # its SDK: not on every worker's start
            model = AnthropicModel("anthropic/fake", "fake", api_key="test", base_url=srv.base_url, timeout=10)
        else:
            model = OpenAIModel("openai/fake", "fake", api_key="test", base_url=srv.openai_base_url, timeout=10,
                                transport=transport)
        try:
            await model.generate(Request(messages=[{"role": "user", "content": "x" * 50}], params={"max_tokens": 8}))
        finally:
            await model.aclose()
    with pytest.raises(ModelError) as info:
        asyncio.run(go())
    return info.value


@pytest.mark.parametrize("transport", ["http", "aiohttp", "sdk"])
@pytest.mark.parametrize("status, body, kind", [(400, OPENAI_CODE, "context_length"), (400, VLLM, "context_length"),
                                                (422, TGI, "context_length"), (400, LLAMA_CPP, "context_length"),
                                                (400, NOT_CONTEXT, "bad_request")])
def test_openai_compatible_servers_saying_the_prompt_is_too_long(transport, status, body, kind):
    with RefusingServer(status, body) as srv:
        e = error_of(srv, transport=transport)
    assert (e.kind, e.status, e.retryable) == (kind, status, False)
    assert srv.n_requests == 1  # not retried: the same prompt cannot fit next time


def test_anthropic_prompt_is_too_long():
    with RefusingServer(400, ANTHROPIC) as srv:
        e = error_of(srv, provider="anthropic")
    assert e.kind == "context_length" and "prompt is too long" in str(e)


@pytest.mark.parametrize("message, code, expected", [
    ("This model's maximum context length is 8192 tokens", None, True),
    ("The decoder prompt (length 9000) is longer than the maximum model length of 8192.", None, True),
    ("`inputs` must have less than 4096 tokens. Given: 5000", None, True),
    ("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", None, True),
    ("bad things", "context_length_exceeded", True),
    ("max_tokens must be <= 4096", None, False), ("Unsupported parameter: 'seed'", "unsupported_parameter", False),
])
def test_context_length_messages(message, code, expected):
    assert is_context_length(message, code) is expected


def read_users(path):
    """user -> (gold level, its posts as the file holds them) for every cell Python can read as a list."""
    limit = csv.field_size_limit(sys.maxsize)  # set back after: other tests rely on the default limit
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
    finally:
        csv.field_size_limit(limit)
    out = {}
    for row in rows:
        try:
            posts = [html.unescape(p).strip() for p in ast.literal_eval(row["Post"])]
        except (ValueError, SyntaxError):
            posts = None  # the 28 cells cut by a spreadsheet: read by trustmh's own repair
        out[row["User"]] = (row["Label"], [p for p in posts if p] if posts is not None else None)
    return out


def test_severity_sends_every_post_and_counts_what_does_not_fit(upstream, tmp_path):
    users = read_users(upstream / "c-ssrs/500_Reddit_users_posts_labels.csv")
    limit = 20_000  # characters of messages the fake server takes; a longer request is refused
    seen = {}

    def reply(body):
        text = body["messages"][-1]["content"]
        seen[text] = False
        user = next(u for u, (_, posts) in users.items() if posts and posts[0] in text and posts[-1] in text)
        return json.dumps({"level": users[user][0]})

    class Server(RefusingServer):
        async def _fault_response(self, request, provider, fault, n, body):
            seen[body["messages"][-1]["content"]] = True
            return await super()._fault_response(request, provider, fault, n, body)

    with Server(400, VLLM, limit=limit, reply=reply) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="crisis.severity", suite="data",
                        data_dir=str(upstream))
        _, res, _ = run_quiet(spec, tmp_path / "run")
    assert len(seen) == 500  # every user asked once; a refused prompt is not retried
    # every post of every user whose cell reads as a list is in its prompt: nothing is cut
    prompts = list(seen)
    for user, (_, posts) in users.items():
        if posts:
            assert any(all(p in prompt for p in posts) for prompt in prompts if posts[0] in prompt), user
    assert max(len(p) for p in prompts) > 30_000  # the old 8,000-character budget is gone
    refused = sum(seen.values())
    # by hand: a user whose posts alone pass the limit is refused; one far under it (the prompt's own words
    # and post numbers add under 2,000 characters) is not
    long_users = sum(1 for _, posts in users.values() if posts and sum(len(p) for p in posts) > limit)
    short_users = sum(1 for _, posts in users.values() if posts and sum(len(p) for p in posts) < limit - 2_000)
    assert long_users > 0 and long_users <= refused <= 500 - short_users
    t = res.models["openai/fake"].tasks["crisis.severity"]
    assert t.n_samples == 500 and t.n_errors == refused and t.error_kinds == {"context_length": refused}
    assert t.n == 500 - refused and t.value == pytest.approx(1.0)  # the rest answered right; none scored as wrong


def test_hf_prompt_over_the_models_positions_is_a_context_length_error(tmp_path):
    """The tiny model has 256 positions; the chat template adds 3 tokens to n words. A prompt of 256
    tokens leaves no room and fails before generating, with error kind context_length (a server answers
    the same); nothing is cut to fit. One of 250 tokens gets at most the 6 positions left."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from test_hf import build_tiny_model, make, req
    tiny_model = build_tiny_model(tmp_path / "tiny")

    async def main(n_words, max_tokens=12):
        model = make(tiny_model)
        try:
            return await model.generate(req(" ".join(["sad"] * n_words), max_tokens))
        finally:
            await model.aclose()

    fits = asyncio.run(main(247))
    assert fits.prompt_tokens == 250 and fits.completion_tokens <= 6
    with pytest.raises(ModelError) as info:
        asyncio.run(main(253))
    assert info.value.kind == "context_length" and not info.value.retryable
    assert "prompt of 256 tokens does not fit the model's 256 positions" in str(info.value)
