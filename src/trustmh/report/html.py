"""The self-contained HTML report: leaderboard, rank table, radar chart, per-task detail, sample drill-down
and run spec, in one file that needs no network to view.

Safety: every piece of model output and data text reaches the page either through jinja2's autoescape
(server-rendered parts, SVG included) or as JSON inside a `<script type="application/json">` block
with `<`, `>` and `&` written as \\u escapes, which the page's script renders with textContent only.
A Content-Security-Policy with a per-report nonce is defence in depth: only the report's own script
runs, and nothing can be fetched."""

from __future__ import annotations

import json
import math
import re
import secrets
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from ..compare import Comparison, Entry, Run, compare, entries, load_run, read_rows
from ..metrics import trust_score

HERE = Path(__file__).parent
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")
TEXT_CAP = 20_000  # characters of one text field kept in the page; samples.jsonl has the rest
GROUPED = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<group>.+)\]$")  # refusal_rate[method=cot]


def fmt(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{digits}f}"


# --------------------------------------------------------------------------------------------------
# Small SVG pieces (built here so every text in them goes through `escape`)

def whisker_svg(value: float | None, ci: tuple[float, float] | None, lo: float = 0.0, hi: float = 100.0,
                width: int = 96, color: str = "#1f77b4") -> Markup:
    """A point with its interval on a [lo, hi] axis."""
    if value is None:
        return Markup("")

    def x(v: float) -> float:
        frac = 0.0 if hi == lo else (min(max(v, lo), hi) - lo) / (hi - lo)
        return round(2 + frac * (width - 4), 1)

    parts = [f'<svg class="whisker" width="{width}" height="14" viewBox="0 0 {width} 14" aria-hidden="true">',
             f'<line x1="2" y1="7" x2="{width - 2}" y2="7" class="axis"/>']
    if ci is not None:
        a, b = x(ci[0]), x(ci[1])
        parts.append(f'<line x1="{a}" y1="7" x2="{b}" y2="7" stroke="{color}" stroke-width="2"/>'
                     f'<line x1="{a}" y1="3" x2="{a}" y2="11" stroke="{color}"/>'
                     f'<line x1="{b}" y1="3" x2="{b}" y2="11" stroke="{color}"/>')
    parts.append(f'<circle cx="{x(value)}" cy="7" r="3.5" fill="{color}"/></svg>')
    return Markup("".join(parts))


def radar_svg(labels: list[str], series: list[tuple[str, str, list[float | None]]], size: int = 440) -> Markup:
    """Radar chart on 0-100 axes; one closed outline per model through the axes it has a value for."""
    n = len(labels)
    if n < 3:
        return Markup("")
    width = size + 160  # room for the axis labels left and right
    cx, c, r = width / 2, size / 2, size / 2 - 64
    ang = [-math.pi / 2 + 2 * math.pi * i / n for i in range(n)]

    def pt(i: int, v: float) -> tuple[float, float]:
        return round(cx + r * v / 100 * math.cos(ang[i]), 1), round(c + r * v / 100 * math.sin(ang[i]), 1)

    out = [f'<svg id="radar" class="radar" width="{width}" height="{size}" viewBox="0 0 {width} {size}" '
           f'role="img" aria-label="radar chart of pillar trust scores">']
    for ring in (25, 50, 75, 100):
        pts = " ".join(f"{x},{y}" for x, y in (pt(i, ring) for i in range(n)))
        out.append(f'<polygon points="{pts}" class="ring"/>')
        out.append(f'<text x="{cx + 3}" y="{c - r * ring / 100 - 2:.1f}" class="tick">{ring}</text>')
    for i, lab in enumerate(labels):
        x, y = pt(i, 100)
        lx, ly = pt(i, 118)
        anchor = "middle" if abs(lx - cx) < 5 else ("start" if lx > cx else "end")
        out.append(f'<line x1="{cx}" y1="{c}" x2="{x}" y2="{y}" class="spoke"/>')
        out.append(f'<text x="{lx}" y="{ly + 4}" text-anchor="{anchor}" class="axis-label">{escape(lab)}</text>')
    for name, color, values in series:
        present = [(i, v) for i, v in enumerate(values) if v is not None]
        if not present:
            continue
        pts = " ".join(f"{x},{y}" for x, y in (pt(i, v) for i, v in present))
        shape = "polygon" if len(present) > 2 else "polyline"
        out.append(f'<g class="series"><title>{escape(name)}</title>'
                   f'<{shape} points="{pts}" fill="{color}" fill-opacity="0.12" stroke="{color}" stroke-width="2"/>')
        for i, v in present:
            x, y = pt(i, v)
            out.append(f'<circle cx="{x}" cy="{y}" r="3.5" fill="{color}"><title>{escape(name)} · '
                       f'{escape(labels[i])}: {v:.1f}</title></circle>')
        out.append("</g>")
    out.append("</svg>")
    return Markup("".join(out))


def curve_svg(xs: list[str], lines: list[tuple[str, str, list[float | None]]], width: int = 460,
              height: int = 200) -> Markup:
    """A line chart over categorical x (e.g. perturbation intensity)."""
    vals = [v for _, _, ys in lines for v in ys if v is not None]
    if not vals or len(xs) < 2:
        return Markup("")
    lo, hi = min(0.0, min(vals)), max(vals)
    hi = hi if hi > lo else lo + 1
    left, right, top, bottom = 44, 130, 12, 28

    def px(i: int) -> float:
        return round(left + i * (width - left - right) / (len(xs) - 1), 1)

    def py(v: float) -> float:
        return round(top + (hi - v) / (hi - lo) * (height - top - bottom), 1)

    out = [f'<svg class="curve" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f'<line x1="{left}" y1="{py(lo)}" x2="{width - right}" y2="{py(lo)}" class="axis"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{py(lo)}" class="axis"/>',
           f'<text x="{left - 4}" y="{py(hi) + 4}" text-anchor="end" class="tick">{hi:.2g}</text>',
           f'<text x="{left - 4}" y="{py(lo) + 4}" text-anchor="end" class="tick">{lo:.2g}</text>']
    for i, x in enumerate(xs):
        out.append(f'<text x="{px(i)}" y="{height - 8}" text-anchor="middle" class="tick">{escape(x)}</text>')
    for k, (name, color, ys) in enumerate(lines):
        pts = [(px(i), py(v)) for i, v in enumerate(ys) if v is not None]
        if not pts:
            continue
        out.append(f'<polyline points="{" ".join(f"{a},{b}" for a, b in pts)}" fill="none" stroke="{color}" '
                   f'stroke-width="2" stroke-dasharray="{"" if k % 2 == 0 else "5 3"}"><title>{escape(name)}</title>'
                   f'</polyline>')
        out.append(f'<text x="{width - right + 6}" y="{pts[-1][1] + 4}" class="tick" fill="{color}">'
                   f'{escape(name[:22])}</text>')
    out.append("</svg>")
    return Markup("".join(out))


# --------------------------------------------------------------------------------------------------
# The report's data

@dataclass
class TaskMeta:
    id: str
    pillar: str
    metric: str
    higher_is_better: bool
    title: str = ""
    description: str = ""
    lo: float | None = None
    hi: float | None = None
    primary_value: str | None = None

    def trust(self, v: float | None) -> float | None:
        if v is None or self.lo is None or self.hi is None:
            return None
        return trust_score(v, self.lo, self.hi, self.higher_is_better)

    def trust_ci(self, ci) -> tuple[float, float] | None:
        if ci is None or self.lo is None:
            return None
        a, b = self.trust(ci[0]), self.trust(ci[1])
        return None if a is None or b is None else (min(a, b), max(a, b))


def task_meta(entries_: list[Entry]) -> dict[str, TaskMeta]:
    """What the report says about each task, from results.json alone: a run whose task code is not
    installed here still renders in full."""
    out: dict[str, TaskMeta] = {}
    for e in entries_:
        for tid, tr in e.result.tasks.items():
            if tid in out:
                continue
            m = TaskMeta(tid, tr.pillar, tr.metric, tr.higher_is_better)
            m.title, m.description, m.primary_value = tr.title, tr.description, tr.primary_value or None
            if tr.trust_range is not None:
                m.lo, m.hi = sorted(tr.trust_range)
            out[tid] = m
    return out


@dataclass
class Cell:
    score: float | None
    ci: tuple[float, float] | None
    rank: int | None = None
    tie_note: str = ""  # set when not significantly different from the model ranked just above


@dataclass
class Board:
    columns: list[str]  # pillars, then "overall"
    cells: dict[tuple[int, str], Cell] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # entry indices by overall rank
    method: str = ""


def leaderboard(ents: list[Entry], metas: dict[str, TaskMeta], pillars: list[str], *, paired: bool,
                n_boot: int) -> Board:
    board = Board(pillars + ["overall"])
    # Scores and intervals are results.json's own (trustmh.pillars); the report only ranks them.
    for i, e in enumerate(ents):
        for p in pillars:
            pr = e.result.pillars.get(p)
            if pr is None or pr.trust_score is None:
                board.cells[(i, p)] = Cell(None, None)
                continue
            board.cells[(i, p)] = Cell(pr.trust_score, pr.ci)
        board.cells[(i, "overall")] = Cell(e.result.trust_score, e.result.trust_ci)
    pair_cache: dict[tuple[int, int], Comparison | None] = {}
    rows_cache: dict[str, dict] = {}

    def paired_cmp(i: int, j: int) -> Comparison | None:
        if (i, j) not in pair_cache:
            a, b = ents[i], ents[j]
            if not paired or a.run is not b.run or not a.run.samples_path.is_file():
                pair_cache[(i, j)] = None
            else:
                key = str(a.run.dir)
                if key not in rows_cache:
                    rows_cache[key] = read_rows(a.run)
                rows = rows_cache[key]
                pair_cache[(i, j)] = compare(a, b, rows, rows, n_boot=n_boot, seed=0)
        return pair_cache[(i, j)]

    for col in board.columns:
        ranked = sorted((i for i in range(len(ents)) if board.cells[(i, col)].score is not None),
                        key=lambda i: -board.cells[(i, col)].score)
        for i in ranked:
            board.cells[(i, col)].rank = 1 + sum(board.cells[(j, col)].score > board.cells[(i, col)].score
                                                 for j in ranked)
        for upper, lower in zip(ranked, ranked[1:]):
            cu, cl = board.cells[(upper, col)], board.cells[(lower, col)]
            cmp = paired_cmp(upper, lower)
            d = cmp.get("overall" if col == "overall" else f"pillar:{col}") if cmp else None
            if d is not None and d.p is not None:
                if d.p >= 0.05:
                    cl.tie_note = (f"not significantly different from {ents[upper].label} "
                                   f"(paired bootstrap over shared items, p = {d.p:.2f})")
            elif cu.ci is not None and cl.ci is not None:
                if cl.ci[1] >= cu.ci[0]:
                    cl.tie_note = f"95% interval overlaps that of {ents[upper].label}"
    board.order = sorted(range(len(ents)), key=lambda i: (board.cells[(i, "overall")].rank or 10**9, i))
    return board


@dataclass
class SampleSet:
    """The drill-down data: compact rows plus de-duplicated prompts (the same prompt goes to every model)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[Any] = field(default_factory=list)
    total: int = 0
    confusion: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)


def _cap(text: Any) -> Any:
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
                ss.prompts.append([{"role": str(m.get("role", "")), "content": _cap(m.get("content"))}
                                   if isinstance(m, dict) else {"role": "", "content": _cap(str(m))}
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
                   "p": prompt_index[blob], "tg": _cap(rec.get("target")), "r": _cap(rec.get("response")),
                   "j": _cap(judge.get("text")), "jr": judge.get("reason"), "pa": _cap(rec.get("parsed")),
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


def _json_for_script(obj: Any) -> Markup:
    """JSON that cannot end its <script> element or open a comment: <, > and & become \\u escapes
    (they only ever occur inside JSON strings, where the escape means the same character)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return Markup(text)


def _finite(v: Any) -> Any:
    """NaN and infinities have no JSON spelling: null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


# --------------------------------------------------------------------------------------------------

@dataclass
class Block:
    """One breakdown of a task's sub-metrics named base[group]."""

    kind: str  # "table" (a row per group), "matrix" (groups named row->col) or "curve" (kind@level)
    base: str
    title: str
    groups: list[str]
    rows: list[str] = field(default_factory=list)  # matrix only
    cols: list[str] = field(default_factory=list)
    svg: Markup = Markup("")
    shown: dict[str, str] = field(default_factory=dict)  # group -> label shown (method=cot -> cot)


def _task_groups(metas, ents, task_ids) -> dict[str, dict[str, Any]]:
    """Per task: plain sub-metrics, and blocks of grouped ones: a table per group dimension (method=cot ->
    'by method'), a matrix for row->col groups (a confusion matrix), a curve for kind@level groups."""
    out = {}
    for tid in task_ids:
        names: list[str] = []
        for e in ents:
            tr = e.result.tasks.get(tid)
            if tr is not None:
                names += [n for n in tr.metrics if n not in names]
        plain = [n for n in names if not GROUPED.match(n) and n != metas[tid].metric]
        grouped: dict[str, list[str]] = {}
        for n in names:
            m = GROUPED.match(n)
            if m:
                grouped.setdefault(m["base"], []).append(m["group"])
        blocks: list[Block] = []
        for base, groups in grouped.items():
            if all(g.count("->") == 1 for g in groups):
                pairs = [g.split("->") for g in groups]
                blocks.append(Block("matrix", base, f"{base} (row → column)", groups,
                                    list(dict.fromkeys(a for a, _ in pairs)), list(dict.fromkeys(b for _, b in pairs))))
                continue
            curve = _curve(ents, tid, base, groups)
            if curve:
                blocks.append(Block("curve", base, f"{base} by intensity", groups, svg=curve))
            dims: dict[str, list[str]] = {}
            for g in groups:
                key = g.split("=", 1)[0] if "=" in g and "," not in g else ""
                dims.setdefault(key, []).append(g)
            for key, members in dims.items():
                shown = {g: g[len(key) + 1:] if key else g for g in members}
                blocks.append(Block("table", base, f"{base} by {key or 'group'}", members, shown=shown))
        out[tid] = {"plain": plain, "blocks": blocks, "has_matrix": any(b.kind == "matrix" for b in blocks)}
    return out


def _curve(ents, tid: str, base: str, groups: list[str]) -> Markup:
    """Intensity curve for groups named kind@level: per model the `@level` values the task reports (all
    kinds together) or, when it reports none, the mean over kinds; with one model, also each kind."""
    pairs = [g.split("@") for g in groups if g.count("@") == 1]
    levels = list(dict.fromkeys(lv for _, lv in pairs if lv))
    kinds = list(dict.fromkeys(k for k, lv in pairs if k and lv))
    if len(levels) < 2 or not kinds:
        return Markup("")
    lines = []
    for i, e in enumerate(ents):
        tr = e.result.tasks.get(tid)
        if tr is None or tr.status != "ok":
            continue
        ys = []
        for lv in levels:
            overall = _mv(tr, f"{base}[@{lv}]")
            if overall is None:
                per = [v for v in (_mv(tr, f"{base}[{k}@{lv}]") for k in kinds) if v is not None]
                overall = sum(per) / len(per) if per else None
            ys.append(overall)
        lines.append((e.label if len(ents) > 1 else "all kinds", PALETTE[i % len(PALETTE)], ys))
        if len(ents) == 1 and len(kinds) <= 6:
            for j, k in enumerate(kinds):
                lines.append((k, PALETTE[(j + 1) % len(PALETTE)], [_mv(tr, f"{base}[{k}@{lv}]") for lv in levels]))
    return curve_svg(levels, lines)


def _mv(tr, name: str) -> float | None:
    m = tr.metrics.get(name)
    return None if m is None else m.value


def _group_scale(ents, tid, base, groups) -> tuple[float, float]:
    vals = []
    for e in ents:
        tr = e.result.tasks.get(tid)
        if tr is None:
            continue
        for g in groups:
            m = tr.metrics.get(f"{base}[{g}]")
            if m is not None and m.value is not None:
                vals.append(m.value)
                if m.ci:
                    vals += list(m.ci)
    if not vals:
        return 0.0, 1.0
    lo, hi = min(0.0, min(vals)), max(vals)
    if 0 <= lo and hi <= 1:
        hi = 1.0
    return lo, (hi if hi > lo else lo + 1)


def build_context(runs: list[Run], *, comparisons: list[Comparison] | None = None, page_size: int = 50,
                  paired: bool = True, n_boot: int = 200, max_samples: int = 50_000,
                  include_samples: bool = True) -> dict[str, Any]:
    from ..tasks import PILLARS
    ents = entries(runs)
    metas = task_meta(ents)
    seen_pillars = list(dict.fromkeys(m.pillar for m in metas.values()))
    pillars = [p for p in PILLARS if p in seen_pillars] + [p for p in seen_pillars if p not in PILLARS]
    task_ids = [t for p in pillars for t in metas if metas[t].pillar == p]
    board = leaderboard(ents, metas, pillars, paired=paired, n_boot=n_boot)
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(ents))]
    axes = list(PILLARS) + [p for p in pillars if p not in PILLARS]
    radar = radar_svg(axes, [(e.label, colors[i], [board.cells[(i, p)].score if p in pillars else None
                                                 for p in axes]) for i, e in enumerate(ents)])
    ss = collect_samples(ents, metas, task_ids, max_samples) if include_samples else SampleSet()
    payload = {"entries": [e.label for e in ents],
               "tasks": [{"id": t, "metric": metas[t].metric, "primary": metas[t].primary_value,
                          "hib": metas[t].higher_is_better} for t in task_ids],
               "prompts": ss.prompts, "rows": ss.rows}
    runs_info = []
    for r in runs:
        res = r.results
        runs_info.append({"run": r, "res": res, "models": list(res.models)})
    return {
        "title": "trustmh report — " + ", ".join(r.id for r in runs),
        "runs": runs_info, "entries": ents, "colors": colors, "pillars": pillars, "all_pillars": axes,
        "board": board, "radar": radar, "metas": metas, "task_ids": task_ids,
        "groups": _task_groups(metas, ents, task_ids), "confusion": ss.confusion,
        "samples_json": _json_for_script(_finite(payload)), "n_rows": len(ss.rows), "n_total": ss.total,
        "include_samples": include_samples, "page_size": page_size,
        "comparisons": comparisons or [], "nonce": secrets.token_urlsafe(18),
        "css": Markup((HERE / "report.css").read_text(encoding="utf-8")),
        "js": Markup((HERE / "report.js").read_text(encoding="utf-8")),
        "fmt": fmt, "whisker": whisker_svg, "group_scale": _group_scale, "paired": paired,
    }


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE)), undefined=jinja2.StrictUndefined,
                              autoescape=True, trim_blocks=True, lstrip_blocks=True)


def render(runs: list[Run], **kw: Any) -> str:
    return _env().get_template("report.html.j2").render(**build_context(runs, **kw))


def write_report(runs: list[Run | Path | str], out: Path | str, **kw: Any) -> Path:
    """Write the report of one or more runs to `out` (atomically: a half-written report never replaces a
    good one)."""
    loaded = [r if isinstance(r, Run) else load_run(r) for r in runs]
    out = Path(out)
    html = render(loaded, **kw)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    return out
