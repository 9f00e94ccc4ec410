"""The report's sample drill-down data: every run's samples.jsonl streamed into compact rows (prompts
de-duplicated), each row given a worst-first sort key where one reply has a score of its own, gold x
prediction counts for categorical tasks, and the rows trimmed to a cap keeping the worst of each task.

A large run's rows are never held in memory: one pass over samples.jsonl writes each prompt and row as
page-ready JSON to temporary spool files and keeps only what the sort keys, the trimming and the
confusion counts need (a few numbers per row); `SampleSet.json_chunks` then streams the page's JSON
block from the spools. The chunks join to exactly `script_json` of the whole payload."""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import IO, Any, Iterator

from ..compare import Entry
from .leaderboard import TaskMeta

TEXT_CAP = 20_000  # characters of one text field kept in the page; samples.jsonl has the rest
_NOT_CATEGORY = object()  # a (target, parsed) pair that cannot be a cell of a confusion matrix


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
    """What a row's sort key and trimming need; its page JSON (without the key) waits in the spool."""

    e: int
    t: int
    pv: Any
    st: str
    s: float | None = None


@dataclass
class SampleSet:
    """The drill-down data: compact rows plus de-duplicated prompts (the same prompt goes to every model),
    spooled to temporary files as page JSON."""

    total: int = 0
    confusion: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    rows: list[_Row] = field(default_factory=list)
    kept: list[bool] | None = None  # None: every row
    n_prompts: int = 0
    prompt_spool: IO[bytes] | None = None  # page JSON, UTF-8, a line each
    row_spool: IO[bytes] | None = None

    @property
    def n_rows(self) -> int:
        return len(self.rows) if self.kept is None else sum(self.kept)

    def json_chunks(self, head: dict[str, Any]) -> Iterator[bytes]:
        """The page's JSON block in UTF-8: `head` (entries, tasks), then "prompts" and "rows" from the
        spools, copied as they are."""
        text = script_json(head)
        yield (text[:-1] + (',"prompts":[' if head else '{"prompts":[')).encode("utf-8")
        if self.prompt_spool is not None:
            self.prompt_spool.seek(0)
            for i, line in enumerate(self.prompt_spool):
                yield (b"," + line[:-1]) if i else line[:-1]
        yield b'],"rows":['
        if self.row_spool is not None:
            self.row_spool.seek(0)
            first = True
            for i, line in enumerate(self.row_spool):
                if self.kept is not None and not self.kept[i]:
                    continue
                s = self.rows[i].s
                yield (b"" if first else b",") + line[:-1] + (b"null" if s is None else repr(s).encode()) + b"}"
                first = False
        yield b"]}"

    def close(self) -> None:
        for f in (self.prompt_spool, self.row_spool):
            if f is not None:
                f.close()


def cap(text: Any) -> Any:
    if isinstance(text, str) and len(text) > TEXT_CAP:
        return text[:TEXT_CAP] + f"… [{len(text) - TEXT_CAP} more characters in samples.jsonl]"
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


def collect_samples(ents: list[Entry], metas: dict[str, TaskMeta], task_ids: list[str],
                    max_samples: int) -> SampleSet:
    """Stream every run's samples.jsonl into the page's rows, then give each row a sort key."""
    ss = SampleSet(prompt_spool=_spool(), row_spool=_spool())
    prompt_index: dict[bytes, int] = {}  # digest of the prompt's JSON -> its index: the texts stay on disk
    by_run_model = {(str(e.run.dir), e.model): i for i, e in enumerate(ents)}
    tindex = {t: k for k, t in enumerate(task_ids)}
    pairs: dict[tuple[int, str], list[Any]] = defaultdict(list)  # (entry, task) -> (target, parsed)
    seen_runs = set()
    for e in ents:
        if str(e.run.dir) in seen_runs:
            continue
        seen_runs.add(str(e.run.dir))
        for rec in e.run.iter_samples():
            ei = by_run_model.get((str(e.run.dir), rec.get("model")))
            task = rec.get("task")
            if ei is None or task not in tindex:
                continue
            ss.total += 1
            digest = _prompt_key(rec.get("messages"))
            p = prompt_index.get(digest)
            if p is None:
                p = prompt_index[digest] = ss.n_prompts
                ss.n_prompts += 1
                ss.prompt_spool.write((script_json(
                    [{"role": str(m.get("role", "")), "content": cap(m.get("content"))}
                     if isinstance(m, dict) else {"role": "", "content": cap(str(m))}
                     for m in (rec.get("messages") or [])]) + "\n").encode("utf-8"))
            meta = metas[task]
            values = rec.get("values") or {}
            judge = rec.get("judge") or {}
            error = rec.get("error")
            primary = meta.primary_value
            if error:
                status = "error"
            elif (primary is not None and primary not in values) or (primary is None and not values):
                status = "unscored"
            else:
                status = "no_answer" if rec.get("no_answer") else "ok"  # scored, against the model
            notes = (rec.get("notes") or []) + [f"{k.replace('_', ' ')}: {rec[k]}" for k in ("no_answer", "judge_failed")
                                                if rec.get(k)]
            pv = values.get(primary) if primary else None
            row = {"e": ei, "t": tindex[task], "id": str(rec.get("item_id")), "v": rec.get("variant") or "",
                   "p": p, "tg": cap(rec.get("target")), "r": cap(rec.get("response")),
                   "j": cap(judge.get("text")), "jr": judge.get("reason"), "pa": cap(rec.get("parsed")),
                   "va": values, "un": rec.get("unscored") or {}, "er": error, "no": notes,
                   "lb": rec.get("labels") or {}, "st": status, "pv": pv}
            # "s" (the sort key) is the row's last field, known once every row is read: spooled without it.
            ss.row_spool.write((script_json(row)[:-1] + ',"s":\n').encode("utf-8"))
            ss.rows.append(_Row(ei, tindex[task], pv, status))
            if not error:
                target, parsed = rec.get("target"), rec.get("parsed")
                pairs[(ei, task)].append((target, parsed) if _scalar(target) and _scalar(parsed) else _NOT_CATEGORY)
    _sort_keys(ss.rows, ents, metas, task_ids)
    ss.confusion = _confusions(pairs)
    if len(ss.rows) > max_samples:
        ss.kept = _trim(ss.rows, max_samples)
    return ss


def _sort_keys(rows: list[_Row], ents, metas, task_ids) -> None:
    """A per-sample score in 0 (worst) .. 1 (best), only where the task's metric is the mean of the
    per-sample primary value (accuracy, refusal rate, leak rate): there a low value is a bad reply. For
    other metrics (a correlation, an F1, a spread across groups) one reply has no score of its own."""
    groups: dict[tuple[int, int], list[_Row]] = defaultdict(list)
    for r in rows:
        if r.pv is not None:
            groups[(r.e, r.t)].append(r)
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
            frac = 0.5 if hi == lo else (min(max(float(r.pv), lo), hi) - lo) / (hi - lo)
            r.s = round(frac if meta.higher_is_better else 1 - frac, 4)


def _confusions(pairs) -> dict[tuple[int, str], dict[str, Any]]:
    """gold × prediction counts for tasks whose targets and parsed answers are a few categories."""
    out = {}
    for key, got in pairs.items():
        if not got or not all(tp is not _NOT_CATEGORY and tp[0] is not None for tp in got):
            continue
        gold = sorted({str(t) for t, _ in got})
        pred = sorted({str(p) for _, p in got if p is not None})
        if len(gold) < 2 or len(gold) > 12 or len(pred) > 12:
            continue
        cols = list(dict.fromkeys(gold + pred)) + (["(none)"] if any(p is None for _, p in got) else [])
        counts = Counter((str(t), "(none)" if p is None else str(p)) for t, p in got)
        top = max(counts.values())
        out[key] = {"rows": gold, "cols": cols, "top": top,
                    "cells": [[counts.get((g, c), 0) for c in cols] for g in gold]}
    return out


def _trim(rows: list[_Row], limit: int) -> list[bool]:
    """Keep the lowest-scoring rows of every (model, task) in proportion, then the rest in data order."""
    buckets: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        buckets[(r.e, r.t)].append(i)
    share = max(1, limit // len(buckets))
    kept = [False] * len(rows)
    for members in buckets.values():
        for i in sorted(members, key=lambda i: _worst_first(rows[i]))[:share]:
            kept[i] = True
    return kept


_STATUS_RANK = {"ok": 0, "no_answer": 0, "unscored": 1, "error": 2}  # scored rows (against the model too) first


def _worst_first(r: _Row) -> tuple:
    return (r.s is None, r.s if r.s is not None else 0.0, _STATUS_RANK[r.st])
