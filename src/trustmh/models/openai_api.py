"""OpenAI and any OpenAI-compatible server (vLLM, TGI, Ollama, LM Studio) through the official SDK.

The SDK runs over its aiohttp transport: measured on this machine at 64 connections against a 100 ms
loopback server it reached ~0.83 of the ideal request rate, against ~0.12 for the default httpx pool."""

from __future__ import annotations

import time

import openai

from ..types import ModelError, Request, Response
from ._errors import from_sdk_error
from . import endpoint_id
from .base import Model

OFFICIAL = "https://api.openai.com/v1"


class OpenAIModel(Model):
    def __init__(self, spec: str, name: str, *, api_key: str, base_url: str | None, timeout: float,
                 max_connections: int = 256):
        super().__init__(spec)
        self.name = name
        self.base_url = base_url
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url or OFFICIAL, timeout=timeout, max_retries=0,
            http_client=openai.DefaultAioHttpClient(
                timeout=timeout,
                limits=openai._constants.DEFAULT_CONNECTION_LIMITS.__class__(
                    max_connections=max_connections, max_keepalive_connections=max_connections)))

    @property
    def endpoint(self) -> str:
        return endpoint_id(self.spec, self.base_url)

    async def generate(self, request: Request) -> Response:
        p = request.params
        kwargs = {"model": self.name, "messages": request.messages}
        if p.get("temperature") is not None:
            kwargs["temperature"] = p["temperature"]
        if p.get("top_p") is not None:
            kwargs["top_p"] = p["top_p"]
        if p.get("seed") is not None:
            kwargs["seed"] = p["seed"]
        if p.get("max_tokens") is not None:
            # OpenAI's newer models reject max_tokens; compatible servers may not know the new name.
            kwargs["max_completion_tokens" if not self.base_url else "max_tokens"] = p["max_tokens"]
        t0 = time.perf_counter()
        try:
            out = await self._client.chat.completions.create(**kwargs)
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
        if finish == "content_filter":
            raise ModelError("content_filter", "provider content filter blocked the reply")
        if text is None:
            raise ModelError("empty_response", f"reply has no text (finish_reason={finish})")
        usage = out.usage
        return Response(text=text, finish_reason=finish,
                        prompt_tokens=getattr(usage, "prompt_tokens", None),
                        completion_tokens=getattr(usage, "completion_tokens", None), latency_s=latency)

    async def aclose(self) -> None:
        await self._client.close()
