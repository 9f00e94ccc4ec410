"""Finished runs read back from disk: results.json checked against its samples.jsonl, the models of
several runs as labelled entries, a model's scored rows per task (streamed, numbers and labels only),
and the context a run was scored in. The report, `compare`, `gate` and `panel` read runs through here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from .data.loaders import file_sha256
from .errors import UserError
from .metrics import Table
from .results import RunResults

if TYPE_CHECKING:
    from .tasks import RunContext

Key = tuple[str, str]  # (item_id, variant)


@dataclass
class Run:
    dir: Path
    results: RunResults

    @property
    def samples_path(self) -> Path:
        return self.dir / "samples.jsonl"

    @property
    def id(self) -> str:
        return self.results.run_id

    def iter_samples(self) -> Iterator[dict[str, Any]]:
        """samples.jsonl, one record at a time (a large run is never loaded whole)."""
        if not self.samples_path.is_file():
            return
        # Bytes that are not UTF-8 show as U+FFFD instead of stopping the report with a traceback.
        with self.samples_path.open(encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{self.samples_path}:{lineno}: invalid JSON ({e.msg})") from None
                except (ValueError, RecursionError) as e:  # 5,000 digits; nesting past the parser's depth
                    why = "nested too deeply" if isinstance(e, RecursionError) else str(e)[:120]
                    raise UserError(f"{self.samples_path}:{lineno}: unreadable JSON ({why})") from None
                problem = _sample_shape(rec)
                if problem:  # a crafted or damaged file: one line naming it, not a traceback in the report
                    raise UserError(f"{self.samples_path}:{lineno}: {problem}")
                yield rec


# The fields a reader of samples.jsonl walks into, and the JSON type each must have when present.
_SAMPLE_FIELDS = {"values": dict, "judge": dict, "unscored": dict, "messages": list, "notes": list}


def _sample_shape(rec: Any) -> str | None:
    if not isinstance(rec, dict):
        return "not a sample record (expected a JSON object)"
    for name, kind in _SAMPLE_FIELDS.items():
        if rec.get(name) is not None and not isinstance(rec[name], kind):
            return f"field '{name}' must be a JSON {'object' if kind is dict else 'array'}"
    return None


def load_run(path: Path | str) -> Run:
    """A run directory, or the path of its results.json."""
    path = Path(path)
    file = path if path.is_file() else path / "results.json"
    if not file.is_file():
        raise UserError(f"{path}: not a trustmh run (no results.json)")
    try:
        results = RunResults.model_validate_json(file.read_text(encoding="utf-8"))
    except ValueError as e:
        raise UserError(f"{file}: not a valid results.json ({_first_problem(e)})") from None
    run = Run(file.parent, results)
    expected = results.outputs.get("samples_sha256")
    if expected and run.samples_path.is_file() and file_sha256(run.samples_path) != expected:
        raise UserError(f"{run.samples_path} does not belong to {file} (the run was interrupted while writing "
                        f"them); rerun the same trustmh command to rewrite both")
    return run


def _first_problem(e: ValueError) -> str:
    """Where and what, from a pydantic error (`models.m.tasks.t.value: Input should be a finite number`)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"[:300]
        except Exception:  # noqa: BLE001 - fall back to the text
            pass
    return str(e).splitlines()[0][:300]


@dataclass
class Entry:
    """One model of one run: the unit that is ranked and compared."""

    run: Run
    model: str
    label: str
    group: str = ""  # e.g. "general" / "mental-health": the rank table groups its columns by it

    @property
    def result(self):
        return self.run.results.models[self.model]


def entries(runs: list[Run], groups: dict[str, str] | None = None) -> list[Entry]:
    """Every model of every run; a model name seen in two runs is labelled with its run id. A model's group
    comes from `groups` (label or model spec -> group), else from its run's spec (`model_groups`)."""
    pairs = [(r, m) for r in runs for m in r.results.models]
    seen: dict[str, int] = {}
    for _, m in pairs:
        seen[m] = seen.get(m, 0) + 1
    out = []
    for r, m in pairs:
        label = m if seen[m] == 1 else f"{m} @ {r.id}"
        if any(e.label == label for e in out):  # the same run given twice
            label = f"{label} ({len(out)})"
        options = r.results.spec.get("options") or {}
        spec_groups = r.results.spec.get("model_groups") or options.get("model_groups")
        info = options.get("model_info") if isinstance(options.get("model_info"), dict) else {}
        listed = info.get(m) if isinstance(info.get(m), dict) else {}  # `--models FILE`: label and group
        given = (groups or {}).get(label) or (groups or {}).get(m)
        group = (given or (spec_groups.get(m) if isinstance(spec_groups, dict) else None)
                 or listed.get("group") or "")
        out.append(Entry(r, m, label, str(group)))
    return out


# --------------------------------------------------------------------------------------------------
# Per-item rows

@dataclass
class Rows:
    """The scored samples of one model on one task, by (item_id, variant), in data order."""

    values: dict[Key, dict[str, float]] = field(default_factory=dict)
    clusters: dict[Key, str] = field(default_factory=dict)
    labels: dict[Key, dict[str, Any]] = field(default_factory=dict)

    def table(self, keys: list[Key]) -> Table:
        label_names = sorted({k for key in keys for k in self.labels.get(key, {})})
        labels = {n: [self.labels.get(key, {}).get(n) for key in keys] for n in label_names}
        return Table.from_rows([self.values[k] for k in keys], [self.clusters[k] for k in keys], labels)


def read_rows(run: Run, models: set[str] | None = None) -> dict[tuple[str, str], Rows]:
    """(model, task) -> Rows, streamed from samples.jsonl. Only numbers and labels are kept, no text.
    Samples that failed with an error have no values and are left out, as they are from the metrics."""
    out: dict[tuple[str, str], Rows] = {}
    for rec in run.iter_samples():
        if models is not None and rec.get("model") not in models:
            continue
        if rec.get("error") or not isinstance(rec.get("values"), dict):
            continue
        rows = out.setdefault((rec["model"], rec["task"]), Rows())
        key = (str(rec.get("item_id")), rec.get("variant") or "")
        rows.values[key] = {k: float(v) for k, v in rec["values"].items() if isinstance(v, (int, float))}
        # Older samples.jsonl lack clusters and labels: resample by item then.
        rows.clusters[key] = str(rec.get("cluster", key[0]))
        rows.labels[key] = rec.get("labels") or {}
    return out


def run_context(run: Run) -> RunContext:
    """The context a run was scored in, as its results.json says (for re-aggregating its rows)."""
    # Here, not at the top: reading a run (the report, `view`) never needs the tasks registered.
    from .engine.spec import stored_protocol
    from .tasks import RunContext
    spec = run.results.spec
    paper = stored_protocol(spec) == "paper"  # older runs name only the old flag
    return RunContext(seed=int(spec.get("seed", 0) or 0), protocol="paper" if paper else "trustmh",
                      judge=str(spec.get("judge", "rules")), options=dict(spec.get("options") or {}))
