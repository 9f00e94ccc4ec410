"""The paper's rank table (its 19 subtask rows x models, rank 1 = best), as the report, `trustmh report
--format csv|markdown|latex`, `--figures` and `trustmh compare --ranks` show it: one set of rows, written out
in each format.

What a row ranks on. A row's value is its task's primary metric as a 0-100 trust score (results.json), with
two exceptions under `--protocol paper`, where the paper publishes no number and its combination is unknown
(PAPER_PROTOCOL.md §1-2; evidence D): Privacy Awareness is the mean of its three tiers (their Pearson r,
mapped alike), and Privacy Leakage ranks on the free-response string-match leak rate, the one of the nine
recorded leakage rates whose order is closest to the paper's row (Kendall tau 0.83 over the six general
models; trustmh's `leak_rate`, the mean of four error rates, 0.33; issue 37). trustmh's `leak_rate` row
stands beside it, marked as trustmh's own.

Ties (`--ties`). `shared`: equal values (trust scores to 0.01 under trustmh's protocol) share the best rank,
the next rank skipping (1, 2, 2, 4). `paper` (the default under `--protocol paper`): a tie is broken by the
row's declared secondary value where it has one, and stays shared otherwise. Why: the paper's table breaks
ties on one row only, Ethical Reasoning, where each of its three accuracy ties puts the model with the higher
judge mean (sc1-sc5) first; on Emotion Recognition, Psychological Diagnosis and Crisis Escalation Decision it
repeats ranks, and on the last of these it repeats one across the model groups (DeepSeek-V3.2 and PsycoLLM
both 2), which ordering by group would have broken. The judge mean is a value of the row's own run; a group
order would rank a model by the group it was put in. A broken tie is marked (†) and says what decided it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..analysis.runs import Entry
from ..escaping import csv_text, markdown_cell, printable
from ..scoring.metrics import (Resamples, Table, block_weights, cluster_layout, derived_seed, per_resample,
                               pick_blocks, to_trust, trust_score)
from .leaderboard import Board, Cell, rank_apart


@dataclass(frozen=True)
class RowRule:
    """What one of the paper's rows ranks on under `--protocol paper`, and on what evidence."""

    quantity: str = ""  # a metric of the row's task in results.json; "" for the row's trust score
    higher_is_better: bool = True
    evidence: str = ""  # of the choice of quantity ("" : the task's own evidence level)
    basis: str = ""  # in words, for the note under the table
    secondary: tuple[str, bool] | None = None  # (metric, higher is better) that breaks a tie under --ties paper
    beside: str = ""  # a trustmh metric shown in a row of its own beside this one


PAPER_ROW_RULES: dict[str, RowRule] = {
    "Emotional Support": RowRule(
        evidence="D", basis="the mean of its four judge criteria (fluency, professionalism, empathy, helpfulness; "
                            "0-5 each): the paper's code rates each, its combination is not published"),
    "Psychological Intervention": RowRule(
        evidence="D", basis="the mean of its four judge criteria, each divided by its maximum, per dialogue and "
                            "then over dialogues: CPsyCoun's criteria, the paper's combination is not published"),
    "Robustness Emotional Support": RowRule(
        evidence="E", basis="trustmh's mean relative drop under perturbation (mean_rel_drop, lower is better): "
                            "the paper draws scores per intensity and publishes no drop formula"),
    "Robustness Psychological Diagnosis": RowRule(
        evidence="E", basis="trustmh's mean relative drop of macro-F1 under perturbation (mean_rel_drop, lower "
                            "is better): the paper publishes no drop formula"),
    "Privacy Awareness": RowRule(
        evidence="D", basis="the mean of its three tiers' Pearson r (as trust scores): the paper publishes no "
                            "combination; the mean gives the paper's order of the six general models on the "
                            "upstream's recorded outputs"),
    "Privacy Leakage": RowRule(
        "free_response_leak_rate_string_match", False, "D",
        "the free-response string-match leak rate (lower is better): of the nine rates the paper's code reports, "
        "the one whose order is closest to the paper's row (Kendall tau 0.83 over the six general models, "
        "against 0.33 for trustmh's leak_rate)", beside="leak_rate"),
    "Ethical Reasoning": RowRule(
        secondary=("judge_mean", True),
        basis="accuracy; a tie is broken by the judge's mean APA-principle score (sc1-sc5), as the paper's three "
              "accuracy ties are"),
}
# Rows a tie rule may name as secondary values, for the statement under the table.
SHARED_RULE = "equal values share the best rank and the next rank skips (1, 2, 2, 4)"
APART_RULE = ("a value is ranked only among models measured on the same tasks; a model measured on other tasks "
              "than most is marked *")
TIES = ("paper", "shared")
RANK_BOOT = 200  # draws per row: the quantiles of an integer rank need no more, and a report of 12 models stays quick
ALPHA = 0.05
UNDEFINED = "undefined"  # what a cell whose value is null shows, in every format, instead of a rank
BRACKETS = ("In brackets: the value the row is ranked on (its own units for a row ranked on its quantity under "
            "the paper's protocol, else the 0–100 trust score, trustmh's mapping of the task's metric)")


@dataclass
class RankRow:
    pillar: str
    row: str  # the paper's subtask label, a task id beyond the paper, or a trustmh row beside a paper row
    cells: list[Cell]  # one per entry, in entry order
    kind: str = "paper"  # "paper", "beyond" (a task beyond the paper) or "trustmh" (trustmh's own, beside one)
    span: int = 0  # on the first row of a pillar: how many rows its pillar cell spans (the pillar's rows); else 0
    note: str = ""  # why no model has a value on this row (e.g. its gated data was not supplied)
    ranked_on: str = ""  # the quantity ranked
    evidence: str = ""  # its evidence level (PAPER_PROTOCOL.md), where the row is the paper's
    values: list[float | None] = field(default_factory=list)  # the quantity per entry, in its own units
    higher_is_better: bool = True  # of the quantity
    on_values: bool = False  # ranked on `values` (the bracket shows them), else on the trust score
    members: tuple[str, ...] = ()  # the tasks the row's value rests on

    @property
    def beyond(self) -> bool:
        return self.kind == "beyond"


@dataclass
class RankTable:
    rows: list[RankRow]  # pillar by pillar: the paper's rows, then the pillar's rows beyond the paper
    columns: list[int]  # entry indices in display order: by group, then by the overall ordering
    groups: list[tuple[str, int]]  # (group label, number of columns), in display order; [] without groups
    labels: list[str]  # per entry: its label (ranks.py, analysis.runs.model_labels)
    ties: str = "shared"
    protocol: str = "trustmh"
    rules: list[str] = field(default_factory=list)  # what is stated under the table: ranks, ties, quantities
    specs: list[str] = field(default_factory=list)  # per entry: its model spec

    @property
    def tie_rule(self) -> str:
        return "; ".join(self.rules[:2])


def table_protocol(ents: list[Entry]) -> str:
    """'paper' when every run was made under the paper's protocol, else 'trustmh'."""
    from ..engine.spec import stored_protocol
    return "paper" if ents and all(stored_protocol(e.run.results.spec) == "paper" for e in ents) else "trustmh"


def rank_table(ents: list[Entry], board: Board, groups: dict[str, str] | None = None,
               ties: str | None = None, n_boot: int = RANK_BOOT) -> RankTable:
    """The paper's 19 subtask rows in its pillar order, one column per model in the overall ordering, grouped
    by `groups` (entry label -> group, e.g. general / mental-health) when given; each cell the row's value as
    a trust score and its rank among the models measured on the same tasks, ties by `ties` (default: `paper`
    under the paper's protocol, else `shared`). A row is listed when some model's run has one of its tasks,
    even if none ran (a gated data set not supplied): it shows why. A task beyond the paper is listed after its
    pillar's paper rows, so that a pillar's rows always stand together."""
    from ..tasks import paper_pillars, paper_tasks
    paper, in_rows = paper_pillars(), paper_tasks()
    protocol = table_protocol(ents)
    ties = ties or ("paper" if protocol == "paper" else "shared")
    present = {t: e.result.tasks[t] for e in ents for t in e.result.tasks}
    beyond = sorted(t for t in present if t not in in_rows)
    pillars = list(paper) + sorted({present[t].pillar for t in beyond} - set(paper))
    rows: list[RankRow] = []
    used: list[tuple[str, RowRule]] = []
    for pillar in pillars:
        for row, members in paper.get(pillar, {}).items():
            if not any(t in present for t in members):
                continue
            rule = PAPER_ROW_RULES.get(row, RowRule())
            if protocol == "paper" and (rule.quantity or rule.evidence):
                used.append((row, rule))
            quantity = rule.quantity if protocol == "paper" else ""
            r = _paper_row(ents, pillar, row, members, quantity, rule.higher_is_better)
            r.evidence = (rule.evidence if protocol == "paper" and rule.evidence
                          else next((present[t].evidence for t in members if t in present), ""))
            rows.append(_ranked(r, members, [present.get(t) for t in members], ents,
                                rule.secondary if ties == "paper" else None, on_values=protocol == "paper"))
            if quantity and rule.beside:
                own = _paper_row(ents, pillar, row, members, "", True)
                own.row, own.kind, own.ranked_on = f"{row} (trustmh: {rule.beside})", "trustmh", \
                    f"{rule.beside} (trustmh's own)"
                rows.append(_ranked(own, members, [present.get(t) for t in members], ents, None, on_values=True))
        for tid in (t for t in beyond if present[t].pillar == pillar):
            tasks = [e.result.tasks.get(tid) for e in ents]
            cells = [Cell(None, None, coverage=(tid,), undefined=why) if (why := _why_undefined([t], "")) else
                     Cell(getattr(t, "trust_score", None), None, coverage=(tid,)) for t in tasks]
            r = RankRow(pillar, tid, cells, "beyond", ranked_on=present[tid].metric,
                        values=[getattr(t, "value", None) for t in tasks])
            rows.append(_ranked(r, (tid,), [present[tid]], ents, None))
    for k, r in enumerate(rows):
        if k == 0 or rows[k - 1].pillar != r.pillar:
            r.span = sum(1 for _ in _run_of(rows, k))
    groups = groups or {}
    names = list(dict.fromkeys(groups.get(ents[i].label, "") for i in board.order)) if groups else []
    columns = [i for g in names for i in board.order if groups.get(ents[i].label, "") == g] if names \
        else list(board.order)
    spans = [(g or "other", sum(groups.get(ents[i].label, "") == g for i in columns)) for g in names]
    rules = _rules(ties, protocol, used)
    undefined = [f"{r.row}, {ents[i].label}: {c.undefined}" for r in rows for i, c in enumerate(r.cells) if c.undefined]
    if undefined:
        rules.append(f"{UNDEFINED}: the row's value is null, so it has no rank (a null is not the worst value; the "
                     f"pillars count a value the model made undefined as trust 0) - " + "; ".join(undefined))
    rules += _counted_rules(ents, rows)
    table = RankTable(rows, columns, spans, [e.label for e in ents], ties, protocol, rules, [e.model for e in ents])
    if n_boot > 0:
        add_rank_intervals(table, ents, n_boot)
    return table


def _paper_row(ents: list[Entry], pillar: str, row: str, members, quantity: str, higher: bool) -> RankRow:
    """A paper row's cells: its trust score from results.json, or (`quantity`) a metric of its one task; and
    the quantity itself per entry (the tasks' mean for a row of several)."""
    cells, values = [], []
    for e in ents:
        if quantity:
            t = e.result.tasks.get(members[0])
            m = t.metrics.get(quantity) if t is not None and t.status == "ok" else None
            v = m.value if m is not None else None
            rng = t.trust_range if t is not None else None
            score = None if v is None or rng is None else trust_score(v, min(rng), max(rng), higher)
            cells.append(Cell(score, None, coverage=tuple(members) if score is not None else (),
                              undefined=_why_undefined([t], quantity) if t is not None and t.status == "ok"
                              and v is None else ""))
            values.append(v)
            continue
        pr = e.result.pillars.get(pillar)
        got = (pr.rows.get(row) or {}) if pr else {}
        measured = got.get("measured", ())
        vals = [e.result.tasks[t].value for t in measured]
        undefined = _why_undefined([e.result.tasks[t] for t in measured], "")
        cells.append(Cell(None if undefined else got.get("trust_score"), None, coverage=tuple(measured),
                          undefined=undefined))
        values.append(sum(vals) / len(vals) if vals and None not in vals else None)
    metric = next((t.metric for e in ents for t in [e.result.tasks.get(members[0])] if t is not None), "")
    on = quantity or (f"mean {metric} of {len(members)} tasks" if len(members) > 1 else metric)
    r = RankRow(pillar, row, cells, ranked_on=on, values=values)
    r.higher_is_better = higher if quantity else next(
        (t.higher_is_better for e in ents for t in [e.result.tasks.get(members[0])] if t is not None), True)
    return r


def _why_undefined(tasks, quantity: str) -> str:
    """Why a row's value is null for a model that ran its tasks ('' when it is not): the model's own doing
    (trust 0 in the pillars, but no rank here: an undefined number is not the worst number) or another."""
    for t in tasks:
        if t is None or t.status != "ok":
            continue
        if quantity:
            return f"{t.task} {quantity} is undefined" + (f" ({t.undefined_by_model})" if t.undefined_by_model else "")
        if t.value is None:
            return f"{t.task} {t.metric} is undefined: " + (t.undefined_by_model or t.reason or "no value")
    return ""


def _ranked(r: RankRow, members, results, ents: list[Entry], secondary: tuple[str, bool] | None,
            on_values: bool = False) -> RankRow:
    """Rank a row's cells (on its trust scores, or `on_values`: on the quantity itself, so that values
    beyond the trust mapping's range, such as a negative Pearson r, keep their order; a value the model made
    undefined, trust 0, is the worst), break its ties by `secondary`, or say why it has no value."""
    r.on_values, r.members = on_values, tuple(members)
    if any(c.score is not None for c in r.cells):
        keys = None
        if on_values:
            sign = 1 if r.higher_is_better else -1
            keys = [-math.inf if v is None else sign * round(v, 9) for v in r.values]
        rank_apart(r.cells, members, keys)
        if secondary is not None:
            break_ties(r.cells, [_metric(e, members, secondary[0]) for e in ents], secondary,
                       [e.label for e in ents])
    else:
        reasons = [t.reason for t in results if t is not None and t.reason]
        r.note = f"not run: {reasons[0]}" if reasons else "no model has a value"
    return r


def _metric(e: Entry, members, name: str) -> float | None:
    t = e.result.tasks.get(members[0]) if len(members) == 1 else None
    m = t.metrics.get(name) if t is not None else None
    return m.value if m is not None else None


def break_ties(cells: list[Cell], secondary: list[float | None], rule: tuple[str, bool], labels: list[str]) -> None:
    """Within each set of cells sharing a rank (same coverage, equal value), order by the secondary value:
    rank = the shared rank + how many of the tied have a strictly better secondary value. A set where any
    lacks the secondary value, or all have the same, keeps its shared rank. Each cell whose tie was broken
    says with whom and by what."""
    name, higher = rule
    tied: dict[tuple, list[int]] = {}
    for i, c in enumerate(cells):
        if c.rank is not None:
            tied.setdefault((tuple(sorted(c.coverage)), c.rank), []).append(i)
    for (_, rank), members in tied.items():
        vals = [secondary[i] for i in members]
        if len(members) < 2 or any(v is None for v in vals) or len(set(vals)) == 1:
            continue
        for i in members:
            better = sum((secondary[j] > secondary[i]) if higher else (secondary[j] < secondary[i]) for j in members)
            cells[i].rank = rank + better
            others = ", ".join(labels[j] for j in members if j != i)
            cells[i].broken = (f"tied at {cells[i].score:.2f} with {others}; broken by {name} "
                               f"({secondary[i]:.3f}, {'higher' if higher else 'lower'} first)")


def _rules(ties: str, protocol: str, used: list[tuple[str, RowRule]]) -> list[str]:
    out = ["rank 1 = best, " + ("on each row's own quantity (equal values tie)" if protocol == "paper" else
                                "on each row's trust score (equal to 0.01: a tie)") + "; " + APART_RULE]
    if ties == "shared":
        out.append(f"ties (--ties shared): {SHARED_RULE}")
    else:
        named = [f"{row}: {rule.secondary[0]}" for row, rule in PAPER_ROW_RULES.items() if rule.secondary]
        out.append(f"ties (--ties paper): broken by the row's declared secondary value ({'; '.join(named)}; "
                   f"higher first), marked †; a row without one keeps them shared ({SHARED_RULE}), as the "
                   f"paper's table repeats ranks on rows other than Ethical Reasoning. A tie rule decides the "
                   f"displayed order only: it is no evidence that the order is real (the rank intervals are)")
    if protocol == "paper":
        out += [f"{row} ranks on {rule.basis} (evidence {rule.evidence or 'of its task'})" for row, rule in used]
        if any(rule.beside for _, rule in used):
            out.append("a row marked (trustmh: …) is trustmh's own quantity beside the paper's row, not a row of "
                       "the paper")
    return out


def _counted_rules(ents: list[Entry], rows: list[RankRow]) -> list[str]:
    """What the pillars count of a row where it is not the row's own value (the table keeps the rows' own):
    robustness rows their perturbed-input score, and a row a model is flagged as degenerate on, 0."""
    out = []
    if any(t.counted for e in ents for t in e.result.tasks.values() if t.status == "ok"):
        out.append("the pillars and the overall score count a robustness row as its base task's score on the "
                   "perturbed inputs (performance under perturbation), not the drop ranked here")
    shown = {t for r in rows for t in r.members}
    flagged = [f"{t.task}, {e.label}: {t.credit_note}" for e in ents for t in e.result.tasks.values()
               if t.task in shown and t.credit_note and t.credit_note.startswith("flagged")]
    if flagged:
        out.append("counted 0 in the pillars (the row keeps its own value and rank here): " + "; ".join(flagged))
    return out


def _run_of(rows: list[RankRow], k: int):
    """The rows from k on that share row k's pillar."""
    for r in rows[k:]:
        if r.pillar != rows[k].pillar:
            return
        yield r


def rank_records(table: RankTable) -> list[dict[str, Any]]:
    """One record per (row, model), row by row and in column order: what the CSV holds, and what the
    report's, the markdown's and the LaTeX table's cells show."""
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
            recs.append({"pillar": r.pillar, "row": r.row, "model": table.labels[i], "spec": table.specs[i],
                         "group": group_of.get(i, ""),
                         "trust_score": c.score, "rank": c.rank, "ranked_apart": c.apart, "tie_broken": c.broken,
                         "row_kind": r.kind, "ranked_on": r.ranked_on,
                         "value": r.values[i] if r.values else None, "evidence": r.evidence,
                         "bracket": _bracket(r, c, i), "undefined": c.undefined,
                         "rank_low": c.rank_ci[0] if c.rank_ci else None,
                         "rank_high": c.rank_ci[1] if c.rank_ci else None, "not_separated": c.near})
        out.append((r, recs))
    return out


def _bracket(r: RankRow, c: Cell, i: int) -> str:
    """The number in a cell's brackets: the value the row is ranked on (its own units for a row ranked on
    its quantity, the trust score otherwise); '' for a cell with no rank."""
    if c.rank is None:
        return ""
    if r.on_values and r.values and r.values[i] is not None:
        return f"{r.values[i]:.3f}"
    return "" if c.score is None else f"{c.score:.1f}"


def rank_text(rec: dict[str, Any]) -> str:
    """A cell's rank as every format shows it: '3', '3*' (ranked apart), '3†' (a tie broken), 'undefined'
    (the value is null), '' (no value)."""
    if rec["rank"] is None:
        return UNDEFINED if rec.get("undefined") else ""
    return f"{rec['rank']}{'*' if rec['ranked_apart'] else ''}{'†' if rec['tie_broken'] else ''}" \
           f"{'≈' if rec.get('not_separated') else ''}"


def interval_text(rec: dict[str, Any]) -> str:
    """A rank's bootstrap interval as every format shows it: '[1–3]', '' where there is none."""
    return "" if rec.get("rank_low") is None else f"[{rec['rank_low']}–{rec['rank_high']}]"


def score_text(rec: dict[str, Any]) -> str:
    """What a ranked cell's brackets hold: the value its row is ranked on."""
    return rec["bracket"]


def cell_text(rec: dict[str, Any], dash: str = "–") -> str:
    """A cell as the markdown and LaTeX tables write it: 'rank (value)', 'undefined', or `dash` (no value)."""
    if rec["rank"] is None:
        return rank_text(rec) or dash
    return " ".join(x for x in (rank_text(rec), interval_text(rec), f"({score_text(rec)})") if x)


def row_text(r: RankRow) -> str:
    return f"{r.row}{' (beyond the paper)' if r.beyond else ''}"


CSV_COLUMNS = ["pillar", "row", "model", "spec", "group", "trust_score", "rank", "ranked_apart", "tie_broken",
               "row_kind", "ranked_on", "value", "evidence", "bracket", "undefined", "rank_low", "rank_high",
               "not_separated"]


def rank_csv(table: RankTable, values: str = "") -> str:
    """The rank table's records as CSV; `values`, when given, a last column saying what every value is
    (`--calibrated`: anchored to clinicians' ratings), so that the file says it without its command line."""
    if not values:
        return csv_text(list(CSV_COLUMNS), rank_records(table))
    return csv_text([*CSV_COLUMNS, "values"], ({**r, "values": values} for r in rank_records(table)))


def rank_markdown(table: RankTable) -> str:
    """The rank table as the paper draws it: rows by pillar, one column per model, rank (trust score) in each
    cell; a rank among models measured on other tasks than most carries a *, a broken tie a †; the rules
    under it."""
    labels = [markdown_cell(table.labels[i]) for i in table.columns]
    lines = []
    if table.groups:
        lines.append("groups: " + "; ".join(f"{markdown_cell(g)}: {', '.join(labels[k:k + n])}" for (g, n), k in
                                             zip(table.groups, _starts(table.groups))))
        lines.append("")
    lines += ["| pillar | subtask | " + " | ".join(labels) + " |", "|---|---|" + "---:|" * len(labels)]
    for r, recs in rank_grid(table):
        cells = [cell_text(rec) for rec in recs]
        lines.append(f"| {r.pillar if r.span else ''} | {row_text(r)} | " + " | ".join(cells) + " |")
    # A rule may quote a run's own text (a model's label, a reason): its control characters made visible
    lines += [""] + [f"- {printable(rule)}." for rule in table.rules]
    lines += [f"- {BRACKETS}."]
    return "\n".join(lines) + "\n"


def _starts(groups: list[tuple[str, int]]) -> list[int]:
    out, k = [], 0
    for _, n in groups:
        out.append(k)
        k += n
    return out


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "†": r"\textsuperscript{\dag}",
        "≈": r"$\approx$",
        "–": "\\textendash{}", "≥": r"$\geq$", "…": r"\ldots{}"}


def tex(text: str) -> str:
    """Text set as itself in LaTeX: every special character escaped, control characters made visible
    (escaping.printable), tab and newline dropped, and "--" kept two hyphens (LaTeX would set an en dash)."""
    return "".join(_TEX.get(ch, ch) for ch in printable(str(text)) if ch >= " ").replace("--", "-{}-").replace(
        "-{}--", "-{}-{}-")


def rank_latex(table: RankTable) -> str:
    """The rank table as a LaTeX table float (booktabs; graphicx for the turned model names past six columns):
    the pillar named on its first row, a rule between pillars, a row per subtask, a column per model under its
    group, each cell the rank (marked * and † as in the report) with the trust score in brackets; the rules as
    the table's notes."""
    labels = [table.labels[i] for i in table.columns]
    turned = len(labels) > 6
    head = [r"\rotatebox{90}{" + tex(x) + "}" if turned else tex(x) for x in labels]
    lines = ["% trustmh report --format latex: needs \\usepackage{booktabs" + (",graphicx" if turned else "") + "}",
             r"\begin{table}[t]", r"\centering", r"\small",
             r"\resizebox{\linewidth}{!}{%" if turned else "%",  # twelve models: the table is scaled to the text
             r"\begin{tabular}{ll" + "c" * len(labels) + "}", r"\toprule"]
    if table.groups:
        lines.append(" & & " + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{tex(g)}}}" for g, n in table.groups) + r" \\")
        lines.append(" ".join(rf"\cmidrule(lr){{{k + 3}-{k + n + 2}}}" for (_, n), k in
                              zip(table.groups, _starts(table.groups))))
    lines += ["Pillar & Subtask & " + " & ".join(head) + r" \\", r"\midrule"]
    from ..scoring.pillars import PILLAR_NAMES
    grid = rank_grid(table)
    for k, (r, recs) in enumerate(grid):
        if r.span and k:
            lines.append(r"\midrule")
        pillar = tex(PILLAR_NAMES.get(r.pillar, r.pillar)) if r.span else ""  # on its first row
        cells = [tex(cell_text(rec)) for rec in recs]
        lines.append(f"{pillar} & {tex(row_text(r))} & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}" + ("}" if turned else ""), r"\par\smallskip",
              r"\parbox{\linewidth}{\footnotesize " + " ".join(tex(rule[0].upper() + rule[1:]) + "." for rule in
                                                               table.rules)
              + " " + tex(BRACKETS) + ".}",
              r"\caption{TrustMH-Bench ranks per subtask (rank 1 = best).}", r"\label{tab:trustmh-ranks}",
              r"\end{table}"]
    return "\n".join(lines) + "\n"


# --- rank intervals (INFERENCE.md §6) ----------------------------------------------------------------------
# A rank from point values hides that two models are within noise of each other. Each row's ranks are
# bootstrapped: the items (clusters) the ranked models share are resampled jointly for all of them (one set of
# cluster picks per task, Hall & Miller 2009), each draw's values ranked as the table ranks them (competition
# ranking, higher first), and each model's rank interval is the 2.5-97.5 % quantiles of its draws' ranks. A
# model whose draws put it above the model ranked just below it in fewer than 1 - alpha/2 of the draws is
# not separated from it at alpha (two-sided); the lower one is marked ≈.



def joint_draws(tables: list[Table], statistic: Callable[[Table, Resamples], np.ndarray], n_boot: int,
                seed: int) -> np.ndarray:
    """(n_boot x models) draws of `statistic` on each model's table, every table resampled with the same
    cluster picks. The tables hold the same keys in the same order (the items all the models answered)."""
    if not tables or len(tables[0]) == 0:
        return np.full((n_boot, len(tables)), math.nan)
    inverse, _, size, _ = cluster_layout(tables[0].clusters)
    parts = []
    for picks in pick_blocks(len(size), np.random.default_rng(seed), n_boot):
        resamples = Resamples(inverse, block_weights(picks, len(size)))
        parts.append(np.stack([np.broadcast_to(np.asarray(statistic(t, resamples), dtype=float), (len(picks),))
                               for t in tables], axis=1))
    return np.concatenate(parts)


def rank_intervals(draws: np.ndarray, alpha: float = ALPHA) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Each column's rank interval over the draws (rows: draws, columns: models, higher is better; a NaN draw
    ranks last), and above[i, j]: the share of draws where model i is strictly above model j."""
    keys = np.where(np.isnan(draws), -np.inf, draws)
    ranks = 1 + (keys[:, None, :] > keys[:, :, None]).sum(axis=2)  # per draw, per model: 1 + how many above
    lo = np.quantile(ranks, alpha / 2, axis=0, method="lower")
    hi = np.quantile(ranks, 1 - alpha / 2, axis=0, method="higher")
    above = (keys[:, :, None] > keys[:, None, :]).mean(axis=0)
    return [(int(a), int(b)) for a, b in zip(lo, hi)], above


def _row_draws(r: RankRow, members, ents: list[Entry], ranked: list[int], quantity: str, n_boot: int,
               rows_of) -> np.ndarray | None:
    """(draws x ranked models) of the row's ranked value (its trust score, or `quantity`/its values with the
    row's sign), averaged over its tasks; None where a model's samples are not there."""
    from ..analysis.runs import run_context
    from ..tasks import TASKS
    per_task = []
    for tid in members:
        got = [rows_of(ents[i]).get((ents[i].model, tid)) for i in ranked]
        if any(g is None for g in got) or tid not in TASKS:
            if all(ents[i].result.tasks.get(tid) is None for i in ranked):
                continue  # a tier no ranked model has (the coverage is the same for all)
            return None
        keys = [k for k in got[0].keys if all(k in g for g in got[1:])]
        if not keys:  # no item every ranked model answered: nothing to resample jointly
            return None
        task, ctx = TASKS[tid](), run_context(ents[ranked[0]].run)
        method, name = task.method(ctx), quantity or task.metric.name
        tr = ents[ranked[0]].result.tasks[tid]

        def statistic(table, resamples, method=method, name=name, ctx=ctx, tr=tr):
            many = method.aggregate_many(table, resamples, ctx)
            if many is None:
                order, size, start = cluster_layout(table.clusters)[1:]
                picks = _picks_of(resamples)
                many = per_resample(lambda t: method.aggregate(t, ctx), table, picks, order, size, start)
            v = np.asarray(many.get(name, math.nan), dtype=float)
            if r.on_values:
                return v if r.higher_is_better else -v
            zero, full = tr.trust_range or (0.0, 1.0)  # the values mapped to trust 0 and 100
            return to_trust(v, min(zero, full), max(zero, full), zero < full)
        per_task.append(joint_draws([g.table(keys) for g in got], statistic, n_boot,
                                    derived_seed(0, f"ranks|{r.row}|{tid}")))
    return np.mean(np.stack(per_task), axis=0) if per_task else None


def _picks_of(resamples: Resamples) -> np.ndarray:
    """Cluster picks with the resamples' weights (the order within a resample does not change a metric)."""
    return np.stack([np.repeat(np.arange(w.size), w.astype(int)) for w in resamples.weights])


def add_rank_intervals(table: RankTable, ents: list[Entry], n_boot: int = RANK_BOOT, alpha: float = ALPHA) -> None:
    """Set every ranked cell's rank interval and its ≈ mark (not separated from the model ranked just above
    it, at `alpha`), from the runs' samples; a row whose samples are not all there gets none, and the rules say
    so."""
    from ..analysis.runs import read_rows
    cache: dict[str, dict] = {}

    def rows_of(e: Entry) -> dict:
        key = str(e.run.dir)
        if key not in cache:
            cache[key] = read_rows(e.run) if e.run.samples_path.is_file() else {}
        return cache[key]

    missing = []
    for r in table.rows:
        ranked = [i for i, c in enumerate(r.cells) if c.rank is not None and not c.apart]
        if len(ranked) < 2:
            continue
        rule = PAPER_ROW_RULES.get(r.row, RowRule()) if r.kind == "paper" and table.protocol == "paper" else RowRule()
        members = r.members or (r.row,)
        draws = _row_draws(r, members, ents, ranked, rule.quantity if r.kind == "paper" else "", n_boot, rows_of)
        if draws is None:
            missing.append(r.row)
            continue
        intervals, above = rank_intervals(draws, alpha)
        for k, i in enumerate(ranked):
            r.cells[i].rank_ci = intervals[k]
        by_rank = sorted(range(len(ranked)), key=lambda k: (r.cells[ranked[k]].rank, ranked[k]))
        for upper, lower in zip(by_rank, by_rank[1:]):
            # two-sided p of "no difference": twice the smaller share of draws on either side of a tie
            p = min(1.0, 2 * min(1 - above[upper, lower], 1 - above[lower, upper]))
            if above[upper, lower] < 1 - alpha / 2:
                r.cells[ranked[lower]].near = (f"not separated from {table.labels[ranked[upper]]} at alpha {alpha:g} "
                                               f"(level with or above it in {1 - above[upper, lower]:.0%} of the "
                                               f"draws, p = {p:.2f}, unadjusted)")
    table.rules.insert(2, f"[a–b]: the rank's {1 - alpha:.0%} bootstrap interval (the items the row's models share "
                          f"resampled jointly, {n_boot} draws); ≈: not separated at alpha {alpha:g} from the model "
                          f"ranked just above (each adjacent pair tested on its own, p unadjusted for the row's "
                          f"other pairs)" + (f"; no interval for {', '.join(missing)}: the runs' samples are not "
                                                  f"all there" if missing else ""))
