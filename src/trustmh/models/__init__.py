"""Model backends, selected by a `provider/name` spec. Each provider is a small function registered with
`@register_model("name")` that imports its backend (and SDK) only when called, so that `import trustmh`
stays light (no SDKs, no torch). Other packages add providers the same way, through the `trustmh.models`
entry-point group (see plugins.py), loaded here when a spec names a provider not registered yet."""

from __future__ import annotations

import difflib
import urllib.parse
from typing import Callable

from ..errors import UserError
from ..plugins import MODEL_GROUP, entry_points, _load as load_entry_point
from ..redaction import env_secrets, redact_url
from . import hf_files
from .base import Model, endpoint_id, env_value as _env_value, normalize_url

# provider name -> factory(name, *, spec, base_url, timeout, seed, purpose, transport, max_connections) -> Model
PROVIDERS: dict[str, Callable[..., Model]] = {}
# provider name -> what its models say before one is built (the dry run): (answers_by_body, answers_by_id)
PROVIDER_ANSWERS: dict[str, tuple[bool, bool]] = {}
BASELINES = ("refuse", "random", "counselor")


def register_model(provider: str, *, answers_by_body: bool = True, answers_by_id: bool = False) -> Callable:
    """Register a model provider: `@register_model("echo")` on a function that takes the part of the spec
    after `echo/` and keyword options (spec, base_url, timeout, seed, purpose, transport,
    max_connections; accept **options) and returns a Model. Import SDKs inside the function.
    `answers_by_body` and `answers_by_id` say before any model is built what its models' attributes of
    those names will (Model: single flight, a recording), for the dry run."""
    if not provider or "/" in provider:
        raise ValueError(f"a provider name is one word without '/', not '{provider}'")

    def decorate(factory: Callable[..., Model]) -> Callable[..., Model]:
        if PROVIDERS.get(provider, factory) is not factory:
            raise ValueError(f"model provider registered twice: {provider}")
        PROVIDERS[provider] = factory
        PROVIDER_ANSWERS[provider] = (answers_by_body, answers_by_id)
        return factory
    return decorate


def answers_by_body(spec: str) -> bool:
    """Whether `spec`'s models answer by body (Model.answers_by_body), read from its provider's registration:
    a provider not loaded now (a plugin's, when a run is re-read) is taken to, as most do."""
    return PROVIDER_ANSWERS.get(spec.partition("/")[0], (True, False))[0]


def answers_by_id(spec: str) -> bool:
    """Whether `spec`'s models are recordings answering by task and item id (Model.answers_by_id)."""
    return PROVIDER_ANSWERS.get(spec.partition("/")[0], (True, False))[1]


def split_spec(spec: str) -> tuple[str, str]:
    provider, sep, name = spec.partition("/")
    if not sep or not name:
        raise UserError(f"model spec '{spec}' must look like provider/name, e.g. openai/gpt-4o-mini, "
                        f"baseline/counselor, replay/outputs.jsonl")
    if provider not in PROVIDERS:
        if load_model_plugin(provider):
            return provider, name
        known = list(dict.fromkeys([*PROVIDERS, *model_plugin_names()]))
        close = difflib.get_close_matches(provider, known, n=2, cutoff=0.4)
        hint = f" (did you mean {close[0]}/{name}?)" if close else ""
        raise UserError(f"unknown model provider '{provider}' in '{spec}'{hint}; "
                        f"providers: {', '.join(known)}")
    return provider, name


def load_model_plugin(provider: str) -> bool:
    """Import the `trustmh.models` entry point named `provider`, if one is installed. An entry point may
    name a module that uses @register_model, or a factory function, which is registered under its name."""
    for ep in entry_points(MODEL_GROUP):
        if ep.name == provider:
            obj = load_entry_point(ep)
            if provider not in PROVIDERS and callable(obj):
                register_model(provider)(obj)
            return provider in PROVIDERS
    return False


def model_plugin_names() -> list[str]:
    return [ep.name for ep in entry_points(MODEL_GROUP)]


def _has_userinfo(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    return parts.username is not None or parts.password is not None


# What the SDKs read when no base URL is given; honoured the same way by every transport.
BASE_URL_VARS = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


def resolve_base_url(spec: str, base_url: str | None) -> str | None:
    """The base URL a model is asked at: the one given (--base-url), else the provider's variable, as the
    official SDKs do. Both building a model and keying its stored replies go through here."""
    name = BASE_URL_VARS.get(spec.partition("/")[0])
    return base_url or (_env_value(name) if name else None) or None


class ModelRef:
    """Spec and endpoint id of a model, without building a client (for scoring from the store).

    An hf/ model's endpoint is its content fingerprint (models/hf_files.py): pass the one recorded when
    the replies were made (`fingerprint`), or it is taken from the files now (a few stats once hashed),
    which needs the model folder, or the hub's cached snapshot, to be here."""

    def __init__(self, spec: str, base_url: str | None = None, *, fingerprint: str | None = None):
        self.spec = spec
        self.fingerprint = fingerprint
        if spec.startswith("hf/"):
            from .hf import hf_endpoint
            if self.fingerprint is None:
                self.fingerprint = hf_files.fingerprint(hf_files.model_dir(split_spec(spec)[1])).digest
            self.endpoint = hf_endpoint(self.fingerprint)
        else:
            self.endpoint = endpoint_id(spec, resolve_base_url(spec, base_url))


def model_identity(spec: str) -> dict | None:
    """For an hf/ model, what identifies it beyond its spec (hf_files.identity(): fingerprint, files,
    chat template, torch/transformers versions), without loading it; None for other providers. A run
    records it per model and refuses to continue with a different one (hf_files.check_unchanged)."""
    provider, name = split_spec(spec)
    if provider != "hf":
        return None
    return hf_files.identity(hf_files.model_dir(name))


_env_key = _env_value
# Sent as headers by every openai/ transport (the SDK reads them itself).
HEADER_VARS = ("OPENAI_ORG_ID", "OPENAI_PROJECT_ID")


def make_model(spec: str, *, base_url: str | None = None, timeout: float = 120.0, seed: int = 0,
               purpose: str = "model", transport: str = "http", max_connections: int | None = None,
               batch_size: int | None = None) -> Model:
    """Build the backend for a spec. API keys come from the environment only. `transport` (http, aiohttp or sdk)
    and `max_connections` (the HTTP pool's size) apply to openai/ models, `batch_size` (None: adapted to
    measured throughput) to hf/ models; none is part of the endpoint's identity, so they never change a
    cache key."""
    provider, name = split_spec(spec)
    base_url = resolve_base_url(spec, base_url)
    if base_url and _has_userinfo(base_url):
        # Bearer-key APIs cannot also take user:password@ credentials (aiohttp and httpx refuse both), and
        # a URL with a password in it would end up in shell history and logs.
        raise UserError(f"the base URL for {spec} contains credentials ({redact_url(base_url)} with user:password@); "
                        f"remove them and put the key in the provider's environment variable")
    model = PROVIDERS[provider](name, spec=spec, base_url=base_url, timeout=timeout, seed=seed, purpose=purpose,
                                transport=transport, max_connections=max_connections, batch_size=batch_size)
    if getattr(model, "base_url", None) is None:
        model.base_url = base_url  # Model.endpoint keys a plugin's replies by where they came from
    return model


# --- the built-in providers --------------------------------------------------------------------------

# The flag that gives each role its own server: a key hint names the one that applies.
_URL_FLAG = {"judge": "--judge-base-url", "proxy": "--proxy-judge-base-url", "user": "--user-model-base-url"}
_ROLE = {"proxy": "proxy judge", "user": "simulated person (--user-model)"}


@register_model("openai")
def _openai(name: str, *, spec: str, base_url: str | None, timeout: float, purpose: str, transport: str,
            max_connections: int | None, **_: object) -> Model:
    for var in HEADER_VARS:
        _env_value(var)  # refused now, by name, rather than as a broken request later
    key = _env_key("OPENAI_API_KEY")
    if not key and not base_url:
        raise UserError(f"{_ROLE.get(purpose, purpose)} {spec} needs an API key: set OPENAI_API_KEY (or pass "
                        f"{_URL_FLAG.get(purpose, '--base-url')} for a local OpenAI-compatible server)")
    from .openai_api import OpenAIModel
    return OpenAIModel(spec, name, api_key=key or "not-needed", base_url=base_url, timeout=timeout,
                       transport=transport, max_connections=max_connections)


@register_model("anthropic")
def _anthropic(name: str, *, spec: str, base_url: str | None, timeout: float, purpose: str, **_: object) -> Model:
    key = _env_key("ANTHROPIC_API_KEY")
    if not key and not base_url:
        raise UserError(f"{_ROLE.get(purpose, purpose)} {spec} needs an API key: set ANTHROPIC_API_KEY (or pass "
                        f"{_URL_FLAG.get(purpose, '--base-url')} for an Anthropic-compatible server)")
    from .anthropic_api import AnthropicModel
    return AnthropicModel(spec, name, api_key=key or "not-needed", base_url=base_url, timeout=timeout)


@register_model("replay", answers_by_body=False, answers_by_id=True)
def _replay(name: str, *, spec: str, **_: object) -> Model:
    from .replay import ReplayModel
    return ReplayModel(spec, name)


@register_model("transcripts", answers_by_body=False, answers_by_id=True)
def _transcripts(name: str, *, spec: str, **_: object) -> Model:
    from .transcripts import TranscriptsModel
    return TranscriptsModel(spec, name)


@register_model("baseline", answers_by_body=False)
def _baseline(name: str, *, spec: str, seed: int, **_: object) -> Model:
    from .baselines import make_baseline
    return make_baseline(spec, name, seed=seed)


@register_model("hf")
def _hf(name: str, *, spec: str, batch_size: int | None = None, **_: object) -> Model:
    from .hf import HFModel  # torch and transformers load here, only for hf/ models
    return HFModel(spec, name, batch_size=batch_size)


def unsendable_params(spec: str) -> tuple[str, ...]:
    """Generation parameters the backend for `spec` cannot pass to its provider (so the run's settings
    did not apply to it). Only anthropic/ has any today. Read from the spec's prefix alone: re-scoring a run
    whose model came from a plugin that is not loaded now must not need that plugin."""
    if spec.partition("/")[0] == "anthropic":
        from .anthropic_api import unsendable_params as anthropic_unsendable
        return anthropic_unsendable()
    return ()


__all__ = ["Model", "ModelRef", "answers_by_body", "answers_by_id", "endpoint_id", "env_secrets", "make_model", "model_identity", "normalize_url",
           "redact_url", "register_model", "resolve_base_url", "split_spec", "unsendable_params", "PROVIDERS"]
