"""Translate SDK exceptions (openai and anthropic share the same shapes) into typed ModelErrors."""

from __future__ import annotations

import json

from ..types import ModelError


def _retry_after(headers) -> float | None:
    if headers is None:
        return None
    for name in ("retry-after-ms", "retry-after"):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue  # an HTTP-date; fall back to our own back-off
        return value / 1000 if name.endswith("ms") else value
    return None


def from_sdk_error(sdk, exc: Exception, secret: str | None = None) -> ModelError:
    """`sdk` is the imported openai or anthropic module; `secret` is the API key the request was sent with,
    removed from the message (servers and gateways may quote the credentials they reject), because the
    message is stored, written to samples.jsonl and printed."""
    if isinstance(exc, sdk.APITimeoutError):
        return ModelError("timeout", "request timed out")
    if isinstance(exc, sdk.APIConnectionError):
        return ModelError("connection", f"connection failed: {type(exc.__cause__ or exc).__name__}")
    if isinstance(exc, sdk.APIStatusError):
        return from_status(exc.status_code, getattr(exc.response, "headers", None), _short(exc, secret))
    if isinstance(exc, (sdk.APIResponseValidationError, json.JSONDecodeError, ValueError, KeyError,
                        TypeError, AttributeError)):
        return ModelError("malformed", f"unreadable response: {type(exc).__name__}")
    return ModelError("other", f"{type(exc).__name__}: {_short(exc, secret)}")


def from_status(status: int, headers, message: str) -> ModelError:
    """The typed error for an HTTP error status; shared by the SDK mapping and the plain-HTTP transport so
    that both classify a status (and read Retry-After) the same way. `message` must already be redacted."""
    msg = f"HTTP {status}: {message}"
    if status == 429:
        return ModelError("rate_limit", msg, retry_after=_retry_after(headers), status=status)
    if status in (401, 403):
        return ModelError("auth", msg, status=status)
    if status == 404:
        return ModelError("not_found", msg, status=status)
    if status in (408, 409, 425) or status >= 500:
        return ModelError("server_error", msg, retry_after=_retry_after(headers), status=status)
    return ModelError("bad_request", msg, status=status)


def body_message(body) -> str:
    """`error.message` of a provider's JSON error body (OpenAI and Anthropic shapes), or ""."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return ""


def redact(text: str, secret: str | None) -> str:
    """Remove the API key, then cut to length: in that order so no part of the key is left at the cut."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return text[:200]


def _short(exc: Exception, secret: str | None) -> str:
    text = body_message(getattr(exc, "body", None))
    text = text or (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return redact(text, secret)
