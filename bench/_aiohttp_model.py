"""A bench-only `openai/` backend that posts chat completions with aiohttp directly, without the openai
SDK: what trustmh's runner reaches when the transport costs ~0.2 ms per request instead of ~1.5 ms.

Not a product backend: it maps only the statuses the benchmarks' servers send (429 with Retry-After,
5xx, other 4xx) and reads only Content-Length JSON replies."""

from __future__ import annotations

import time

import aiohttp

from trustmh.models import endpoint_id
from trustmh.models.base import Model
from trustmh.types import ModelError, Response


class AiohttpOpenAIModel(Model):
    def __init__(self, spec: str, base_url: str, max_connections: int = 256):
        super().__init__(spec)
        self.name, self.base_url = spec.split("/", 1)[1], base_url
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_connections = max_connections
        self.session: aiohttp.ClientSession | None = None  # made inside the running loop

    @property
    def endpoint(self) -> str:
        return endpoint_id(self.spec, self.base_url)

    async def generate(self, request) -> Response:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.max_connections))
        p = request.params
        body = {"model": self.name, "messages": request.messages}
        for k in ("temperature", "max_tokens", "seed", "top_p"):
            if p.get(k) is not None:
                body[k] = p[k]
        t0 = time.perf_counter()
        try:
            async with self.session.post(self.url, json=body) as r:
                if r.status == 429:
                    ra = r.headers.get("Retry-After")
                    raise ModelError("rate_limit", "HTTP 429", retry_after=float(ra) if ra else None, status=429)
                if r.status >= 500:
                    raise ModelError("server_error", f"HTTP {r.status}", status=r.status)
                if r.status >= 400:
                    raise ModelError("bad_request", f"HTTP {r.status}", status=r.status)
                data = await r.json()
        except aiohttp.ClientError as e:
            raise ModelError("connection", type(e).__name__) from None
        choice = data["choices"][0]
        usage = data.get("usage") or {}
        return Response(choice["message"]["content"], choice.get("finish_reason"), usage.get("prompt_tokens"),
                        usage.get("completion_tokens"), time.perf_counter() - t0)

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()
