"""Finished runs read back from disk: results.json checked against its samples.jsonl, the models of
several runs as labelled entries, a model's scored rows per task (streamed, numbers and labels only),
and the context a run was scored in. The report, `compare`, `gate` and `panel` read runs through here."""

from __future__ import annotations

import collections
import contextlib
import json
import math
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..data.loaders import file_sha256, nested_deeper_than
from ..errors import UserError
from ..scoring.metrics import Table
from ..scoring.results import RunResults

if TYPE_CHECKING:
    from ..tasks import RunContext

Key = tuple[str, str]  # (item_id, variant)


@dataclass
class Run:
    dir: Path
    results: RunResults
    # Lines of samples.jsonl the last pass over it left out, by reason, and the first line of each: every
    # reader shows them (`skip_note`), and the gate refuses a run that has any.
    skipped: collections.Counter = field(default_factory=collections.Counter)
    skipped_at: dict[str, int] = field(default_factory=dict)
    # read_rows' rows of every model, while `keep_rows` holds them (None: each call reads samples.jsonl again)
    kept_rows: dict | None = field(default=None, repr=False, compare=False)

    @property
    def samples_path(self) -> Path:
        return self.dir / "samples.jsonl"

    @property
    def id(self) -> str:
        return self.results.run_id

    def skip_note(self) -> str | None:
        """What the readers left out of samples.jsonl, in one line; None when nothing."""
        if not self.skipped:
            return None
        why = "; ".join(f"{reason}: {n}" + (f" (first at line {self.skipped_at[reason]})" if reason in self.skipped_at
                                              else "") for reason, n in self.skipped.most_common())
        return f"{self.samples_path}: {sum(self.skipped.values())} lines skipped ({why})"

    def iter_samples(self) -> Iterator[dict[str, Any]]:
        """samples.jsonl, one record at a time (a large run is never loaded whole); a line that is not a
        sample record as `sample_problem` types it is left out and counted (`skipped`), never a crash."""
        if not self.samples_path.is_file():
            return
        this_pass: collections.Counter = collections.Counter()
        # Bytes that are not UTF-8 show as U+FFFD instead of stopping the report with a traceback.
        with self.samples_path.open(encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                rec, problem = parse_sample(line)
                if problem:  # a crafted or damaged file: counted with its line, never a traceback
                    this_pass[problem] += 1
                    self.skipped_at.setdefault(problem, lineno)
                    continue
                yield rec
        for reason, n in this_pass.items():  # readers pass over the file more than once: counted once
            self.skipped[reason] = max(self.skipped[reason], n)


MAX_DEPTH = 64  # a sample record nests a few levels; deeper is a crafted line that would exhaust a recursion
_OPTIONAL_TEXT = ("variant", "response", "cluster", "no_answer", "judge_failed", "finish_reason", "judge_addressed")
_SAMPLE_FIELDS = {"values": dict, "judge": dict, "unscored": dict, "labels": dict, "messages": list, "notes": list}


def parse_sample(line: str | bytes) -> tuple[Any, str | None]:
    """A samples.jsonl line as (record, None), or (None, why it is no sample record)."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        return None, f"invalid JSON ({e.msg})"
    except (ValueError, RecursionError) as e:  # 5,000 digits; nesting past the parser's depth
        return None, f"unreadable JSON ({'nested too deeply' if isinstance(e, RecursionError) else str(e)[:80]})"
    # A value nests no deeper than its text has opening brackets: most lines need no walk for their depth.
    brackets = line.count("{") + line.count("[") if isinstance(line, str) else line.count(b"{") + line.count(b"[")
    return rec, sample_problem(rec, walk_depth=brackets > MAX_DEPTH)


def _finite_number(v: Any) -> bool:
    """A JSON number a float can hold (an integer of 400 digits is none: float() of it raises)."""
    try:
        return type(v) in (int, float) and math.isfinite(v)
    except OverflowError:
        return False


def sample_problem(rec: Any, *, walk_depth: bool = True) -> str | None:
    """Why `rec` is not a sample record every reader can walk into (view, report, compare, gate, panel), or
    None: each field a reader uses has its JSON type, values are finite numbers, labels texts, and the
    record nests at most MAX_DEPTH levels (`walk_depth` False: known already, from its text)."""
    if not isinstance(rec, dict):
        return "not a sample record (expected a JSON object)"
    for name in ("model", "task"):
        if not isinstance(rec.get(name), str):
            return f"field '{name}' must be a text"
    for name, kind in _SAMPLE_FIELDS.items():
        if rec.get(name) is not None and not isinstance(rec[name], kind):
            return f"field '{name}' must be a JSON {'object' if kind is dict else 'array'}"
    item = rec.get("item_id")
    if not isinstance(item, (str, int)) or isinstance(item, bool):
        return "field 'item_id' must be a text or a whole number"
    for name in _OPTIONAL_TEXT:
        if rec.get(name) is not None and not isinstance(rec[name], str):
            return f"field '{name}' must be a text"
    if not all(map(_finite_number, (rec.get("values") or {}).values())):
        return "values must be finite numbers"
    if not all(isinstance(v, str) for v in (rec.get("labels") or {}).values()):
        return "labels must be texts"
    if not all(isinstance(v, str) for v in (rec.get("unscored") or {}).values()):
        return "field 'unscored' must map values to texts"
    if not all(isinstance(v, str) for v in rec.get("notes") or []):
        return "field 'notes' must hold texts"
    judge = rec.get("judge") or {}
    if not all(judge.get(k) is None or isinstance(judge[k], str) for k in ("text", "reason")):
        return "field 'judge' must hold texts"
    if not all(isinstance(m, dict) and isinstance(m.get("role", ""), str)
               and (m.get("content") is None or isinstance(m["content"], str)) for m in rec.get("messages") or []):
        return "field 'messages' must hold messages (role and content texts)"
    error = rec.get("error")
    if error is not None and not (isinstance(error, dict) and all(isinstance(v, (str, type(None)))
                                                                  for v in error.values())):
        return "field 'error' must be an object of texts"
    if walk_depth and nested_deeper_than(rec, MAX_DEPTH):
        return f"nested deeper than {MAX_DEPTH} levels"
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


def model_labels(results: RunResults) -> dict[str, str]:
    """Each model's name as people read it: its `label` from `--models FILE` (results.json keeps it in
    `spec.options.model_info`), else its spec. A label two models share, or that is another model's spec,
    is followed by the spec in brackets, so that no two models of a run read alike."""
    options = results.spec.get("options") or {}
    info = options.get("model_info") if isinstance(options.get("model_info"), dict) else {}
    given = {}
    for m in results.models:
        listed = info.get(m) if isinstance(info.get(m), dict) else {}
        label = listed.get("label")
        given[m] = label.strip() if isinstance(label, str) and label.strip() else m
    out = {}
    for m, label in given.items():
        clash = label != m and (list(given.values()).count(label) > 1 or label in results.models)
        out[m] = f"{label} ({m})" if clash else label
    return out


def entries(runs: list[Run], groups: dict[str, str] | None = None) -> list[Entry]:
    """Every model of every run, each named by its label (`model_labels`); a name seen in two runs is followed
    by its run id. A model's group comes from `groups` (label or model spec -> group), else from its run's spec
    (`model_groups`), else from the models file (`model_info`)."""
    pairs = [(r, m, model_labels(r.results)[m]) for r in runs for m in r.results.models]
    seen: dict[str, int] = {}
    for _, _, name in pairs:
        seen[name] = seen.get(name, 0) + 1
    out = []
    for r, m, name in pairs:
        label = name if seen[name] == 1 else f"{name} @ {r.id}"
        if any(e.label == label for e in out):  # the same run given twice
            label = f"{label} ({len(out)})"
        options = r.results.spec.get("options") or {}
        spec_groups = r.results.spec.get("model_groups") or options.get("model_groups")
        info = options.get("model_info") if isinstance(options.get("model_info"), dict) else {}
        listed = info.get(m) if isinstance(info.get(m), dict) else {}  # `--models FILE`: label and group
        given = (groups or {}).get(label) or (groups or {}).get(name) or (groups or {}).get(m)
        group = (given or (spec_groups.get(m) if isinstance(spec_groups, dict) else None)
                 or listed.get("group") or "")
        out.append(Entry(r, m, label, str(group)))
    return out


# --------------------------------------------------------------------------------------------------
# Per-item rows

class Rows:
    """The scored samples of one model on one task, by (item_id, variant), in data order, held as columns:
    a float array per value and a list per label, each with which rows have it. A dict per sample held
    ~2 KB of Python objects each, ~700 MiB for `trustmh report` of 12 models x the whole benchmark."""

    def __init__(self) -> None:
        self.keys: list[Key] = []  # in data order
        self.index: dict[Key, int] = {}
        self.clusters: list[str] = []
        self.values: dict[str, tuple[array, bytearray]] = {}  # name -> (value per row, NaN if none; has it)
        self.labels: dict[str, tuple[list, bytearray]] = {}  # name -> (label per row, None if none; has it)

    def __contains__(self, key: object) -> bool:
        return key in self.index

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: Key, values: dict[str, float], cluster: str, labels: dict[str, Any]) -> None:
        """A sample's row; a key seen before is replaced (keeping its place)."""
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.keys)
            self.keys.append(key)
            self.clusters.append(cluster)
            for vals, has in self.values.values():
                vals.append(math.nan)
                has.append(0)
            for labs, has in self.labels.values():
                labs.append(None)
                has.append(0)
        else:
            self.clusters[i] = cluster
            for vals, has in self.values.values():
                vals[i], has[i] = math.nan, 0
            for labs, has in self.labels.values():
                labs[i], has[i] = None, 0
        n = len(self.keys)
        for name, v in values.items():
            col = self.values.get(name)
            if col is None:
                col = self.values[name] = (array("d", [math.nan]) * n, bytearray(n))
            col[0][i], col[1][i] = v, 1
        for name, v in labels.items():
            col = self.labels.get(name)
            if col is None:
                col = self.labels[name] = ([None] * n, bytearray(n))
            col[0][i], col[1][i] = v, 1

    def lacking_labels(self) -> dict[str, list[Key]]:
        """Rows without a label that other rows have, by the label's name: a task's groups need it on
        every row (a crafted line without it cannot be placed in one)."""
        return {name: [self.keys[i] for i in range(len(self.keys)) if not has[i]]
                for name, (_, has) in sorted(self.labels.items()) if not all(has)}

    def without(self, drop: set[Key]) -> "Rows":
        """These rows but `drop`."""
        kept = Rows()
        for k in self.keys:
            if k not in drop:
                kept.add(k, self.values_of(k), self.cluster_of(k), self.labels_of(k))
        return kept

    def values_of(self, key: Key) -> dict[str, float]:
        """One row's values, by name ({} for a key not held)."""
        i = self.index.get(key)
        return {} if i is None else {n: vals[i] for n, (vals, has) in self.values.items() if has[i]}

    def labels_of(self, key: Key) -> dict[str, Any]:
        i = self.index.get(key)
        return {} if i is None else {n: labs[i] for n, (labs, has) in self.labels.items() if has[i]}

    def cluster_of(self, key: Key) -> str:
        return self.clusters[self.index[key]]

    def column(self, name: str, keys: list[Key]) -> np.ndarray:
        """One value over `keys`: NaN where a row lacks it or the key is not held."""
        vals, has = self.values.get(name, (None, None))
        idx = [self.index.get(k, -1) for k in keys]
        return np.array([vals[i] if i >= 0 and vals is not None and has[i] else math.nan for i in idx], dtype=float)

    def table(self, keys: list[Key]) -> Table:
        """The rows of `keys` (all of them held here) as a Table: the values and labels any of them has."""
        idx = np.fromiter((self.index[k] for k in keys), dtype=np.intp, count=len(keys))
        columns = {name: np.array(vals, dtype=float)[idx] for name, (vals, has) in sorted(self.values.items())
                   if np.frombuffer(has, dtype=np.uint8)[idx].any()}
        labels = {name: np.array([labs[i] for i in idx.tolist()], dtype=object)
                  for name, (labs, has) in sorted(self.labels.items()) if np.frombuffer(has, dtype=np.uint8)[idx].any()}
        return Table(columns, np.array([self.clusters[i] for i in idx.tolist()], dtype=object), labels)


def may_hold(run: Run, name: str) -> bool:
    """Whether some record of samples.jsonl may have a field `name`, found without parsing a line: its bytes
    hold the name quoted, or a JSON escape (\\u) that could spell it. False means that no record has it, so
    a reader after a field only some tasks write (the conversation curves' chatbot_turns) can skip the file."""
    if not run.samples_path.is_file():
        return False
    needle, tail = json.dumps(name).encode(), b""
    with run.samples_path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            window = tail + chunk
            if needle in window or b"\\u" in window:
                return True
            tail = window[-(len(needle) - 1):]  # a name or escape cut by the chunk's end is found in the next
    return False


@contextlib.contextmanager
def keep_rows(runs: list[Run]) -> Iterator[None]:
    """Within it, `read_rows(run)` of these runs reads samples.jsonl once and gives every later call the same
    rows (not to be changed by the callers): the report's leaderboard ties, rank intervals and conversation
    curves each read every row."""
    for run in runs:
        run.kept_rows = {}
    try:
        yield
    finally:
        for run in runs:
            run.kept_rows = None


def read_rows(run: Run, models: set[str] | None = None) -> dict[tuple[str, str], Rows]:
    """(model, task) -> Rows, streamed from samples.jsonl. Only numbers and labels are kept, no text.
    Samples that failed with an error have no values and are left out, as they are from the metrics.
    Item ids, variants and clusters are interned: every model's rows name the same items."""
    if run.kept_rows is not None and models is None:
        if "all" not in run.kept_rows:
            run.kept_rows["all"] = _read_rows(run, None)
        return run.kept_rows["all"]
    return _read_rows(run, models)


def _read_rows(run: Run, models: set[str] | None) -> dict[tuple[str, str], Rows]:
    rows = _RowsOf(run, models)
    for rec in run.iter_samples():
        rows.add(rec)
    return rows.done()


def rows_on_the_way(run: Run) -> Iterator[dict[str, Any]]:
    """`run.iter_samples()`, building read_rows' rows of every model on the way, which read_rows then gives
    while keep_rows holds the run: a reader that passes over every sample anyway (the report's drill-down)
    spares the rows' readers (rank intervals, ties, conversation curves) a pass of their own, most of whose
    cost is parsing and checking each line again. A pass left unfinished keeps nothing."""
    if run.kept_rows is None or "all" in run.kept_rows:
        yield from run.iter_samples()
        return
    rows = _RowsOf(run, None)
    for rec in run.iter_samples():
        rows.add(rec)
        yield rec
    run.kept_rows["all"] = rows.done()


class _RowsOf:
    """read_rows' rows of one run, built one sample record at a time (`add`, in the file's order; `done`)."""

    def __init__(self, run: Run, models: set[str] | None):
        self.run, self.models = run, models
        self.out: dict[tuple[str, str], Rows] = {}

    def add(self, rec: dict[str, Any]) -> None:
        if self.models is not None and rec.get("model") not in self.models:
            return
        if rec.get("error") or not isinstance(rec.get("values"), dict):
            return
        rows = self.out.get((rec["model"], rec["task"]))
        if rows is None:
            rows = self.out[(rec["model"], rec["task"])] = Rows()
        key = (sys.intern(str(rec.get("item_id"))), sys.intern(str(rec.get("variant") or "")))
        labels = rec.get("labels")
        # Older samples.jsonl lack clusters and labels: resample by item then.
        rows.add(key, {k: float(v) for k, v in rec["values"].items()},
                 sys.intern(str(rec.get("cluster") or key[0])), labels or {})

    def done(self) -> dict[tuple[str, str], Rows]:
        out, run = self.out, self.run
        for where, rows in out.items():  # a line without a label its task's other lines have is left out
            lacking = rows.lacking_labels()
            if lacking:
                drop = {k for keys in lacking.values() for k in keys}
                out[where] = rows.without(drop)
                reason = f"labels missing ({', '.join(lacking)})"
                run.skipped[reason] = max(run.skipped[reason], len(drop))
        return out


def run_context(run: Run) -> RunContext:
    """The context a run was scored in, as its results.json says (for re-aggregating its rows)."""
    # Here, not at the top: reading a run (the report, `view`) never needs the tasks registered.
    from ..engine.spec import stored_protocol
    from ..tasks import RunContext
    spec = run.results.spec
    paper = stored_protocol(spec) == "paper"  # older runs name only the old flag
    return RunContext(seed=int(spec.get("seed", 0) or 0), protocol="paper" if paper else "trustmh",
                      judge=str(spec.get("judge", "rules")), options=dict(spec.get("options") or {}))
