"""OpenAI and any OpenAI-compatible server (vLLM, TGI, Ollama, LM Studio).

Three transports post the same Chat Completions body:

* "http" (default): the project's small kept-alive HTTP/1.1 client (models/_http.py), ~0.07 ms of CPU
  per request. When HTTPS_PROXY / HTTP_PROXY (and NO_PROXY) route the URL through a proxy it uses the
  "aiohttp" transport instead, which speaks to proxies.
* "aiohttp": one aiohttp session per model, ~0.2 ms per request.
* "sdk": the official SDK over its aiohttp transport, ~1.5 ms per request (its request-parameter
  transform and response models), kept for servers or proxies that need something only the SDK does.
  It capped a run near 650 req/s on 2 cores (bench/throughput.py).

All map failures onto the same typed ModelErrors (models/_errors.py) and build the same Response, and
none is part of the endpoint's identity: a reply stored through one is reused by the others. All treat the
server alike (tests/test_openai_transport.py, the conformance matrix): redirects refused, bodies capped on
the wire and once decompressed (_http.Inflater), --timeout bounding the whole request."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from ..types import ModelError, Request, Response
from ._errors import body_code, body_message, from_status, page_message, redact, scrub, sdk_client_options, secrets_with
from .base import env_value as _env_value, TRANSPORTS, Model

OFFICIAL = "https://api.openai.com/v1"
DEFAULT_CONNECTIONS = 256  # the runner's adaptive limiter bounds concurrency; this only caps the pool


class OpenAIModel(Model):
    def __init__(self, spec: str, name: str, *, api_key: str, base_url: str | None, timeout: float,
                 max_connections: int | None = None, transport: str = "http"):
        super().__init__(spec)
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}; expected one of {TRANSPORTS}")
        self.name = name
        self.base_url = base_url
        self.transport = transport
        self._api_key = api_key
        self._secrets = secrets_with(api_key)  # taken out of reply text (_response)
        self._timeout = timeout
        self._max_connections = max_connections or DEFAULT_CONNECTIONS
        self._client = None
        self._session = None  # aiohttp.ClientSession, made inside the running loop on first use
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._http = None  # _http.HTTPClient, likewise bound to the loop it was made in
        self._http_loop: asyncio.AbstractEventLoop | None = None
        if transport == "sdk":
            import openai  # only the sdk transport pays for importing the SDK
            self._client = openai.AsyncOpenAI(
                api_key=api_key, base_url=base_url or OFFICIAL, timeout=timeout, max_retries=0,
                http_client=openai.DefaultAioHttpClient(
                    timeout=timeout,
                    limits=openai._constants.DEFAULT_CONNECTION_LIMITS.__class__(
                        max_connections=self._max_connections,
                        max_keepalive_connections=self._max_connections),
                    **sdk_client_options()))
        else:
            self._url = (base_url or OFFICIAL).rstrip("/") + "/chat/completions"
            self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json",
                             "Accept": "application/json"}
            # The same optional headers the SDK sends when these variables are set.
            for var, header in (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project")):
                if value := _env_value(var):  # a line break inside is refused, by name
                    self._headers[header] = value
            # aiohttp offers br too when brotli is installed; Inflater decodes gzip and deflate only
            self._aiohttp_headers = {**self._headers, "Accept-Encoding": "gzip, deflate"}
            self._proxy = _env_proxy(self._url)
            if self._proxy and transport == "http":
                self.transport = "aiohttp"  # the lean client does not speak to proxies

    def _body(self, request: Request) -> dict[str, Any]:
        p = request.params
        kwargs: dict[str, Any] = {"model": self.name, "messages": request.messages}
        if p.get("temperature") is not None:
            kwargs["temperature"] = p["temperature"]
        if p.get("top_p") is not None:
            kwargs["top_p"] = p["top_p"]
        if p.get("seed") is not None:
            kwargs["seed"] = p["seed"]
        for name in ("frequency_penalty", "presence_penalty"):  # sent only when a protocol sets them
            if p.get(name) is not None:
                kwargs[name] = p[name]
        if p.get("max_tokens") is not None:
            # OpenAI's newer models reject max_tokens; compatible servers may not know the new name.
            kwargs["max_completion_tokens" if not self.base_url else "max_tokens"] = p["max_tokens"]
        return kwargs

    async def generate(self, request: Request) -> Response:
        body = self._body(request)
        if self.transport == "sdk":
            return await self._generate_sdk(body)
        t0 = time.perf_counter()
        if self.transport == "http":
            status, headers, raw = await self._post_lean(json.dumps(body).encode())
        else:
            status, headers, raw = await self._post_aiohttp(json.dumps(body).encode())
        return self._read_reply(status, headers, raw, time.perf_counter() - t0)

    # ---------------------------------------------------------------------------------------- sdk

    async def _generate_sdk(self, kwargs: dict[str, Any]) -> Response:
        import openai

        from ._errors import from_sdk_error
        t0 = time.perf_counter()
        try:
            # The SDK's timeout bounds each wait for bytes, so a server sending one byte a second never
            # times out; --timeout bounds the whole request, as on the other transports.
            out = await asyncio.wait_for(self._client.chat.completions.create(**kwargs), self._timeout)
        except asyncio.TimeoutError:
            raise ModelError("timeout", "request timed out") from None
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed, counted error
            raise from_sdk_error(openai, exc, secret=self._client.api_key) from None
        latency = time.perf_counter() - t0
        try:
            choices = out.choices
        except AttributeError:
            raise ModelError("malformed", "response has no choices field") from None
        if not choices:
            raise ModelError("empty_response", "response has no choices")
        choice = choices[0]
        finish = choice.finish_reason
        text = choice.message.content if choice.message is not None else None
        usage = out.usage
        return _response(text, finish, getattr(usage, "prompt_tokens", None),
                         getattr(usage, "completion_tokens", None), latency, self._secrets)

    # --------------------------------------------------------------------------------------- http

    async def _post_lean(self, data: bytes) -> tuple[int, Any, bytes]:
        from ._http import HTTPClient, HTTPProtocolError
        loop = asyncio.get_running_loop()
        if self._http is None or self._http_loop is not loop:
            self._http = HTTPClient(self._url, max_connections=self._max_connections, timeout=self._timeout,
                                    headers=self._headers)
            self._http_loop = loop
        try:
            return await self._http.post(data)
        except asyncio.TimeoutError:  # before ConnectionError and OSError: a TimeoutError is an OSError
            raise ModelError("timeout", "request timed out") from None
        except ConnectionError as exc:
            raise ModelError("connection", f"connection failed: {redact(str(exc), self._api_key)}") from None
        except HTTPProtocolError as exc:
            raise ModelError("malformed", f"unreadable response: {exc}") from None
        except OSError as exc:  # TLS failures and the like
            raise ModelError("connection", f"connection failed: {type(exc).__name__}") from None

    def _get_session(self):
        import aiohttp
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            # A session is bound to the loop it was made in; a model reused from a new loop gets a new one.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0, ttl_dns_cache=300),
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                # Decoded by _http.Inflater in _post_aiohttp, capped; aiohttp's own decoder has no cap.
                auto_decompress=False,
                # Not trust_env: with it aiohttp looks up ~/.netrc in a thread on every request. Proxies
                # from the environment are resolved once in __init__ instead.
                trust_env=False)
            self._session_loop = loop
        return self._session

    async def _post_aiohttp(self, data: bytes) -> tuple[int, Any, bytes]:
        import aiohttp

        from ._http import HTTPProtocolError, Inflater
        session = self._get_session()
        secret = self._api_key
        try:
            async with session.post(self._url, data=data, headers=self._aiohttp_headers,
                                    proxy=self._proxy, allow_redirects=False) as r:
                inflater = Inflater(r.headers.get("Content-Encoding", ""))
                parts = [inflater.feed(chunk) async for chunk in r.content.iter_chunked(1 << 16)]
                return r.status, r.headers, b"".join(parts) + inflater.finish()
        # TimeoutError first: aiohttp's ServerTimeoutError is also a ClientConnectionError.
        except asyncio.TimeoutError:
            raise ModelError("timeout", "request timed out") from None
        except HTTPProtocolError as exc:  # over the body cap, or not valid gzip/deflate
            raise ModelError("malformed", f"unreadable response: {exc}") from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError) as exc:
            raise ModelError("connection", f"connection failed: {type(exc).__name__}") from None
        except aiohttp.ClientResponseError as exc:  # the server's bytes were not valid HTTP
            raise ModelError("malformed", f"unreadable response: {type(exc).__name__}") from None
        except aiohttp.ClientError as exc:
            raise ModelError("other", f"{type(exc).__name__}: {redact(str(exc), secret)}") from None

    def _read_reply(self, status: int, headers, raw: bytes, latency: float) -> Response:
        secret = self._api_key
        if status >= 300:  # errors, and redirects, which are refused (from_status)
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError):
                body = None
            message = body_message(body)
            if not message:  # a gateway's HTML or plain-text page: its title or text, on one line
                message = page_message(raw[:65536].decode("utf-8", "replace")) or "no error message"
            raise from_status(status, headers, redact(message, secret), body_code(body))
        if not 200 <= status < 300:
            raise ModelError("other", f"HTTP {status}", status=status)
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
            raise ModelError("malformed", f"unreadable response: {type(exc).__name__}") from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list):
            raise ModelError("malformed", "response has no choices field")
        if not choices:
            raise ModelError("empty_response", "response has no choices")
        choice = choices[0]
        if not isinstance(choice, dict):
            raise ModelError("malformed", "unreadable response: choice is not an object")
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if text is not None and not isinstance(text, str):
            raise ModelError("malformed", "unreadable response: content is not a string")
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        return _response(text, choice.get("finish_reason"), usage.get("prompt_tokens"),
                         usage.get("completion_tokens"), latency, self._secrets)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._session is not None and not self._session.closed:
            await self._session.close()
        if self._http is not None:
            await self._http.close()


def _response(text: str | None, finish: str | None, prompt_tokens, completion_tokens, latency: float,
              secrets: tuple[str, ...]) -> Response:
    """The checks all transports share, so a filtered or empty reply is the same error whichever is used.
    Response checks the types; a key the server echoed into the text is removed before it is stored."""
    if finish == "content_filter":
        raise ModelError("content_filter", "provider content filter blocked the reply")
    if text is None:
        raise ModelError("empty_response", f"reply has no text (finish_reason={str(finish)[:40]})")
    if not isinstance(text, str):
        raise ModelError("malformed", "unreadable response: content is not a string")
    return Response(text=scrub(text, secrets), finish_reason=finish, prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens, latency_s=latency)


def _env_proxy(url: str) -> str | None:
    """The proxy HTTPS_PROXY / HTTP_PROXY / NO_PROXY give for `url` (as httpx, under the SDK, honours them)."""
    if not any(name.lower().endswith("_proxy") for name in os.environ):  # what getproxies_environment reads: with
        return None  # none set (most runs), urllib.request and its HTTP client are not imported (~5 ms of a start)
    import urllib.request
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    if not proxies or urllib.request.proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    return proxies.get(parts.scheme) or proxies.get("all")
