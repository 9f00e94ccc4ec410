"""`trustmh run --models FILE`: the tested models listed in a TOML file, so that a comparison of many
models is one readable command. Each `[[model]]` table names a spec and, optionally, the server that
answers it, a label and a group (such as "general" or "mental-health") that the report shows; for example

    [[model]]
    spec = "openai/Qwen3-8B"
    base_url = "http://127.0.0.1:8000/v1"
    label = "Qwen3 8B"
    group = "general"

A top-level `judge` names the run's judge, or its judge panel (`judge = ["openai/gpt-4.1",
"anthropic/claude-sonnet-4-5"]`, each optionally SPEC@URL, or `[[judge]]` tables with spec and base_url),
instead of --judge.

The file is read as data (tomllib), never run; anything else in it is an error naming the entry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError

MAX_BYTES = 1 << 20  # a list of models, not a data set
MAX_MODELS = 1000
MAX_TEXT = 200  # a label or group is a name shown in a table
KEYS = ("spec", "base_url", "label", "group")


@dataclass(frozen=True)
class ListedModel:
    spec: str
    base_url: str | None = None
    label: str | None = None
    group: str | None = None


def _document(path: Path) -> dict:
    from ..data.loaders import read_user_toml
    where = f"--models {path}"
    doc = read_user_toml(path, "--models file", MAX_BYTES)  # the one reader of user files
    extra = sorted(set(doc) - {"model", "judge"})
    if extra:
        raise UserError(f"{where}: unknown table or key {extra[0]!r} (only [[model]] entries and judge)")
    return doc


def read_models_file(path: Path) -> list[ListedModel]:
    """The models of a --models file, in file order (one-line errors for anything malformed)."""
    where = f"--models {path}"
    entries = _document(path).get("model")
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{where}: no [[model]] entry")
    if len(entries) > MAX_MODELS:
        raise UserError(f"{where}: {len(entries)} models, at most {MAX_MODELS}")
    out: list[ListedModel] = []
    for n, e in enumerate(entries, 1):
        if not isinstance(e, dict):
            raise UserError(f"{where}: model entry {n} is not a table")
        unknown = sorted(set(e) - set(KEYS))
        if unknown:
            raise UserError(f"{where}: model entry {n}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
        for k in KEYS:
            v = e.get(k)
            longest = 4096 if k == "base_url" else MAX_TEXT
            if v is not None and (not isinstance(v, str) or not v.strip() or len(v) > longest
                                  or any(ord(ch) < 32 for ch in v)):
                raise UserError(f"{where}: model entry {n}: {k} must be a short one-line text")
        if e.get("base_url") is not None:
            from ..engine.spec import check_url
            check_url(f"{where}: model entry {n} base_url", e["base_url"])
        if e.get("spec") is None:
            raise UserError(f"{where}: model entry {n} has no spec (e.g. spec = \"openai/gpt-4o-mini\")")
        out.append(ListedModel(e["spec"].strip(), e.get("base_url"), e.get("label"), e.get("group")))
    return out


def model_info(listed: list[ListedModel]) -> dict[str, dict[str, str]]:
    """What results.json records per model for the report (label, group), for the models that have any."""
    return {m.spec: {k: v for k, v in (("label", m.label), ("group", m.group)) if v is not None}
            for m in listed if m.label is not None or m.group is not None}


def read_judges(path: Path) -> list[str]:
    """The judges a --models file names (`judge = "SPEC"`, a list of them for a panel, each optionally
    SPEC@URL, or [[judge]] tables with spec and base_url), as --judge values; [] when it names none."""
    where = f"--models {path}"
    given = _document(path).get("judge")
    if given is None:
        return []
    entries = given if isinstance(given, list) else [given]
    if not entries or len(entries) > 12:
        raise UserError(f"{where}: judge must name one to 12 judges")
    out = []
    for n, e in enumerate(entries, 1):
        if isinstance(e, dict):
            unknown = sorted(set(e) - {"spec", "base_url"})
            if unknown:
                raise UserError(f"{where}: judge entry {n}: unknown key {unknown[0]!r} (known: spec, base_url)")
            spec, url = e.get("spec"), e.get("base_url")
        else:
            spec, url = e, None
        for k, v in (("spec", spec), ("base_url", url)):
            if (k == "spec" or v is not None) and (not isinstance(v, str) or not v.strip() or len(v) > 4096
                                                  or any(ord(ch) < 32 for ch in v)):
                raise UserError(f"{where}: judge entry {n}: {k} must be a short one-line text")
        if url is not None:
            from ..engine.spec import check_url
            check_url(f"{where}: judge entry {n} base_url", url)
        out.append(f"{spec.strip()}@{url}" if url else spec.strip())
    return out
