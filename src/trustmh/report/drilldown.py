"""The report's sample drill-down data: every run's samples.jsonl streamed into compact rows (prompts
de-duplicated), each row given a worst-first sort key where one reply has a score of its own, gold x
prediction counts for categorical tasks, and the rows trimmed to a cap keeping the worst of each task."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..compare import Entry
from .leaderboard import TaskMeta

TEXT_CAP = 20_000  # characters of one text field kept in the page; samples.jsonl has the rest


@dataclass
class SampleSet:
    """The drill-down data: compact rows plus de-duplicated prompts (the same prompt goes to every model)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[Any] = field(default_factory=list)
    total: int = 0
    confusion: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)


def cap(text: Any) -> Any:
    if isinstance(text, str) and len(text) > TEXT_CAP:
        return text[:TEXT_CAP] + f"… [{len(text) - TEXT_CAP} more characters in samples.jsonl]"
    return text


def _scalar(v: Any) -> bool:
    return v is None or (isinstance(v, (str, int)) and not isinstance(v, bool))


def collect_samples(ents: list[Entry], metas: dict[str, TaskMeta], task_ids: list[str],
                    max_samples: int) -> SampleSet:
    """Stream every run's samples.jsonl into the page's rows, then give each row a sort key."""
    ss = SampleSet()
    prompt_index: dict[str, int] = {}
    by_run_model = {(str(e.run.dir), e.model): i for i, e in enumerate(ents)}
    tindex = {t: k for k, t in enumerate(task_ids)}
    pairs: dict[tuple[int, str], list[tuple[Any, Any]]] = defaultdict(list)  # (entry, task) -> (target, parsed)
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
            blob = json.dumps(rec.get("messages"), ensure_ascii=False, sort_keys=True)
            if blob not in prompt_index:
                prompt_index[blob] = len(ss.prompts)
                ss.prompts.append([{"role": str(m.get("role", "")), "content": cap(m.get("content"))}
                                   if isinstance(m, dict) else {"role": "", "content": cap(str(m))}
                                   for m in (rec.get("messages") or [])])
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
                   "p": prompt_index[blob], "tg": cap(rec.get("target")), "r": cap(rec.get("response")),
                   "j": cap(judge.get("text")), "jr": judge.get("reason"), "pa": cap(rec.get("parsed")),
                   "va": values, "un": rec.get("unscored") or {}, "er": error, "no": notes,
                   "lb": rec.get("labels") or {}, "st": status, "pv": pv, "s": None}
            ss.rows.append(row)
            if not error:
                pairs[(ei, task)].append((rec.get("target"), rec.get("parsed")))
    _sort_keys(ss.rows, ents, metas, task_ids)
    ss.confusion = _confusions(pairs)
    if len(ss.rows) > max_samples:
        ss.rows = _trim(ss.rows, max_samples)
    return ss


def _sort_keys(rows, ents, metas, task_ids) -> None:
    """A per-sample score in 0 (worst) .. 1 (best), only where the task's metric is the mean of the
    per-sample primary value (accuracy, refusal rate, leak rate): there a low value is a bad reply. For
    other metrics (a correlation, an F1, a spread across groups) one reply has no score of its own."""
    groups: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for r in rows:
        if r["pv"] is not None:
            groups[(r["e"], r["t"])].append(r)
    for (ei, ti), members in groups.items():
        meta = metas[task_ids[ti]]
        tr = ents[ei].result.tasks.get(meta.id)
        if tr is None or tr.value is None:
            continue
        vals = [float(r["pv"]) for r in members]
        if abs(sum(vals) / len(vals) - tr.value) > 1e-6 * max(1.0, abs(tr.value)):
            continue
        lo, hi = (meta.lo, meta.hi) if meta.lo is not None else (min(vals), max(vals))
        for r in members:
            frac = 0.5 if hi == lo else (min(max(float(r["pv"]), lo), hi) - lo) / (hi - lo)
            r["s"] = round(frac if meta.higher_is_better else 1 - frac, 4)


def _confusions(pairs) -> dict[tuple[int, str], dict[str, Any]]:
    """gold × prediction counts for tasks whose targets and parsed answers are a few categories."""
    out = {}
    for key, got in pairs.items():
        if not got or not all(_scalar(t) and _scalar(p) and t is not None for t, p in got):
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


def _trim(rows: list[dict], limit: int) -> list[dict]:
    """Keep the lowest-scoring rows of every (model, task) in proportion, then the rest in data order."""
    buckets: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for r in rows:
        buckets[(r["e"], r["t"])].append(r)
    share = max(1, limit // len(buckets))
    kept = []
    for members in buckets.values():
        order = sorted(members, key=_worst_first)
        kept += order[:share]
    keep_ids = {id(r) for r in kept}
    return [r for r in rows if id(r) in keep_ids]


def _worst_first(r: dict) -> tuple:
    rank = {"ok": 0, "unscored": 1, "error": 2}[r["st"]]
    return (r["s"] is None, r["s"] if r["s"] is not None else 0.0, rank)
