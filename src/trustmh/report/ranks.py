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


@dataclass
class RankTable:
    rows: list[RankRow]
    columns: list[int]  # entry indices in display order: by group, then by the overall ordering
    groups: list[tuple[str, int]]  # (group label, number of columns), in display order; [] without groups
    labels: list[str]
    tie_rule: str = TIE_RULE


def rank_table(ents: list[Entry], board: Board, groups: dict[str, str] | None = None) -> RankTable:
    """The paper's 19 subtask rows in its pillar order (then tasks beyond the paper), one column per model
    in the overall ordering, grouped by `groups` (entry label -> group, e.g. general / mental-health) when
    given; each cell the row's trust score and its rank among the models measured on the same tasks."""
    from ..scoring.pillars import PAPER_PILLARS, PAPER_TASKS
    rows: list[RankRow] = []
    for pillar, paper_rows in PAPER_PILLARS.items():
        for row, members in paper_rows.items():
            cells = []
            for e in ents:
                pr = e.result.pillars.get(pillar)
                got = (pr.rows.get(row) or {}) if pr else {}
                cells.append(Cell(got.get("trust_score"), None, coverage=tuple(got.get("measured", ()))))
            if any(c.score is not None for c in cells):
                rank_apart(cells, members)
                rows.append(RankRow(pillar, row, cells))
    beyond = sorted({t for e in ents for t in e.result.tasks if t not in PAPER_TASKS})
    for tid in beyond:
        cells = [Cell(getattr(e.result.tasks.get(tid), "trust_score", None), None, coverage=(tid,)) for e in ents]
        if any(c.score is not None for c in cells):
            rank_apart(cells, (tid,))
            pillar = next(e.result.tasks[tid].pillar for e in ents if tid in e.result.tasks)
            rows.append(RankRow(pillar, tid, cells, True))
    groups = groups or {}
    names = list(dict.fromkeys(groups.get(ents[i].label, "") for i in board.order)) if groups else []
    columns = [i for g in names for i in board.order if groups.get(ents[i].label, "") == g] if names \
        else list(board.order)
    spans = [(g or "other", sum(groups.get(ents[i].label, "") == g for i in columns)) for g in names]
    return RankTable(rows, columns, spans, [e.label for e in ents])


def rank_records(table: RankTable) -> list[dict[str, Any]]:
    """One record per (row, model): what the CSV holds."""
    out = []
    group_of = {}
    k = 0
    for g, n in table.groups:
        for i in table.columns[k:k + n]:
            group_of[i] = g
        k += n
    for r in table.rows:
        for i in table.columns:
            c = r.cells[i]
            out.append({"pillar": r.pillar, "row": r.row, "model": table.labels[i], "group": group_of.get(i, ""),
                        "trust_score": c.score, "rank": c.rank, "ranked_apart": c.apart})
    return out


def rank_csv(table: RankTable) -> str:
    import csv
    import io
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["pillar", "row", "model", "group", "trust_score", "rank", "ranked_apart"],
                       lineterminator="\n")
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
    last = None
    for r in table.rows:
        cells = []
        for i in table.columns:
            c = r.cells[i]
            cells.append("–" if c.rank is None else f"{c.rank}{'*' if c.apart else ''} ({c.score:.1f})")
        lines.append(f"| {r.pillar if r.pillar != last else ''} | {r.row}{' (beyond the paper)' if r.beyond else ''} | "
                     + " | ".join(cells) + " |")
        last = r.pillar
    lines += ["", f"Ranks: {table.tie_rule}. In brackets: the row's 0–100 trust score (trustmh's mapping of each "
                  f"task's metric). *: ranked apart."]
    return "\n".join(lines) + "\n"


def _starts(groups: list[tuple[str, int]]) -> list[int]:
    out, k = [], 0
    for _, n in groups:
        out.append(k)
        k += n
    return out
