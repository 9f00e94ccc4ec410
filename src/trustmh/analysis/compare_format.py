"""`trustmh compare`'s output: JSON, CSV, Markdown and the terminal's tables, from `compare.Comparison`s.

Every format says the same thing the same way: `a` is the reference (the first model given), `b` the model
compared with it, and every difference is b − a. A title names a first ("a = X (reference), b = Y"), the
value columns name their model, and the sign follows: a positive difference means b's value is higher."""

from __future__ import annotations

import json
from typing import Any

from .compare import Comparison
from ..escaping import csv_text, markdown_cell, styled

COLUMNS = ("a", "b", "name", "kind", "value_a", "value_b", "diff", "ci_low", "ci_high", "p", "p_adjusted", "q_bh",
           "correction", "n_shared", "n_clusters", "n_tasks", "detectable", "verdict", "note")


def correction_line(comparisons: list[Comparison], alpha: float = 0.05) -> str:
    """Which correction the verdicts ran, said once in every format."""
    c = comparisons[0] if comparisons else None
    if c is None:
        return ""
    from .multiplicity import DESCRIBE
    return (f"p: unadjusted; adjusted p: {DESCRIBE[c.correction]} over the {c.family} tested differences of this "
            f"call, the verdict's (better/worse at adjusted p < {alpha:g}); q: Benjamini-Hochberg; the interval is "
            f"the unadjusted {1 - alpha:.0%} one. G: clusters resampled (under 5: no interval, no test); "
            f"n.s. rows give the smallest difference detectable at 80% power")


def records(comparisons: list[Comparison], alpha: float = 0.05) -> list[dict[str, Any]]:
    out = []
    for c in comparisons:
        for d in c.diffs:
            out.append({"a": c.a.label, "b": c.b.label, "name": d.name, "kind": d.kind, "value_a": d.a,
                        "value_b": d.b, "diff": d.diff, "ci_low": d.ci[0] if d.ci else None,
                        "ci_high": d.ci[1] if d.ci else None, "p": d.p, "p_adjusted": d.p_adj, "q_bh": d.q,
                        "correction": c.correction, "n_shared": d.n_shared, "n_clusters": d.n_clusters,
                        "n_tasks": d.n_tasks or None, "detectable": d.detectable, "verdict": d.verdict(alpha),
                        "note": d.note})
            if d.calibrated is not None:  # JSON only: CSV keeps its columns, the note says it in words
                out[-1]["calibrated"] = d.calibrated.model_dump()
    return out


def title(c: Comparison) -> str:
    """What a comparison's title says, in every format: which model is a and which b, and that b − a is shown."""
    return f"a = {c.a.label} (reference), b = {c.b.label}: b − a"


def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _p(p: float | None) -> str:
    return "-" if p is None else ("<0.001" if p < 0.001 else f"{p:.3f}")


def to_json(comparisons: list[Comparison], alpha: float = 0.05) -> str:
    c = comparisons[0] if comparisons else None
    return json.dumps({"alpha": alpha, "correction": c.correction if c else None, "family": c.family if c else 0,
                       "about": correction_line(comparisons, alpha),
                       "warnings": [w for c in comparisons for w in c.warnings],
                       "rows": records(comparisons, alpha)}, indent=2)


def to_csv(comparisons: list[Comparison], alpha: float = 0.05) -> str:
    return csv_text(list(COLUMNS), records(comparisons, alpha))


def _g(d) -> str:
    return "-" if d.n_clusters is None else str(d.n_clusters)


def to_markdown(comparisons: list[Comparison], alpha: float = 0.05) -> str:
    lines = [f"_{markdown_cell(correction_line(comparisons, alpha))}_", ""] if comparisons else []
    for c in comparisons:
        lines += [f"### {markdown_cell(title(c))}", ""]
        lines += [f"> warning: {markdown_cell(w)}" for w in c.warnings]
        a, b = (markdown_cell(x.label) for x in (c.a, c.b))
        lines += [f"| name | a: {a} | b: {b} | b − a | {1 - alpha:.0%} CI | p (raw) | p ({c.correction}) | q (BH) "
                  f"| n | G | verdict |",
                  "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"]
        for d in c.diffs:
            ci = f"[{_num(d.ci[0])}, {_num(d.ci[1])}]" if d.ci else "-"
            verdict = markdown_cell("; ".join(x for x in (d.reading(alpha), d.note) if x))
            lines.append(f"| {markdown_cell(d.name)} | {_num(d.a)} | {_num(d.b)} | {_num(d.diff)} | {ci} | {_p(d.p)} | "
                         f"{_p(d.p_adj)} | {_p(d.q)} | {d.n_shared} | {_g(d)} | {verdict} |")
        lines.append("")
    return "\n".join(lines)


def rich_tables(comparisons: list[Comparison], alpha: float = 0.05):
    from rich.table import Table as RichTable
    for c in comparisons:
        t = RichTable(title=f"{title(c)} (paired bootstrap over shared items)",
                      caption=correction_line(comparisons, alpha))
        for col in ("name", f"a\n{c.a.label}", f"b\n{c.b.label}", "b − a", f"{1 - alpha:.0%} CI", "p\nraw",
                    f"p\n{c.correction}", "q\nBH", "n", "G", "verdict"):
            t.add_column(col, justify="left" if col in ("name", "verdict") else "right", overflow="fold")
        for d in c.diffs:
            ci = f"[{_num(d.ci[0])}, {_num(d.ci[1])}]" if d.ci else "-"
            v = d.verdict(alpha)
            shown = styled((d.reading(alpha), {"better": "green", "worse": "red"}.get(v, "")),
                           *(("; " if d.reading(alpha) else "", (d.note, "dim")) if d.note else ()))
            t.add_row(d.name, _num(d.a), _num(d.b), _num(d.diff), ci, _p(d.p), _p(d.p_adj), _p(d.q), str(d.n_shared),
                      _g(d), shown)
        yield c, t
