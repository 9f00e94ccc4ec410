"""Translate SDK exceptions (openai and anthropic share the same shapes) into typed ModelErrors."""

from __future__ import annotations

import functools
import json
import math
import re
import time

from ..redaction import env_secrets, redact_url, scrub
from ..types import ModelError


def _retry_after(headers, now: float | None = None) -> float | None:
    """Seconds to wait from Retry-After (seconds or an HTTP-date, RFC 9110 10.2.3) or OpenAI's
    retry-after-ms; None when absent or unreadable. Never negative, never NaN or inf: the caller caps it."""
    if headers is None:
        return None
    for name in ("retry-after-ms", "retry-after"):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            try:
                import email.utils  # here, as html below: only an error reply reads them
                when = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError, IndexError):
                continue
            if when.tzinfo is None:  # an HTTP-date is GMT; a date without a zone is taken as such
                return None
            value = when.timestamp() - (time.time() if now is None else now)
        else:
            value = value / 1000 if name.endswith("ms") else value
        return max(0.0, value) if math.isfinite(value) else None
    return None


def from_sdk_error(sdk, exc: Exception, secret: str | None = None) -> ModelError:
    """`sdk` is the imported openai or anthropic module; `secret` is the API key the request was sent with,
    removed from the message (servers and gateways may quote the credentials they reject), because the
    message is stored, written to samples.jsonl and printed."""
    from ._http import HTTPProtocolError
    if isinstance(exc, sdk.APITimeoutError):
        return ModelError("timeout", "request timed out")
    if isinstance(exc.__cause__, HTTPProtocolError):  # our cap on the body (sdk_client_options), as wrapped
        return ModelError("malformed", f"unreadable response: {exc.__cause__}")
    if isinstance(exc, HTTPProtocolError):
        return ModelError("malformed", f"unreadable response: {exc}")
    import aiohttp  # the SDKs' transport here: bytes that are not HTTP/1.x (an HTTP/2-only server)
    if isinstance(exc, aiohttp.ClientResponseError) or isinstance(exc.__cause__, aiohttp.ClientResponseError):
        return ModelError("malformed", "unreadable response: not a valid HTTP/1.x reply")
    if isinstance(exc, sdk.APIConnectionError):
        return ModelError("connection", f"connection failed: {type(exc.__cause__ or exc).__name__}")
    if isinstance(exc, sdk.APIStatusError):
        return from_status(exc.status_code, getattr(exc.response, "headers", None), _short(exc, secret),
                           body_code(getattr(exc, "body", None)) or getattr(exc, "code", None))
    if isinstance(exc, (sdk.APIResponseValidationError, json.JSONDecodeError, ValueError, KeyError,
                        TypeError, AttributeError)):
        return ModelError("malformed", f"unreadable response: {type(exc).__name__}")
    return ModelError("other", f"{type(exc).__name__}: {_short(exc, secret)}")


def from_status(status: int, headers, message: str, code: str | None = None) -> ModelError:
    """The typed error for an HTTP error status; shared by the SDK mapping and the plain-HTTP transport so
    that both classify a status (and read Retry-After) the same way. `message` must already be redacted;
    `code` is the body's error.code where it has one."""
    msg = f"HTTP {status}: {message}"
    if status in (400, 413, 422) and is_context_length(message, code):
        return ModelError("context_length", msg, status=status)
    if 300 <= status < 400:
        return redirect_error(status, headers)
    if status == 429:
        return ModelError("rate_limit", msg, retry_after=_retry_after(headers), status=status)
    if status in (401, 403):
        return ModelError("auth", msg, status=status)
    if status == 404:
        return ModelError("not_found", msg, status=status)
    if status in (408, 409, 425) or status >= 500:
        return ModelError("server_error", msg, retry_after=_retry_after(headers), status=status)
    return ModelError("bad_request", msg, status=status)


# How servers say that a prompt does not fit the model's context window: OpenAI's error code, and the
# messages of OpenAI and vLLM ("This model's maximum context length is 8192 tokens..."), vLLM's newer
# "The decoder prompt (length N) is longer than the maximum model length of M", Anthropic ("prompt is too
# long: 210000 tokens > 200000 maximum"), llama.cpp ("the request exceeds the available context size"),
# TGI ("`inputs` tokens + `max_new_tokens` must be <= 4096", "`inputs` must have less than 4096 tokens")
# and Gemini's compatible API ("exceeds the maximum number of tokens allowed").
_CONTEXT_CODES = {"context_length_exceeded"}
_CONTEXT_MESSAGE = re.compile(
    r"maximum context length|context[_ ]length[_ ]exceeded|prompt is too long"
    r"|(?:exceeds?|longer than) the (?:available |maximum )?(?:context|model) (?:size|length|window)"
    r"|tokens \+ `?max_new_tokens`? must be <=|`?inputs`? must have less than \d+ tokens"
    r"|exceeds the maximum number of tokens", re.I)


def is_context_length(message: str, code: str | None = None) -> bool:
    """Whether a client error says the prompt is longer than the model's context allows."""
    return (isinstance(code, str) and code in _CONTEXT_CODES) or bool(_CONTEXT_MESSAGE.search(message))


def redirect_error(status: int, headers) -> ModelError:
    """A redirect is refused on every transport: following it would send the prompt, and the API key, to
    whatever host the server names. The target is shown without credentials or query."""
    target = (headers.get("location") if headers is not None else None) or "nowhere (no Location header)"
    return ModelError("other", f"HTTP {status}: redirect to {redact_url(target[:300])} refused; if that is the "
                               f"endpoint, give it as the base URL", status=status)


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")


def page_message(text: str) -> str:
    """The message of an error body that is not JSON: an HTML page (nginx, a gateway) gives its title, or
    its text without tags; whitespace, CR and LF collapse to single spaces, so a message is one line."""
    if "<" in text:
        import html
        title = _TITLE.search(text)
        text = html.unescape(title.group(1) if title else _TAG.sub(" ", text))
    return " ".join(text.split())


def body_code(body) -> str | None:
    """`error.code` of a provider's JSON error body (OpenAI's shape; the SDK's body is the error itself)."""
    if isinstance(body, dict):
        err = body.get("error", body)
        code = err.get("code") if isinstance(err, dict) else None
        return code if isinstance(code, str) else None
    return None


def body_message(body) -> str:
    """`error.message` of a provider's JSON error body (OpenAI and Anthropic shapes), or ""."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return ""


def redact(text: str, secret: str | None) -> str:
    """Remove the API key (and any other key in the environment), then cut to length: in that order so
    no part of a key is left at the cut."""
    return scrub(text, (secret, *env_secrets()) if secret else env_secrets())[:200]


# Shorter "keys" are placeholders for local servers (vLLM's EMPTY, our not-needed): removing them from
# a reply would change what the model said, and they protect nothing. Real keys are 40+ characters.
_MIN_KEY = 16


def secrets_with(secret: str | None) -> tuple[str, ...]:
    """The keys to take out of reply text: the one a request is sent with and every key in the
    environment (redaction.env_secrets). A model computes this once: reading the environment costs more
    than the rest of handling a reply."""
    return tuple(k for k in {secret, *env_secrets()} if k and len(k) >= _MIN_KEY)


def _short(exc: Exception, secret: str | None) -> str:
    body = getattr(exc, "body", None)
    text = body_message(body) or (page_message(body) if isinstance(body, str) else "")
    text = text or (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return redact(text, secret)


def sdk_client_options() -> dict:
    """Options for the SDKs' DefaultAioHttpClient (openai and anthropic), so that the sdk transports treat
    a server as the others do: redirects are not followed (the SDKs follow them to any host, prompt and
    key included; a 3xx then becomes `redirect_error`), and the body is decoded here, capped at
    _http.MAX_BODY on the wire and once decompressed (httpx decompresses without a limit)."""
    return {"follow_redirects": False, "event_hooks": {"response": [_cap_body]},
            # what Inflater decodes (httpx would also offer br and zstd when those packages are installed)
            "headers": {"Accept-Encoding": "gzip, deflate"}}


async def _cap_body(response) -> None:
    """httpx response hook: runs once the head is in, before the body is read."""
    response.stream = _capped_stream()(response.stream, response.headers.get("content-encoding", ""))
    response.headers.pop("content-encoding", None)  # decoded by the stream: httpx must not decode it again


@functools.cache
def _capped_stream() -> type:
    """The stream class, made once: httpx2 is imported only by the SDK transports."""
    import httpx2

    from ._http import Inflater

    class Capped(httpx2.AsyncByteStream):
        def __init__(self, inner, encoding: str):
            self.inner, self.encoding = inner, encoding

        async def __aiter__(self):
            inflater = Inflater(self.encoding)
            async for chunk in self.inner:
                yield inflater.feed(chunk)
            yield inflater.finish()

        async def aclose(self) -> None:
            await self.inner.aclose()

    return Capped
