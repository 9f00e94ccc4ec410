"""The report's sample drill-down data: every run's samples.jsonl streamed into compact rows (prompts
de-duplicated), each row given a worst-first sort key where one reply has a score of its own, gold x
prediction counts for categorical tasks, and a bounded sample of the rows kept for the page: the worst of
each model and task, at most `per_task` of them and `max_bytes` of page JSON in all (rows and the prompts
they show). `trustmh view` (report/viewer.py) pages through every sample from the run's own files.

A large run's rows are never held in memory: one pass over samples.jsonl writes each prompt and row as
page-ready JSON to temporary spool files and keeps, per model and task, a bounded set of candidate
rows (`_Bucket`: whichever way its sort keys turn out, its worst rows are among them) and the confusion
counts, and per prompt its place and its number of rows; `SampleSet.json_chunks` then streams the page's JSON
block from the spools, with only the prompts of the rows kept. The chunks join to exactly `script_json`
of the whole payload."""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable, Iterator

from ..analysis.runs import Entry
from .leaderboard import TaskMeta

TEXT_CAP = 4_000  # characters of one text field kept in the page; samples.jsonl (and `trustmh view`) has the rest
PER_TASK = 100  # rows kept per model and task: the worst ones
MAX_BYTES = 20_000_000  # page JSON of the kept rows and their prompts: the page stays well under 25 MB


def _finite(v: Any) -> Any:
    """NaN and infinities have no JSON spelling: null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def script_json(obj: Any) -> str:
    """JSON that cannot end its <script> element or open a comment: <, > and & become \\u escapes
    (they only ever occur inside JSON strings, where the escape means the same character); NaN and
    infinities become null. Compositional: the JSON of a list is "[" + the items' JSON joined by "," + "]",
    which is what lets the page's block be written a row at a time."""
    try:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere: walk the value only then
        text = json.dumps(_finite(obj), ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        if ch in text:
            text = text.replace(ch, esc)
    return text


@dataclass(slots=True)
class _Row:
    """A sample in `trustmh view`'s index (report/viewer.py), which pages through every row: what its sort
    key needs (`_sort_keys`, `_worst_first`)."""

    e: int
    t: int
    pv: Any
    st: str
    p: int = 0
    size: int = 0
    s: float | None = None


@dataclass(slots=True)
class _Kept:
    """A candidate row of the page (row `i` of the run's samples): what its sort key and sampling need; its
    page JSON (without the prompt index and the key) waits in the row spool at `at`."""

    i: int
    st: str
    p: int = 0  # its prompt
    size: int = 0  # bytes of its page JSON
    s: float | None = None
    at: int = 0  # where its line starts in the row spool


@dataclass
class SampleSet:
    """The drill-down data: the kept rows plus de-duplicated prompts (the same prompt goes to every model),
    spooled to temporary files as page JSON."""

    total: int = 0
    confusion: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    rows: dict[int, _Kept] = field(default_factory=dict)  # the kept rows by row number
    kept: set[int] | None = None  # None: every row
    prompt_at: list[tuple[int, int]] = field(default_factory=list)  # prompt -> (offset, length) in its spool
    prompt_spool: IO[bytes] | None = None  # page JSON, UTF-8, a line each
    row_spool: IO[bytes] | None = None  # the same of the rows that were ever a candidate

    @property
    def n_prompts(self) -> int:
        return len(self.prompt_at)

    @property
    def n_rows(self) -> int:
        return self.total if self.kept is None else len(self.kept)

    def _kept_prompts(self) -> list[int]:
        """The prompts the kept rows show, in order of first use: the page holds no other."""
        return list(dict.fromkeys(self.rows[i].p for i in sorted(self.rows)))

    def json_chunks(self, head: dict[str, Any]) -> Iterator[bytes]:
        """The page's JSON block in UTF-8: `head` (entries, tasks), then "prompts" (those of the kept rows,
        re-numbered) and "rows" from the spools."""
        text = script_json(head)
        yield (text[:-1] + (',"prompts":[' if head else '{"prompts":[')).encode("utf-8")
        renumber: dict[int, int] = {}
        if self.prompt_spool is not None:
            for new, old in enumerate(self._kept_prompts()):
                renumber[old] = new
                offset, length = self.prompt_at[old]
                self.prompt_spool.seek(offset)
                yield (b"," if new else b"") + self.prompt_spool.read(length)
        yield b'],"rows":['
        if self.row_spool is not None:
            for n, i in enumerate(sorted(self.rows)):
                r = self.rows[i]
                self.row_spool.seek(r.at)
                line = self.row_spool.read(r.size - _TAIL)  # without its "\n"
                yield ((b"," if n else b"") + line + b'"p":' + str(renumber[r.p]).encode()
                       + b',"s":' + (b"null" if r.s is None else repr(r.s).encode()) + b"}")
        yield b"]}"

    def close(self) -> None:
        for f in (self.prompt_spool, self.row_spool):
            if f is not None:
                f.close()


def cap(text: Any) -> Any:
    if isinstance(text, str) and len(text) > TEXT_CAP:
        return text[:TEXT_CAP] + f"… [{len(text) - TEXT_CAP} more characters: `trustmh view` shows them]"
    return text


def _scalar(v: Any) -> bool:
    return v is None or (isinstance(v, (str, int)) and not isinstance(v, bool))


def _spool() -> IO[bytes]:
    # A line a value: JSON text never holds a raw "\n" (json.dumps escapes it in strings).
    return tempfile.TemporaryFile()


def _prompt_key(messages: Any) -> bytes:
    """What tells two prompts apart: the digest of their JSON (sort_keys), or, for the usual list of
    {"role", "content"} texts, of those texts length-prefixed, which is as exact and costs no JSON."""
    h = hashlib.sha256()
    if isinstance(messages, list) and all(type(m) is dict and len(m) == 2 and type(m.get("role")) is str
                                          and type(m.get("content")) is str for m in messages):
        h.update(b"T")
        for m in messages:
            for text in (m["role"], m["content"]):
                b = text.encode("utf-8", "surrogatepass")
                h.update(len(b).to_bytes(8, "little"))
                h.update(b)
    else:
        h.update(b"J" + json.dumps(messages, ensure_ascii=False, sort_keys=True).encode("utf-8", "surrogatepass"))
    return h.digest()


def row_status(rec: dict[str, Any], primary: str | None) -> tuple[str, Any]:
    """A sample's outcome (ok, no_answer: scored against the model, unscored, error) and its primary value."""
    values = rec.get("values") or {}
    if rec.get("error"):
        status = "error"
    elif (primary is not None and primary not in values) or (primary is None and not values):
        status = "unscored"
    else:
        status = "no_answer" if rec.get("no_answer") else "ok"
    pv = values.get(primary) if primary else None
    return status, pv if isinstance(pv, (int, float)) and not isinstance(pv, bool) else None


def page_row(rec: dict[str, Any], status: str, pv: Any) -> dict[str, Any]:
    """A sample as the page shows it (texts capped), without its prompt, which goes apart."""
    judge = rec.get("judge") or {}
    notes = [str(n) for n in rec.get("notes") or []] + [f"{k.replace('_', ' ')}: {rec[k]}"
                                                         for k in ("no_answer", "judge_failed") if rec.get(k)]
    return {"id": str(rec.get("item_id")), "v": str(rec.get("variant") or ""), "tg": cap(rec.get("target")),
            "r": cap(rec.get("response")), "j": cap(judge.get("text")), "jr": cap(judge.get("reason")),
            "pa": cap(rec.get("parsed")), "va": rec.get("values") or {}, "un": rec.get("unscored") or {},
            "er": rec.get("error"), "no": notes, "lb": rec.get("labels") or {}, "st": status, "pv": pv}


def page_prompt(messages: Any) -> list[dict[str, Any]]:
    return [{"role": str(m.get("role", "")), "content": cap(m.get("content"))} if isinstance(m, dict)
            else {"role": "", "content": cap(str(m))} for m in (messages if isinstance(messages, list) else [])]


Progress = Callable[[int, "int | None", str], None]  # (done, total, label), as the leaderboard's


def collect_samples(ents: list[Entry], metas: dict[str, TaskMeta], task_ids: list[str], max_samples: int,
                    *, per_task: int = PER_TASK, max_bytes: int = MAX_BYTES,
                    progress: Progress | None = None, read: Callable[[Any], Iterable[dict]] | None = None) -> SampleSet:
    """Stream every run's samples.jsonl into the page's rows, give each row a sort key, keep a bounded
    sample of them (the worst of each model and task). Memory: per (model, task) a bounded set of
    candidates and the confusion counts, per prompt its place in the spool and its number of rows. Only
    a row that becomes a candidate is made into page JSON (most rows of a large task never are). `read`:
    a run's records (default its `iter_samples`; the report's `rows_on_the_way` keeps its rows on the way)."""
    ss = SampleSet(prompt_spool=_spool(), row_spool=_spool())
    prompt_index: dict[bytes, int] = {}  # digest of the prompt's JSON -> its index: the texts stay on disk
    uses: list[int] = []  # prompt -> rows showing it
    by_run_model = {(str(e.run.dir), e.model): i for i, e in enumerate(ents)}
    tindex = {t: k for k, t in enumerate(task_ids)}
    limit = min(per_task, max(1, max_samples))  # no (model, task) shows more rows than this
    buckets: dict[tuple[int, int], _Bucket] = {}
    confusion: dict[tuple[int, str], _Confusion] = {}
    expected = sum(t.n_samples or 0 for e in ents for t in e.result.tasks.values()) or None
    seen_runs = set()
    at = row_at = 0  # the spools' lengths
    for e in ents:
        if str(e.run.dir) in seen_runs:
            continue
        seen_runs.add(str(e.run.dir))
        for rec in (read(e.run) if read is not None else e.run.iter_samples()):
            ei = by_run_model.get((str(e.run.dir), rec.get("model")))
            task = rec.get("task")
            if ei is None or task not in tindex:
                continue
            if progress is not None and (ss.total + 1) % 5000 == 0:
                progress(ss.total + 1, expected, "reading samples")
            digest = _prompt_key(rec.get("messages"))
            p = prompt_index.get(digest)
            if p is None:
                p = prompt_index[digest] = ss.n_prompts
                blob = script_json(page_prompt(rec.get("messages"))).encode("utf-8")
                ss.prompt_spool.write(blob)
                ss.prompt_at.append((at, len(blob)))
                uses.append(0)
                at += len(blob)
            uses[p] += 1
            meta = metas[task]
            status, pv = row_status(rec, meta.primary_value)
            b = buckets.get((ei, tindex[task]))
            if b is None:
                b = buckets[(ei, tindex[task])] = _Bucket(limit, meta)
            if b.wants(ss.total, status, pv):
                row = {"e": ei, "t": tindex[task], **page_row(rec, status, pv)}
                # "p" and "s" (the sort key) end the row, known once every row is read: spooled without them.
                line = (script_json(row)[:-1] + ",\n").encode("utf-8")
                ss.row_spool.write(line)
                b.add(_Kept(ss.total, status, p, len(line) - 1 + _TAIL, at=row_at), pv)
                row_at += len(line)
            else:
                b.count(pv)
            ss.total += 1
            if not rec.get("error"):
                c = confusion.get((ei, task))
                if c is None:
                    c = confusion[(ei, task)] = _Confusion()
                c.add(rec.get("target"), rec.get("parsed"))
    if progress is not None:
        progress(ss.total, ss.total, "reading samples")
    ss.confusion = {key: table for key, c in confusion.items() if (table := c.table()) is not None}
    worst = []
    for (ei, ti), b in buckets.items():
        tr = ents[ei].result.tasks.get(task_ids[ti])
        worst.append(b.worst(None if tr is None else tr.value))
    taken = _sample(worst, [length for _, length in ss.prompt_at], uses, max_samples, max_bytes)
    ss.rows = {r.i: r for r in taken}
    ss.kept = None if len(taken) == ss.total else set(ss.rows)
    return ss


_STATUS_RANK = {"ok": 0, "no_answer": 0, "unscored": 1, "error": 2}  # scored rows (against the model too) first
_TAIL = 25  # bytes a row's spooled line gets on the page beyond its own (its "\n" dropped): "p", "s" and "}"


class _Bucket:
    """One (model, task)'s candidates for the page. Its rows' sort keys are known only once all are read
    (they hold where the mean of the rows' primary values is the task's value), so it keeps what either
    outcome needs for its `limit` worst rows, whatever the number of rows:
    * with keys: the keyed rows worst first, then those without a primary value;
    * without: every row in order of status (scored, unscored, error), then of reading.

    A key is a per-sample score in 0 (worst) .. 1 (best), only where the task's metric is the mean of the
    per-sample primary value (accuracy, refusal rate, leak rate): there a low value is a bad reply. For
    other metrics (a correlation, an F1, a spread across groups) one reply has no score of its own."""

    __slots__ = ("limit", "meta", "first", "first_plain", "keyed", "n", "sum")

    def __init__(self, limit: int, meta: TaskMeta):
        self.limit, self.meta = limit, meta
        self.first: tuple[list[_Kept], ...] = ([], [], [])  # by status rank: the first `limit` rows
        self.first_plain: tuple[list[_Kept], ...] = ([], [], [])  # the same of rows without a primary value
        self.keyed: list[tuple] = []  # (-key, -rank, -i, row, pv): the `limit` worst keyed rows (a max-heap)
        self.n, self.sum = 0, 0.0  # rows with a primary value, and its sum

    def _key(self, pv: Any, lo: float, hi: float) -> float:
        return _key(pv, lo, hi, self.meta.higher_is_better)

    def wants(self, i: int, st: str, pv: Any) -> bool:
        """Whether `add` would keep row `i` (status `st`, primary value `pv`) among the candidates now."""
        rank = _STATUS_RANK[st]
        if len(self.first[rank]) < self.limit:
            return True
        if pv is None:
            return len(self.first_plain[rank]) < self.limit
        if self.meta.lo is None or len(self.keyed) < self.limit:
            return True
        return (-self._key(pv, self.meta.lo, self.meta.hi), -rank, -i) > self.keyed[0][:3]

    def count(self, pv: Any) -> None:
        """A row that is not a candidate (`wants` said no): only its value's part of the mean check."""
        if pv is not None:
            self.n += 1
            self.sum += float(pv)

    def add(self, r: _Kept, pv: Any) -> None:
        rank = _STATUS_RANK[r.st]
        if len(self.first[rank]) < self.limit:
            self.first[rank].append(r)
        if pv is None:
            if len(self.first_plain[rank]) < self.limit:
                self.first_plain[rank].append(r)
            return
        self.count(pv)
        if self.meta.lo is None:  # the key's range is the rows' own (results without a trust range): keep all
            self.keyed.append((0.0, -rank, -r.i, r, pv))
            return
        entry = (-self._key(pv, self.meta.lo, self.meta.hi), -rank, -r.i, r, pv)
        if len(self.keyed) < self.limit:
            heapq.heappush(self.keyed, entry)
        elif entry[:3] > self.keyed[0][:3]:  # worse than the least bad kept
            heapq.heapreplace(self.keyed, entry)

    def worst(self, value: float | None) -> list[_Kept]:
        """The bucket's rows worst first, at most `limit`, each keyed row given its key."""
        if value is None or not self.n or abs(self.sum / self.n - value) > 1e-6 * max(1.0, abs(value)):
            return _by_status(self.first)[:self.limit]
        if self.meta.lo is None:
            vals = [float(pv) for *_, pv in self.keyed]
            lo, hi = min(vals), max(vals)
            keyed = [(self._key(pv, lo, hi), -rk, -ni, r) for _, rk, ni, r, pv in self.keyed]
        else:
            keyed = [(-k, -rk, -ni, r) for k, rk, ni, r, _ in self.keyed]
        keyed.sort(key=lambda x: (x[0], x[1], x[2]))
        for key, _, _, r in keyed:
            r.s = key
        return ([r for *_, r in keyed] + _by_status(self.first_plain))[:self.limit]


def _key(pv: Any, lo: float, hi: float, higher_is_better: bool) -> float:
    frac = 0.5 if hi == lo else (min(max(float(pv), lo), hi) - lo) / (hi - lo)
    return round(frac if higher_is_better else 1 - frac, 4)


def _sort_keys(rows: list[_Row], ents, metas, task_ids) -> None:
    """Every row's key as `_Bucket` gives it, for an index that holds every row (`trustmh view`)."""
    groups: dict[tuple[int, int], list[_Row]] = {}
    for r in rows:
        if r.pv is not None:
            groups.setdefault((r.e, r.t), []).append(r)
    for (ei, ti), members in groups.items():
        meta = metas[task_ids[ti]]
        tr = ents[ei].result.tasks.get(meta.id)
        if tr is None or tr.value is None:
            continue
        vals = [float(r.pv) for r in members]
        if abs(sum(vals) / len(vals) - tr.value) > 1e-6 * max(1.0, abs(tr.value)):
            continue
        lo, hi = (meta.lo, meta.hi) if meta.lo is not None else (min(vals), max(vals))
        for r in members:
            r.s = _key(r.pv, lo, hi, meta.higher_is_better)


def _worst_first(r: _Row) -> tuple:
    return (r.s is None, r.s if r.s is not None else 0.0, _STATUS_RANK[r.st])


def _by_status(lists: tuple[list[_Kept], ...]) -> list[_Kept]:
    return sorted((r for rs in lists for r in rs), key=lambda r: (_STATUS_RANK[r.st], r.i))


class _Confusion:
    """gold x prediction counts of one (model, task), while its targets and parsed answers look like a
    few categories (scalars, a gold for every row, at most 12 of each)."""

    __slots__ = ("counts", "gold", "pred", "none")

    def __init__(self):
        self.counts: Counter | None = Counter()  # None: not categorical
        self.gold: set[str] = set()
        self.pred: set[str] = set()
        self.none = False  # a row without a parsed answer

    def add(self, target: Any, parsed: Any) -> None:
        if self.counts is None:
            return
        if target is None or not (_scalar(target) and _scalar(parsed)):
            self.counts = None
            return
        self.gold.add(str(target))
        if parsed is None:
            self.none = True
        else:
            self.pred.add(str(parsed))
        if len(self.gold) > 12 or len(self.pred) > 12:
            self.counts = None
            return
        self.counts[(str(target), "(none)" if parsed is None else str(parsed))] += 1

    def table(self) -> dict[str, Any] | None:
        if self.counts is None or len(self.gold) < 2:
            return None
        gold, pred = sorted(self.gold), sorted(self.pred)
        cols = list(dict.fromkeys(gold + pred)) + (["(none)"] if self.none else [])
        return {"rows": gold, "cols": cols, "top": max(self.counts.values()),
                "cells": [[self.counts.get((g, c), 0) for c in cols] for g in gold]}


def _sample(worst: list[list[_Kept]], prompt_sizes: list[int], uses: list[int], max_rows: int,
            max_bytes: int) -> list[_Kept]:
    """Which rows the page keeps: of every (model, task) (its rows worst first, at most `per_task`), an
    equal share of `max_rows`; then as many of those as `max_bytes` allows, spread evenly over the tasks
    (a level that each task's rows, taken worst first, may fill; a row too big to fit is passed over). A
    prompt's bytes count once on the page: while choosing, each row bears its share of its prompt."""
    if not worst:
        return []
    share = max(1, max_rows // len(worst))
    ranked = [members[:share] for members in worst]
    cost = {r.i: r.size + prompt_sizes[r.p] / uses[r.p] for members in ranked for r in members}

    def fill(level: float) -> list[_Kept]:
        taken = []
        for members in ranked:
            used = 0.0
            for r in members:
                if used + cost[r.i] <= level:
                    used += cost[r.i]
                    taken.append(r)
        return taken

    def page_bytes(taken: list[_Kept]) -> int:
        return sum(r.size for r in taken) + sum(prompt_sizes[p] for p in {r.p for r in taken})

    budget = float(max_bytes)
    taken = fill(float("inf"))
    while page_bytes(taken) > max_bytes:  # exact bytes (each prompt once) over the budget: a lower level
        lo, hi = 0.0, max(sum(cost[r.i] for r in members) for members in ranked)
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if sum(cost[r.i] for r in fill(mid)) <= budget else (lo, mid)
        taken = fill(lo)
        budget *= 0.9  # the shares were estimates of the prompts' bytes: tighten until the exact sum fits
    return taken
