"""The report's leaderboard: per model the 0-100 trust score of each pillar and overall, with an
interval, a rank, and a note where a model is not significantly different from the one ranked above it
(a paired bootstrap when both are in one run, overlapping intervals otherwise)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..compare import Comparison, Entry, compare, read_rows
from ..metrics import trust_score


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
    partial: str = ""  # what a pillar or overall score rests on when it is fewer rows/pillars than the paper's


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
            board.cells[(i, p)] = Cell(pr.trust_score, pr.ci, partial=(
                f"partial: {pr.n_rows_measured} of the paper's {pr.n_rows} rows" if pr.partial else ""))
        r = e.result
        board.cells[(i, "overall")] = Cell(r.trust_score, r.trust_ci, partial=(
            f"partial: {r.n_pillars_measured} of {r.n_pillars} pillars, or a partial pillar" if r.partial else ""))
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
