"""What a run is: the spec that decides its results (and names its directory), the limits that only
decide how fast it gets there, where its data is, and the library versions its results record."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import platform
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import UserError
from ..models import redact_url
from ..tasks import DataSource

SUITES = ("sample", "data")
PROTOCOLS = ("paper", "trustmh")
PRESENTATION = ("model_info",)  # options that only say how results are shown: never in the run's identity


@dataclass
class RunSpec:
    """Everything that decides the results. Its hash names the run directory. Checked on creation, so a
    bad spec from Python fails as the same one-line error the CLI gives."""

    models: list[str]
    judge: str = "rules"
    tasks: str = "all"
    seed: int = 0
    limit: int | None = None
    suite: str = "sample"  # "sample" or "data"
    data_dir: str | None = None
    base_url: str | None = None
    judge_base_url: str | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    n_boot: int = 1000
    options: dict[str, Any] = field(default_factory=dict)
    protocol: str | None = None  # "paper" or "trustmh"; None: paper on real data, trustmh on the sample suite
    methods_dir: str | None = None  # the authors' method files (default <data dir>/methods)

    def __post_init__(self) -> None:
        if self.protocol is None:
            self.protocol = "paper" if self.suite == "data" else "trustmh"
        if self.protocol not in PROTOCOLS:
            raise UserError(f"--protocol must be paper or trustmh, not '{self.protocol}'")
        if self.protocol == "paper" and self.suite == "sample":
            raise UserError("the built-in sample suite has no method files, so it runs --protocol trustmh; use real "
                            "data (`trustmh data pull`) for the paper's protocol")
        if isinstance(self.models, str) or not self.models:
            raise UserError("a run needs at least one model (a list of specs such as ['baseline/counselor'])")
        if self.limit is not None and self.limit < 1:
            raise UserError("--limit must be at least 1")
        if self.suite not in SUITES:
            raise UserError(f"suite must be sample or data, not '{self.suite}'")
        if self.suite == "data" and not self.data_dir:
            raise UserError("suite 'data' needs a data directory (data_dir)")
        if self.n_boot < 0:
            raise UserError("--bootstrap must not be negative")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UserError("--max-tokens must be at least 1")
        check_temperature(self.temperature, self.models)
        system = self.options.get("system_prompt")
        if system is not None and not (isinstance(system, str) and system.strip()):
            raise UserError("options.system_prompt must be a non-empty string (the tested models' system prompt)")
        panel = self.options.get("panel_judges")  # a judge panel's other judges (engine/judges.py)
        if panel is not None and not (isinstance(panel, list) and all(
                isinstance(j, dict) and isinstance(j.get("judge"), str) and isinstance(j.get("base_url"), (str, type(None)))
                for j in panel)):
            raise UserError("options.panel_judges must be a list of {judge, base_url} entries")
        for flag, url in (("--base-url", self.base_url), ("--judge-base-url", self.judge_base_url),
                          *(("--base-url", u) for u in (self.options.get("base_urls") or {}).values()),
                          *(("--judge-base-url", j.get("base_url")) for j in self.options.get("panel_judges") or ())):
            check_url(flag, url)

    def model_base_url(self, model: str) -> str | None:
        """The server `model` is asked at: its own (`--model spec@URL`, or a --base-url paired with it), else
        the run's. Kept in options, and only when given, so that runs without them keep their run id."""
        return (self.options.get("base_urls") or {}).get(model) or self.base_url

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> RunSpec:
        """A spec as `to_json` stored it, including one of a run that names its protocol only by the old flag."""
        d = dict(stored)
        d["protocol"] = stored_protocol(d)
        d.pop(_LEGACY_FLAG, None)
        return cls(**d)

    def to_json(self) -> dict[str, Any]:
        """The spec as stored and published: base URLs lose any embedded credentials. It still carries the
        old `upstream_compat` flag (true exactly under the paper's protocol), where it always stood: the
        run id is a hash of this form, so runs keep their directories and results.json its spec block."""
        d: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            d[name] = value
            if name == "max_tokens":
                d[_LEGACY_FLAG] = self.protocol == "paper"
        d["base_url"], d["judge_base_url"] = redact_url(self.base_url), redact_url(self.judge_base_url)
        if self.options.get("base_urls"):
            own = self.options["base_urls"]
            d["options"] = dict(self.options, base_urls={m: redact_url(u) for m, u in own.items()})
        if self.options.get("panel_judges"):  # a judge panel's other judges (engine/judges.py)
            d["options"] = dict(d["options"], panel_judges=[dict(j, base_url=redact_url(j.get("base_url")))
                                                            for j in self.options["panel_judges"]])
        return d

    def run_id(self) -> str:
        d = self.to_json()
        # How the report names and groups models (--models FILE) is not part of what decides the results.
        d["options"] = {k: v for k, v in d["options"].items() if k not in PRESENTATION}
        blob = json.dumps(d, sort_keys=True).encode()
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", self.models[0].split("/", 1)[-1]).strip("-.")[:40] or "run"
        return f"{slug}-{hashlib.sha256(blob).hexdigest()[:10]}"


_LEGACY_FLAG = "upstream_compat"  # the protocol's old name, a flag: True meant the paper's


def stored_protocol(spec: dict[str, Any]) -> str | None:
    """The protocol a stored or published spec names; runs from before `protocol` existed name only the
    old flag (paper when set). None: neither (RunSpec picks the suite's default)."""
    if spec.get("protocol") is not None:
        return spec["protocol"]
    return "paper" if spec.get(_LEGACY_FLAG) else None


def check_url(flag: str, url: str | None) -> None:
    """A base URL that cannot be an API root is refused at start-up: otherwise every request fails alone,
    after its retries, and the run learns it only at the end."""
    if url is None:
        return
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{flag} must be an http:// or https:// URL such as http://localhost:8000/v1, not "
                        f"'{redact_url(url)}'")
    # Requests go to <base URL>/chat/completions: a query or fragment would be sent somewhere else than the
    # URL the spec records (and the query is left out of the endpoint's identity).
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise UserError(f"{flag} must not carry a query or fragment ('?...', '#...'): requests are sent to "
                        f"<base URL>/<path>, so give the API root alone, such as http://localhost:8000/v1")


# The sampling temperature the APIs accept: OpenAI-compatible servers 0-2, Anthropic 0-1.
TEMPERATURE_MAX = {"anthropic": 1.0}


def check_temperature(value, models) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 2:
        raise UserError(f"--temperature must be a finite number from 0 to 2, not {value!r}")
    for m in models if isinstance(models, (list, tuple)) else ():
        top = TEMPERATURE_MAX.get(str(m).partition("/")[0])
        if top is not None and value > top:
            raise UserError(f"--temperature {value:g} is outside what {m} accepts (0 to {top:g})")


@dataclass
class Limits:
    max_connections: int = 32
    timeout: float = 120.0
    max_retries: int = 6
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    batch_size: int | None = None  # hf/ models: requests per generate() call (None: adapted to throughput)
    # Stop an endpoint after this many connection failures or 404s in a row (0: never); see Endpoint.
    stop_after: int = 5
    budget: Any = None  # --max-cost: an engine.budget.Budget every endpoint reserves each call's cost from


def describe_limit(limit: int, samples: int, several: dict[str, tuple[int, int]] | None = None) -> str:
    """What `--limit N` took, in items and in samples (one model's): the words every view of a limited run
    uses. `several`: task -> (items, samples) for the tasks whose items make more than one sample each."""
    why = ""
    if several:
        why = " (" + ", ".join(f"{t}: {s:,} from {i:,}" for t, (i, s) in several.items()) + ")"
    return (f"--limit {limit}: the first {limit:,} items of each task, {samples:,} samples per model; an item makes "
            f"several samples where a task asks it several ways{why}")


def limited_banner(results) -> str:
    """A --limit run's banner (terminal and report alike): what it took, in items and samples, or ""."""
    limit = results.spec.get("limit")
    if not limit or not results.models:
        return ""
    samples = max(sum(t.n_samples for t in mr.tasks.values()) for mr in results.models.values())
    return f"SUBSET: {describe_limit(limit, samples)}: not the benchmark's numbers, and their intervals are wide"


def data_source(spec: RunSpec) -> DataSource:
    if spec.suite == "sample":
        return DataSource(Path(__file__).resolve().parents[1] / "data" / "sample", "sample")
    return DataSource(Path(spec.data_dir or "."), "data")


def versions(spec: RunSpec | None = None) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("trustmh", "openai", "anthropic", "numpy", "scipy", "pydantic"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    if spec is not None and any(m.startswith("hf/") for m in [*spec.models, spec.judge]):
        from ..models.hf_files import library_versions  # the same weights can answer differently under another
        out.update(library_versions())
    return out
