"""Anthropic Messages API through the official SDK (aiohttp transport, retries are ours)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time

import anthropic

from ..types import ModelError, Request, Response
from ._errors import from_sdk_error, scrub, sdk_client_options, secrets_with
from .base import Model


SAMPLING = ("temperature", "top_p")


@functools.lru_cache(maxsize=1)
def unsendable_params() -> tuple[str, ...]:
    """Sampling parameters the installed SDK cannot send. Anthropic's API version 2026-10-21, which SDK
    2.x sends, rejects temperature/top_p/top_k even at their defaults, and the SDK dropped them; replies
    then come at the provider's default sampling, and results.json says so (engine._requests.param_notes)."""
    accepted = inspect.signature(anthropic.resources.messages.AsyncMessages.create).parameters
    return tuple(name for name in SAMPLING if name not in accepted)


class AnthropicModel(Model):
    default_max_tokens = 1024  # the Messages API requires one

    def __init__(self, spec: str, name: str, *, api_key: str, base_url: str | None, timeout: float):
        super().__init__(spec)
        self.name = name
        self.base_url = base_url
        self._timeout = timeout
        self._secrets = secrets_with(api_key)  # taken out of reply text
        self._client = anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, timeout=timeout,
                                                max_retries=0,
                                                http_client=anthropic.DefaultAioHttpClient(**sdk_client_options()))

    async def generate(self, request: Request) -> Response:
        p = request.params
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
        messages = [m for m in request.messages if m["role"] != "system"]
        kwargs = {"model": self.name, "messages": messages, "max_tokens": p.get("max_tokens") or self.default_max_tokens}
        if system:
            kwargs["system"] = system
        # Sent only where the installed SDK still has them (see unsendable_params). The requested values
        # stay in the request and its cache key, so a stored reply is still found.
        for name in SAMPLING:
            if p.get(name) is not None and name not in unsendable_params():
                kwargs[name] = p[name]
        t0 = time.perf_counter()
        try:
            # --timeout bounds the whole request; the SDK's bounds each wait for bytes only.
            out = await asyncio.wait_for(self._client.messages.create(**kwargs), self._timeout)
        except asyncio.TimeoutError:
            raise ModelError("timeout", "request timed out") from None
        except Exception as exc:  # noqa: BLE001
            raise from_sdk_error(anthropic, exc, secret=self._client.api_key) from None
        latency = time.perf_counter() - t0
        stop = getattr(out, "stop_reason", None)
        if stop == "refusal":
            raise ModelError("content_filter", "provider safety filter stopped the reply")
        blocks = getattr(out, "content", None)
        texts = [getattr(b, "text", None) for b in (blocks or []) if getattr(b, "type", None) == "text"]
        if not all(isinstance(t, str) for t in texts):
            raise ModelError("malformed", "unreadable response: a text block's text is not a string")
        if not texts:
            raise ModelError("empty_response", f"reply has no text (stop_reason={str(stop)[:40]})")
        usage = getattr(out, "usage", None)
        finish = {"end_turn": "stop", "max_tokens": "length"}.get(stop, stop) if isinstance(stop, str) else None
        return Response(text=scrub("".join(texts), self._secrets), finish_reason=finish,
                        prompt_tokens=getattr(usage, "input_tokens", None),
                        completion_tokens=getattr(usage, "output_tokens", None), latency_s=latency)

    async def aclose(self) -> None:
        await self._client.close()
