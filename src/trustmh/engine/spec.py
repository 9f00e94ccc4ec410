"""What a run is: the spec that decides its results (and names its directory), the limits that only
decide how fast it gets there, where its data is, and the library versions its results record."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import platform
import re
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping
from urllib.parse import urlsplit

from ..errors import UserError
from ..judges import PAPER_JUDGE, PAPER_PROXY
from ._prices import MAX_REPLY_TOKENS
from ..models import redact_url
from ..models.base import TRANSPORTS
from ..scoring import ALPHA_MIN
from ..tasks import DataSource
from ..tasks.base import selects

SUITES = ("sample", "data")
PROTOCOLS = ("paper", "trustmh")
PRESENTATION = ("model_info",)  # options that only say how results are shown: never in the run's identity
LANGS = ("en", "zh", "all")
DEFAULT_LANG = {"paper": "all", "trustmh": "en"}  # reliability.emotion_recognition's items: as EmoBench runs, or en
TRANSPORT = "http"
# --proxy-judge's value for "the run's judge reads privacy.leakage's question"; a decided spec holds it as None,
# and a spec rebuilt from a decided one (stored, resolved) passes it back so that the default is not re-applied
JUDGE_READS = "rules"
# The typed fields a stored spec keeps under "options", in the order the command line has always set them;
# each is stored only when it is not its default (`_default`), so that runs without it keep their run id.
OPTIONS = ("panel_judges", "min_judge_alpha", "base_urls", "system_prompt", "model_info", "transport", "lang",
           "perturbations", "proxy_judge", "proxy_judge_base_url", "user_model", "user_model_base_url", "turns",
           "runs", "personas", "refusal_classifier")


@dataclass
class RunSpec:
    """Everything that decides the results. Its hash names the run directory. Checked and completed on
    creation (the protocol, the judge, the proxy judge and lang a run leaves out are decided here, from the
    other fields alone), so a bad spec from Python fails as the same one-line error the CLI gives, and
    `RunSpec(...)` from Python asks for the run `trustmh run` would make with the same arguments. `resolve`
    then checks the model specs and records the servers the environment names: the CLI and `trustmh.run`
    both call it."""

    models: list[str]
    judge: str | None = None  # None: the paper's judge under --protocol paper (models that are not all
    # offline baselines), else rules
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
    protocol: str | None = None  # "paper" or "trustmh"; None: paper on real data, trustmh on the sample suite
    methods_dir: str | None = None  # the authors' method files (default <data dir>/methods)
    # --- what a stored spec keeps under "options" (OPTIONS) ---
    panel_judges: list[dict[str, str | None]] = field(default_factory=list)  # a panel's other judges: {judge, base_url}
    min_judge_alpha: float = ALPHA_MIN  # a panel agreeing less than this is marked
    base_urls: dict[str, str] = field(default_factory=dict)  # a model's own server (--model spec@URL)
    system_prompt: str | None = None  # the tested models' system prompt (--system-prompt)
    model_info: dict[str, dict[str, str]] = field(default_factory=dict)  # label and group per model (--models FILE)
    transport: str = TRANSPORT  # how openai/ models send requests
    lang: str | None = None  # reliability.emotion_recognition's items; None: the protocol's (DEFAULT_LANG)
    perturbations: str | None = None  # the robustness perturbations run (None: all)
    proxy_judge: str | None = None  # privacy.leakage's third party under the paper's protocol; None: the run's
    # judge, or the paper's proxy when the judge is the paper's by default; "rules": the run's judge
    proxy_judge_base_url: str | None = None
    # crisis.conversation: the simulated person (None: the run's LLM judge, else an offline scripted one),
    # its server, messages per conversation, conversations per persona (None: VERA-MH's 30 and 5), and the
    # personas (a TSV file or names; None: VERA-MH's)
    user_model: str | None = None
    user_model_base_url: str | None = None
    turns: int | None = None
    runs: int | None = None
    personas: str | None = None
    refusal_classifier: str | None = None  # hf/<path>[#refusal_label=...] deciding refusals

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
        if self.max_tokens is not None and not 1 <= self.max_tokens <= MAX_REPLY_TOKENS:
            raise UserError(f"--max-tokens must be 1 to {MAX_REPLY_TOKENS:,} (tokens of one reply)")
        check_temperature(self.temperature, self.models)
        self._decide_judges()
        if self.lang is None:
            self.lang = DEFAULT_LANG[self.protocol]
        if self.lang not in LANGS:
            raise UserError(f"--lang must be en, zh or all, not '{self.lang}'")
        if self.transport not in TRANSPORTS:
            raise UserError(f"--transport must be {', '.join(TRANSPORTS[:-1])} or {TRANSPORTS[-1]}, "
                            f"not '{self.transport}'")
        if isinstance(self.min_judge_alpha, bool) or not isinstance(self.min_judge_alpha, (int, float)) \
                or not (math.isfinite(self.min_judge_alpha) and -1 <= self.min_judge_alpha <= 1):
            raise UserError(f"--min-judge-alpha must be a number from -1 to 1, not {self.min_judge_alpha}")
        if self.system_prompt is not None and not (isinstance(self.system_prompt, str) and self.system_prompt.strip()):
            raise UserError("--system-prompt must be a non-empty text (the tested models' system prompt)")
        if not (isinstance(self.panel_judges, list) and all(
                isinstance(j, dict) and isinstance(j.get("judge"), str) and isinstance(j.get("base_url"), (str, type(None)))
                for j in self.panel_judges)):
            raise UserError("panel_judges must be a list of {judge, base_url} entries")
        if self.user_model_base_url and not self.user_model:
            raise UserError("--user-model-base-url needs --user-model")
        given = {"perturbations": self.perturbations, "turns": self.turns, "runs": self.runs}
        if any(v is not None for v in given.values()):  # an option not given is refused by no task: a run
            # without them imports no pillar for this (the registry's tasks are imported to be read)
            from ..tasks import TASKS  # each task refuses the options it reads and cannot take, in one line, here
            checked = set()
            for cls in TASKS.values():
                if cls.check_options.__func__ not in checked:  # the robustness tasks share one check
                    checked.add(cls.check_options.__func__)
                    cls.check_options(given)
        if self.refusal_classifier:
            from ..judges.hf_classifier import parse_spec
            parse_spec(self.refusal_classifier)  # a malformed spec is a one-line error before anything runs
        for flag, url in (("--base-url", self.base_url), ("--judge-base-url", self.judge_base_url),
                          ("--proxy-judge-base-url", self.proxy_judge_base_url),
                          ("--user-model-base-url", self.user_model_base_url),
                          *(("--base-url", u) for u in self.base_urls.values()),
                          *(("--judge-base-url", j.get("base_url")) for j in self.panel_judges)):
            check_url(flag, url)

    def _decide_judges(self) -> None:
        """Under the paper's protocol each judging role keeps the paper's model unless its own flag names
        another: the judge (`--judge`) and privacy.leakage's third party, the proxy (`--proxy-judge`), so that
        naming only the judge never drops the paper's proxy. The proxy is recorded whenever the judge is the
        paper's default (as runs always have: their ids stay), and for a named LLM judge where
        privacy.leakage runs (a run without it keeps its id). `--judge rules` judges offline, the proxy's
        question too (a paid proxy is never what an offline judge should bring), and so does the offline
        default once data is present: baselines are judged by the rules unless a judge is named."""
        paper = self.protocol == "paper"
        named = self.judge is not None
        if not named:
            self.judge = PAPER_JUDGE if paper and not self.offline_models else "rules"
        if (self.proxy_judge is None and paper and self.judge != "rules"
                and (not named or selects(self.tasks, "privacy.leakage"))):
            self.proxy_judge = PAPER_PROXY
        if self.proxy_judge in ("", JUDGE_READS):  # the run's judge reads it: nothing to record
            self.proxy_judge = None
        if self.proxy_judge is None:
            self.proxy_judge_base_url = None

    def roles(self) -> dict[str, dict[str, Any]]:
        """Which model plays each judging role, the paper's model for it, and whether they are the same (the
        dry run prints it, results.json keeps it as `roles`). The proxy is a role only under the paper's
        protocol; where none is recorded the run's judge plays it."""
        cast = {"judge": (self.judge, PAPER_JUDGE)}
        if self.protocol == "paper":
            cast["proxy_judge"] = (self.proxy_judge or self.judge, PAPER_PROXY)
        return {role: {"model": model, "paper_model": paper, "is_paper": model == paper}
                for role, (model, paper) in cast.items()}

    @property
    def offline_models(self) -> bool:
        return all(m.startswith("baseline/") for m in self.models)

    @property
    def options(self) -> Mapping[str, Any]:
        """The options as a stored spec holds them (read-only): each typed option that is not its default."""
        return MappingProxyType({name: getattr(self, name) for name in OPTIONS if not self._default(name)})

    def _default(self, name: str) -> bool:
        value = getattr(self, name)
        if name == "lang":
            return value == DEFAULT_LANG[self.protocol]
        if name == "min_judge_alpha":
            return value == ALPHA_MIN
        if name == "transport":
            return value == TRANSPORT
        return not value

    def model_base_url(self, model: str) -> str | None:
        """The server `model` is asked at: its own (`--model spec@URL`, or a --base-url paired with it), else
        the run's."""
        return self.base_urls.get(model) or self.base_url

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> RunSpec:
        """A spec as `to_json` stored it, including one of a run that names its protocol only by the old flag."""
        d = dict(stored)
        d["protocol"] = stored_protocol(d)
        d.pop(_LEGACY_FLAG, None)
        options = d.pop("options", None) or {}
        if not isinstance(options, dict) or set(options) - set(OPTIONS):
            unknown = sorted(options) if isinstance(options, dict) else []
            raise UserError(f"the stored spec's options hold what this trustmh does not know "
                            f"({', '.join(map(str, unknown[:4])) or 'not a mapping'})")
        # Decided when it was stored: no proxy there means the run's judge read privacy.leakage's question,
        # whatever today's default would add.
        return cls(**d, **{"proxy_judge": JUDGE_READS, **options})

    def to_json(self) -> dict[str, Any]:
        """The spec as stored and published: base URLs lose any embedded credentials. It still carries the
        old `upstream_compat` flag (true exactly under the paper's protocol), where it always stood, and the
        options as one mapping: the run id is a hash of this form, so runs keep their directories and
        results.json its spec block."""
        options = dict(self.options)
        if "base_urls" in options:
            options["base_urls"] = {m: redact_url(u) for m, u in self.base_urls.items()}
        if "panel_judges" in options:
            options["panel_judges"] = [dict(j, base_url=redact_url(j.get("base_url"))) for j in self.panel_judges]
        return {"models": self.models, "judge": self.judge, "tasks": self.tasks, "seed": self.seed,
                "limit": self.limit, "suite": self.suite, "data_dir": self.data_dir,
                "base_url": redact_url(self.base_url), "judge_base_url": redact_url(self.judge_base_url),
                "temperature": self.temperature, "max_tokens": self.max_tokens,
                _LEGACY_FLAG: self.protocol == "paper", "n_boot": self.n_boot, "options": options,
                "protocol": self.protocol, "methods_dir": self.methods_dir}

    def run_id(self) -> str:
        d = self.to_json()
        # How the report names and groups models (--models FILE) is not part of what decides the results.
        d["options"] = {k: v for k, v in d["options"].items() if k not in PRESENTATION}
        blob = json.dumps(d, sort_keys=True).encode()
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", self.models[0].split("/", 1)[-1]).strip("-.")[:40] or "run"
        return f"{slug}-{hashlib.sha256(blob).hexdigest()[:10]}"


MAX_JUDGES = 12  # a panel of judges, not a grid of models


def check_judges(judges: list[tuple[str, str | None]]) -> None:
    """A run's LLM judges, (spec, base URL) each, the first `RunSpec.judge`: one, or a panel of models."""
    if not judges:
        raise UserError("a run needs a judge (a model spec, or rules)")
    if len(judges) > MAX_JUDGES:
        raise UserError(f"{len(judges)} judges; a panel has at most {MAX_JUDGES}")
    names = [j for j, _ in judges]
    if len(judges) > 1 and "rules" in names:
        raise UserError("--judge rules cannot be part of a panel: a panel's judges are models (name them all, "
                        "or give --judge rules alone)")
    dup = next((j for i, j in enumerate(names) if j in names[:i]), None)
    if dup is not None:
        raise UserError(f"--judge {dup} is given twice; a panel names each judge once")
    for _, url in judges:
        check_url("--judge-base-url", url)


def resolve(spec: RunSpec) -> RunSpec:
    """The run `spec` asks for, as `trustmh run` and `trustmh.run` both start it: every model and judge spec
    checked (its provider known), and a server named only by the environment (OPENAI_BASE_URL,
    ANTHROPIC_BASE_URL) recorded for the models, the judges, the proxy judge and the simulated person, so that results say where
    replies came from and a later `score` in another environment finds the same stored calls. A stored
    spec is never resolved again: `trustmh score` reads it as it was. Resolving twice changes nothing."""
    from ..models import resolve_base_url, split_spec
    for m in spec.models:
        split_spec(m)
    judges = []
    for j, url in [(spec.judge, spec.judge_base_url), *((j["judge"], j.get("base_url")) for j in spec.panel_judges)]:
        if j != "rules":
            split_spec(j)
        judges.append((j, None if j == "rules" else resolve_base_url(j, url)))
    proxy_url = user_url = None
    if spec.proxy_judge:
        split_spec(spec.proxy_judge)
        proxy_url = resolve_base_url(spec.proxy_judge, spec.proxy_judge_base_url)
    if spec.user_model:
        split_spec(spec.user_model)
        user_url = resolve_base_url(spec.user_model, spec.user_model_base_url)
    check_judges(judges)
    return replace(spec, base_url=resolve_base_url(spec.models[0], spec.base_url), judge_base_url=judges[0][1],
                   panel_judges=[{"judge": j, "base_url": u} for j, u in judges[1:]], proxy_judge_base_url=proxy_url,
                   user_model_base_url=user_url, proxy_judge=spec.proxy_judge or JUDGE_READS)  # decided: kept


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
    budget: Any = None  # --max-cost: an engine._budget.Budget every endpoint reserves each call's cost from


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


@functools.cache
def package_versions() -> Mapping[str, str]:
    """The installed versions of trustmh and the libraries its numbers rest on, looked up once per process:
    each lookup scans sys.path's distributions (~10 ms for the six), which a run does while it waits for
    its first replies (engine/run.py) rather than after its last. A package upgraded under a running
    process does not change the code it has imported, so the first answer stays the right one."""
    out = {}
    for pkg in ("trustmh", "openai", "anthropic", "numpy", "scipy", "pydantic"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    return MappingProxyType(out)


def versions(spec: RunSpec | None = None) -> dict[str, str]:
    out = {"python": platform.python_version(), **package_versions()}
    if spec is not None and any(m.startswith("hf/") for m in [*spec.models, spec.judge]):
        from ..models.hf_files import library_versions  # the same weights can answer differently under another
        out.update(library_versions())
    return out
