"""Per-task breakdowns in the report: a task's sub-metrics named base[group] gathered into blocks: a table
per group dimension (method=cot -> 'by method'), a matrix for row->col groups (a confusion matrix) and an
intensity curve for kind@level groups."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from .charts import PALETTE, curve_svg

GROUPED = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<group>.+)\]$")  # refusal_rate[method=cot]


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


def task_groups(metas, ents, task_ids) -> dict[str, dict[str, Any]]:
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


def group_scale(ents, tid, base, groups) -> tuple[float, float]:
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
