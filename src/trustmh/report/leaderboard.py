"""Ranks: the leaderboard (per model the 0-100 trust score of each pillar and overall, with an interval, a
rank, and a note where a model is not significantly different from the one ranked above it: a paired
bootstrap when both are in one run, overlapping intervals otherwise) and the paper's rank table (its 19
subtask rows x models, rank 1 = best). The report, `trustmh compare/report --format`, and the leaderboard
at the end of a multi-model `trustmh run` all show these, so a model has one rank wherever it is shown.

Ties: equal trust scores (results.json keeps two decimals) share the best rank, the next rank skipping
(competition ranking: 1, 2, 2, 4). The paper's figure repeats ranks too, but its tie rule is not known
(PAPER_PROTOCOL.md §1). A score resting on other tasks than another's (a partial pillar, a row missing a
tier) is never ranked against it: models are ranked only against models measured on the same tasks, and
a rank among models measured on other tasks than most is marked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..analysis.compare import Comparison, compare
from ..analysis.runs import Entry, read_rows
from ..scoring.metrics import trust_score


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
    coverage: tuple[str, ...] = ()  # the tasks the score rests on: only equal coverages are ranked together
    apart: str = ""  # set when ranked only among models of an incomplete coverage
    broken: str = ""  # rank table, --ties paper: set when a tie was broken, saying by what
    undefined: str = ""  # rank table: the row's value is null (why); such a cell has no rank
    rank_ci: tuple[int, int] | None = None  # rank table: the rank's bootstrap interval (ranks.add_rank_intervals)
    near: str = ""  # rank table: not separated from the model ranked just above it (why)


@dataclass
class Board:
    columns: list[str]  # pillars, then "overall"
    cells: dict[tuple[int, str], Cell] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # entry indices by overall rank
    method: str = ""


def competition_ranks(scores: list[float]) -> list[int]:
    """1 + how many scores are strictly higher: ties share the best rank (1, 2, 2, 4)."""
    return [1 + sum(o > s for o in scores) for s in scores]


def rank_apart(cells: list[Cell], complete: Iterable[str], keys: list[float] | None = None) -> list[list[int]]:
    """Rank cells with a score among those of the same coverage, by score or by `keys` (one per cell, higher
    is better); the groups (lists of positions) in display order: the main group first (the coverage most
    models share; on a tie the larger, the paper's complete one first), then larger coverages before
    smaller. A cell ranked outside the main group gets `apart` saying so: models measured on the same tasks
    are ranked together unmarked, even when every one of them lacks a row (the gated SWMH rows), and a mark
    singles out a model whose tasks differ from the others'."""
    complete = tuple(sorted(complete))
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, c in enumerate(cells):
        if c.score is not None:
            groups.setdefault(tuple(sorted(c.coverage)), []).append(i)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0] != complete, -len(kv[0]), kv[0]))
    main = ordered[0][0] if ordered else complete
    ordered = sorted(groups.items(), key=lambda kv: (kv[0] != main, kv[0] != complete, -len(kv[0]), kv[0]))
    for cov, members in ordered:
        ranks = competition_ranks([cells[i].score if keys is None else keys[i] for i in members])
        for i, r in zip(members, ranks):
            cells[i].rank = r
            if cov != main:
                cells[i].apart = (f"ranked only among the {len(members)} model(s) measured on the same "
                                  f"{len(cov)} of {len(complete)} tasks, not with the "
                                  f"{len(groups[main])} measured on {len(main)}")
    return [sorted(m, key=lambda i: (cells[i].rank, i)) for _, m in ordered]


def _measured(pr) -> tuple[str, ...]:
    """The tasks a pillar's score rests on: those it credits (older results: those measured)."""
    return tuple(t for r in pr.rows.values() for t in r.get("credited_tasks", r.get("measured", ())))


def leaderboard(ents: list[Entry], metas: dict[str, TaskMeta], pillars: list[str], *, paired: bool,
                n_boot: int, progress=None) -> Board:
    """`progress(done, total, label)`, when given, is called after each paired comparison it makes."""
    from ..tasks import paper_pillars
    paper = paper_pillars()
    board = Board(pillars + ["overall"])
    # Scores and intervals are results.json's own (trustmh.scoring.pillars); the report only ranks them.
    for i, e in enumerate(ents):
        cover: list[str] = []
        for p in pillars:
            pr = e.result.pillars.get(p)
            if pr is None or pr.trust_score is None:
                board.cells[(i, p)] = Cell(None, None)
                continue
            cover += _measured(pr) if p in paper else ()  # a pillar of one's own is not in the overall
            board.cells[(i, p)] = Cell(pr.trust_score, pr.ci, coverage=_measured(pr), partial=(
                f"partial: {pr.n_rows_measured} of the paper's {pr.n_rows} rows" if pr.partial else ""))
        r = e.result
        board.cells[(i, "overall")] = Cell(r.trust_score, r.trust_ci, coverage=tuple(cover), partial=(
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
                if progress is not None:
                    progress(len(pair_cache), None, f"{b.label} vs {a.label}")  # the pairs needed are not known ahead
        return pair_cache[(i, j)]

    every = {p: [t for ts in rows.values() for t in ts] for p, rows in paper.items()}
    for p in pillars:  # a pillar of one's own tasks: complete with every task of it that some model ran
        if p not in every:
            every[p] = sorted({t for e in ents for t in (e.result.pillars[p].tasks if p in e.result.pillars else ())})
    paper_tasks = [t for p in paper for t in every[p]]
    for col in board.columns:
        complete = paper_tasks if col == "overall" else every.get(col, [])
        cells = [board.cells[(i, col)] for i in range(len(ents))]
        ranked_groups = rank_apart(cells, complete)
        for ranked in ranked_groups:
            for upper, lower in zip(ranked, ranked[1:]):
                cu, cl = cells[upper], cells[lower]
                cmp = paired_cmp(upper, lower)
                d = cmp.get("overall" if col == "overall" else f"pillar:{col}") if cmp else None
                if d is not None and d.p is not None:
                    if d.p >= 0.05:
                        cl.tie_note = (f"not significantly different from {ents[upper].label} "
                                       f"(paired bootstrap over shared items, p = {d.p:.2f})")
                elif cu.ci is not None and cl.ci is not None:
                    if cl.ci[1] >= cu.ci[0]:
                        cl.tie_note = f"95% interval overlaps that of {ents[upper].label}"
        if col == "overall":
            board.order = [i for g in ranked_groups for i in g]
    board.order += [i for i in range(len(ents)) if i not in board.order]  # no overall score: last, in order
    return board
