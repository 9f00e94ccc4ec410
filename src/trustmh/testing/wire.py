"""The wire formats the fake LLM server speaks: OpenAI Chat Completions and Anthropic Messages reply and
error bodies (non-streaming), the token counts it reports, and the request key that identifies a call."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

JSON = "application/json"
# Valid headers and status, truncated JSON: what the "malformed" fault sends.
MALFORMED_BODY = b'{"id": "fake", "object": "chat.completion", "choices": [{"index": 0, "mess'


def request_key(body: dict) -> str:
    """sha256 of the canonical JSON of a request body (messages + model + params).

    SDK retries resend the identical body, so equal keys mean "the same call".
    """
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


_OPENAI_ERR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_ANTHROPIC_ERR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _words(content: Any) -> int:
    """Whitespace word count of a message content (string or list of text blocks)."""
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content.split())
    if isinstance(content, list):
        total = 0
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    total += len(text.split())
            elif isinstance(part, str):
                total += len(part.split())
        return total
    return 0


def prompt_words(body: dict) -> int:
    total = _words(body.get("system"))  # Anthropic top-level system prompt
    for msg in body.get("messages") or ():
        if isinstance(msg, dict):
            total += _words(msg.get("content"))
    return total


def fmt_seconds(s: float) -> str:
    # Integral values as plain integers (RFC 9110 delay-seconds); fractional ones
    # as a decimal, which both SDKs' Retry-After parsers accept via float().
    if s == int(s):
        return str(int(s))
    return f"{s:.3f}".rstrip("0").rstrip(".")


def error_body(provider: str, status: int, message: str) -> dict:
    """The JSON error body each provider sends with an error status."""
    if provider == "anthropic":
        etype = _ANTHROPIC_ERR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": etype, "message": message}}
    etype = _OPENAI_ERR_TYPES.get(status, "server_error")
    code = "rate_limit_exceeded" if status == 429 else ("invalid_api_key" if status == 401 else None)
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


# What the server reports as usage, from the words it received and sent: honestly, or as a broken or
# dishonest server does (the spend cap, engine/_budget.py, is tested against each).
USAGE_MODES = ("honest", "zero", "missing", "inflated", "max", "negative", "text")


def _usage(mode: str, prompt: int, completion: int) -> tuple[Any, Any] | None:
    """(prompt, completion) token counts a server in `mode` reports; None: no usage at all."""
    if mode not in USAGE_MODES:
        raise ValueError(f"unknown usage mode {mode!r}; expected one of {USAGE_MODES}")
    return {"honest": (prompt, completion), "zero": (0, 0), "missing": None,
            "inflated": (prompt * 1000 + 1000, completion * 1000 + 1000), "max": (2**63 - 1, 2**63 - 1),
            "negative": (-prompt, -completion), "text": ("many", "lots")}[mode]


def completion(provider: str, n: int, body: dict, text: str | None, mode: str, usage: str = "honest") -> dict:
    """A reply body; mode is 'normal' or one of the 200-status fault kinds (empty_choices, length,
    content_filter); usage one of USAGE_MODES."""
    model = body.get("model") or "fake-model"
    counts = _usage(usage, prompt_words(body), len(text.split()) if text else 0)
    prompt_tokens, completion_tokens = counts if counts is not None else (None, None)
    if provider == "anthropic":
        stop_reason = {"normal": "end_turn", "length": "max_tokens", "content_filter": "refusal"}.get(mode, "end_turn")
        content = [] if (mode in ("empty_choices", "content_filter") or text is None) else [{"type": "text", "text": text}]
        return {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            **({"usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens}} if counts else {}),
        }
    finish = {"normal": "stop", "length": "length", "content_filter": "content_filter"}.get(mode, "stop")
    choices = (
        []
        if mode == "empty_choices"
        else [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "finish_reason": finish,
                "logprobs": None,
            }
        ]
    )
    return {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        **({"usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens if usage != "text" else "all"}}
           if counts else {}),
    }
