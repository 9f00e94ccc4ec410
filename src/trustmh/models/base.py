"""The model interface every backend implements, and what every backend shares: the identity of an
endpoint in cache keys, and values read from the environment."""

from __future__ import annotations

import functools
import os
import urllib.parse
from typing import ClassVar

from ..errors import UserError
from ..redaction import redact_url
from ..types import Request, Response

# Providers that never use a base URL: their spec alone is their endpoint.
_LOCAL_PROVIDERS = ("hf", "replay", "baseline")
TRANSPORTS = ("http", "aiohttp", "sdk")  # how openai/ models send requests (RunSpec.transport)


def normalize_url(url: str) -> str:
    """One spelling per server, so that it keys the cache once: scheme and host in lower case, no default
    port, no trailing slash, and nothing redact_url removes (HTTPS://API.Example.com:443/v1/ is
    https://api.example.com/v1). The scheme stays: http and https may be two servers."""
    url = redact_url(url) or ""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != {"http": 80, "https": 443}.get(scheme):
        netloc += f":{port}"
    return urllib.parse.urlunsplit((scheme, netloc, parts.path.rstrip("/"), "", ""))


def endpoint_id(spec: str, base_url: str | None) -> str:
    """The identity of an endpoint in cache keys: the same model name on two servers is two models, and
    two spellings of one server (case, trailing slash, default port) are one."""
    provider = spec.partition("/")[0]
    # Providers that never use a base URL keep their spec (a stray --base-url changes nothing for them);
    # every other one, a plugin's included, is asked at its URL.
    return f"{spec}@{normalize_url(base_url)}" if base_url and provider not in _LOCAL_PROVIDERS else spec


def env_value(name: str) -> str | None:
    """A value from the environment that goes into an HTTP header or URL (a key, OPENAI_ORG_ID), without
    the surrounding whitespace a value read from a file (`export KEY=$(cat key.txt)`) often carries. A
    line break or NUL inside would split the header it goes into, so that is refused at start-up, by the
    variable's name, never by showing the value."""
    value = (os.environ.get(name) or "").strip()
    if any(c in value for c in "\r\n\0"):
        raise UserError(f"{name} contains a line break or NUL character; set it to the value alone")
    return value or None


class Model:
    """An endpoint that turns a Request into a Response or raises ModelError.

    `cacheable` models (paid APIs, local GPUs) have their responses stored and never asked twice;
    replay files and baselines are cheap and deterministic, so they are re-read instead."""

    cacheable: ClassVar[bool] = True
    # Whether the endpoint bounds the requests in flight and retries them: an API, or a local model that
    # batches what is in flight (hf/); the offline models (baselines, recordings) answer at once.
    remote: ClassVar[bool] = True
    # Whether its replies are looked up by task and item id (a replay file) rather than generated: the run
    # then calls its `check_ids(known, registered)` with the data's ids before any request.
    answers_by_id: ClassVar[bool] = False
    # Single flight: the reply depends on the request's body alone, so identical bodies (several samples
    # asking the same, at once or apart) are sent once and the reply handed to each (engine/_endpoint.py
    # `flight_key`). A recording answers by sample, and the offline baselines are free: they say False.
    # The dry run, which builds no model, reads the provider's registration (`register_model`).
    answers_by_body: ClassVar[bool] = True

    base_url: str | None = None  # where it is asked; make_model sets it
    # The max_tokens the backend sends when a request names none (None: it sends none, and the server's own
    # limit applies): --max-cost reserves a reply's worst case by it (engine/_budget.py).
    default_max_tokens: ClassVar[int | None] = None

    def __init__(self, spec: str):
        self.spec = spec

    @functools.cached_property  # read for every request's cache key; the URL never changes
    def endpoint(self) -> str:
        """Identity used in cache keys and for the per-endpoint worker pool: the spec, and the server it is
        asked at (the same name on two servers is two models)."""
        return endpoint_id(self.spec, self.base_url)

    async def generate(self, request: Request) -> Response:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None
