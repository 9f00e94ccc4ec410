"""The model interface every backend implements."""

from __future__ import annotations

import functools
from typing import ClassVar

from ..types import Request, Response


class Model:
    """An endpoint that turns a Request into a Response or raises ModelError.

    `cacheable` models (paid APIs, local GPUs) have their responses stored and never asked twice;
    replay files and baselines are cheap and deterministic, so they are re-read instead."""

    cacheable: ClassVar[bool] = True
    # Whether the model needs concurrency limits / retries at all (offline ones do not).
    remote: ClassVar[bool] = True

    base_url: str | None = None  # where it is asked; make_model sets it

    def __init__(self, spec: str):
        self.spec = spec

    @functools.cached_property  # read for every request's cache key; the URL never changes
    def endpoint(self) -> str:
        """Identity used in cache keys and for the per-endpoint worker pool: the spec, and the server it is
        asked at (the same name on two servers is two models)."""
        from . import endpoint_id
        return endpoint_id(self.spec, self.base_url)

    async def generate(self, request: Request) -> Response:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None
