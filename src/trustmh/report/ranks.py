"""The paper's rank table (its 19 subtask rows x models, rank 1 = best), as the report, `trustmh report
--format csv|markdown` and `trustmh compare --ranks` show it: one set of rows, written out in each format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..analysis.runs import Entry
from .leaderboard import TIE_RULE, Board, Cell, rank_apart


@dataclass
class RankRow:
    pillar: str
    row: str  # the paper's subtask label, or a task id beyond the paper
    cells: list[Cell]  # one per entry, in entry order
    beyond: bool = False
    span: int = 0  # on the first row of a pillar: how many rows its pillar cell spans (the pillar's rows); else 0
    note: str = ""  # why no model has a value on this row (e.g. its gated data was not supplied)


@dataclass
class RankTable:
    rows: list[RankRow]  # pillar by pillar: the paper's rows, then the pillar's rows beyond the paper
    columns: list[int]  # entry indices in display order: by group, then by the overall ordering
    groups: list[tuple[str, int]]  # (group label, number of columns), in display order; [] without groups
    labels: list[str]
    tie_rule: str = TIE_RULE


def rank_table(ents: list[Entry], board: Board, groups: dict[str, str] | None = None) -> RankTable:
    """The paper's 19 subtask rows in its pillar order, one column per model in the overall ordering, grouped
    by `groups` (entry label -> group, e.g. general / mental-health) when given; each cell the row's trust
    score and its rank among the models measured on the same tasks. A row is listed when some model's run
    has one of its tasks, even if none ran (a gated data set not supplied): it shows why. A task beyond the
    paper is listed after its pillar's paper rows, so that a pillar's rows always stand together."""
    from ..scoring.pillars import PAPER_PILLARS, PAPER_TASKS
    present = {t: e.result.tasks[t] for e in ents for t in e.result.tasks}
    beyond = sorted(t for t in present if t not in PAPER_TASKS)
    pillars = list(PAPER_PILLARS) + sorted({present[t].pillar for t in beyond} - set(PAPER_PILLARS))
    rows: list[RankRow] = []
    for pillar in pillars:
        for row, members in PAPER_PILLARS.get(pillar, {}).items():
            if not any(t in present for t in members):
                continue
            cells = []
            for e in ents:
                pr = e.result.pillars.get(pillar)
                got = (pr.rows.get(row) or {}) if pr else {}
                cells.append(Cell(got.get("trust_score"), None, coverage=tuple(got.get("measured", ()))))
            rows.append(_ranked(RankRow(pillar, row, cells), members, [present.get(t) for t in members]))
        for tid in (t for t in beyond if present[t].pillar == pillar):
            cells = [Cell(getattr(e.result.tasks.get(tid), "trust_score", None), None, coverage=(tid,)) for e in ents]
            rows.append(_ranked(RankRow(pillar, tid, cells, True), (tid,), [present[tid]]))
    for k, r in enumerate(rows):
        if k == 0 or rows[k - 1].pillar != r.pillar:
            r.span = sum(1 for _ in _run_of(rows, k))
    groups = groups or {}
    names = list(dict.fromkeys(groups.get(ents[i].label, "") for i in board.order)) if groups else []
    columns = [i for g in names for i in board.order if groups.get(ents[i].label, "") == g] if names \
        else list(board.order)
    spans = [(g or "other", sum(groups.get(ents[i].label, "") == g for i in columns)) for g in names]
    return RankTable(rows, columns, spans, [e.label for e in ents])


def _ranked(r: RankRow, members, results) -> RankRow:
    if any(c.score is not None for c in r.cells):
        rank_apart(r.cells, members)
    else:
        reasons = [t.reason for t in results if t is not None and t.reason]
        r.note = f"not run: {reasons[0]}" if reasons else "no model has a value"
    return r


def _run_of(rows: list[RankRow], k: int):
    """The rows from k on that share row k's pillar."""
    for r in rows[k:]:
        if r.pillar != rows[k].pillar:
            return
        yield r


def rank_records(table: RankTable) -> list[dict[str, Any]]:
    """One record per (row, model), row by row and in column order: what the CSV holds, and what the
    report's and the markdown table's cells show."""
    return [rec for _, recs in rank_grid(table) for rec in recs]


def rank_grid(table: RankTable) -> list[tuple[RankRow, list[dict[str, Any]]]]:
    """The table's rows, each with its records in column order."""
    group_of = {}
    for (g, n), k in zip(table.groups, _starts(table.groups)):
        for i in table.columns[k:k + n]:
            group_of[i] = g
    out = []
    for r in table.rows:
        recs = []
        for i in table.columns:
            c = r.cells[i]
            recs.append({"pillar": r.pillar, "row": r.row, "model": table.labels[i], "group": group_of.get(i, ""),
                         "trust_score": c.score, "rank": c.rank, "ranked_apart": c.apart,
                         "beyond_paper": "yes" if r.beyond else ""})
        out.append((r, recs))
    return out


def rank_text(rec: dict[str, Any]) -> str:
    """A cell's rank as every format shows it: '3', '3*' (ranked apart), '' (no value)."""
    return "" if rec["rank"] is None else f"{rec['rank']}{'*' if rec['ranked_apart'] else ''}"


def score_text(rec: dict[str, Any]) -> str:
    return "" if rec["trust_score"] is None else f"{rec['trust_score']:.1f}"


CSV_COLUMNS = ["pillar", "row", "model", "group", "trust_score", "rank", "ranked_apart", "beyond_paper"]


def rank_csv(table: RankTable) -> str:
    import csv
    import io
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rank_records(table))
    return buf.getvalue()


def rank_markdown(table: RankTable) -> str:
    """The rank table as the paper draws it: rows by pillar, one column per model, rank (trust score) in each
    cell; a rank among an incomplete set of tasks carries a *."""
    labels = [table.labels[i].replace("|", "/") for i in table.columns]
    lines = []
    if table.groups:
        lines.append("groups: " + "; ".join(f"{g}: {', '.join(labels[k:k + n])}" for (g, n), k in
                                             zip(table.groups, _starts(table.groups))))
        lines.append("")
    lines += ["| pillar | subtask | " + " | ".join(labels) + " |", "|---|---|" + "---:|" * len(labels)]
    for r, recs in rank_grid(table):
        cells = ["–" if rec["rank"] is None else f"{rank_text(rec)} ({score_text(rec)})" for rec in recs]
        lines.append(f"| {r.pillar if r.span else ''} | {r.row}{' (beyond the paper)' if r.beyond else ''} | "
                     + " | ".join(cells) + " |")
    lines += ["", f"Ranks: {table.tie_rule}. In brackets: the row's 0–100 trust score (trustmh's mapping of each "
                  f"task's metric). *: ranked apart."]
    return "\n".join(lines) + "\n"


def _starts(groups: list[tuple[str, int]]) -> list[int]:
    out, k = [], 0
    for _, n in groups:
        out.append(k)
        k += n
    return out
