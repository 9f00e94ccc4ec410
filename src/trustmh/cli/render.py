"""The terminal rendering: progress bars and notices while a run goes, the summary tables after it, the
dry run's table of planned calls, and report.html written beside a run's results."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.table import Table as RichTable
from rich.text import Text

from ._base import err, note, out, styled
from ..scoring.metrics import MIN_CLUSTERS, interval_note, too_few_clusters

# Every table here folds a cell too long for a narrow terminal onto the next line (overflow="fold"; cells
# wrap): rich's default cuts it to "0.1…", and every view of a number must show the whole number.

FEW_MARK = f"none (G<{MIN_CLUSTERS})"  # the interval cell of a task on too few clusters


class _ProgressView:
    """Renders the engine's events: one bar per phase (generate, judge, score: every model's added up, so
    the total is the run's from the start and the time left is true), below them a row per task in flight
    with its done / total, errors and failed judge calls, and notices as they come; the run's totals at the
    end. With bars off (not a terminal, --no-progress) only notices and totals show."""

    def __init__(self, bars: bool):
        bars = bars and not note.quiet  # --quiet
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        self.bars = Progress(TextColumn("{task.description:<34}", markup=False), BarColumn(bar_width=20),
                             TextColumn("{task.fields[count]}", markup=False),
                             TextColumn("{task.fields[extra]}", style="red", markup=False),
                             TimeElapsedColumn(), TimeRemainingColumn(), console=err, disable=not bars)
        self.parts: dict[tuple[str, str], tuple[int, int, int, bool]] = {}  # (phase, label): done, total, errors, ~
        self.phase_ids: dict[str, object] = {}
        self.task_ids: dict[tuple[str, str], object] = {}
        self.models: set[str] = set()

    def __enter__(self):
        self.bars.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bars.__exit__(*exc)

    def phase_totals(self, phase: str) -> tuple[int, int, int, bool]:
        """done, total, errors and whether the total is still an estimate, over every bar of the phase."""
        parts = [v for (ph, _), v in self.parts.items() if ph == phase]
        return (sum(v[0] for v in parts), sum(v[1] for v in parts), sum(v[2] for v in parts),
                any(v[3] for v in parts))

    def __call__(self, event) -> None:
        from ..engine import Notice, PhaseProgress, PhaseStarted, RunTotals, TaskProgress
        if isinstance(event, PhaseStarted):
            self.parts.setdefault((event.phase, event.label), (0, event.total or 0, 0,
                                                               event.estimated or event.total is None))
            self._draw(event.phase)
        elif isinstance(event, PhaseProgress):
            self.parts[(event.phase, event.label)] = (event.done, event.total or 0, event.errors,
                                                      event.estimated or event.total is None)
            self._draw(event.phase)
        elif isinstance(event, TaskProgress):
            self._task_row(event)
        elif isinstance(event, Notice):
            if not note.quiet:
                self.bars.console.print(f"note: {event.text}", style="yellow", markup=False, highlight=False)
        elif isinstance(event, RunTotals):
            calls = ", ".join(f"{k} {v}" for k, v in event.requests.items())
            note.print(f"calls made: {calls or 'none'}; tokens stored: {event.prompt_tokens} prompt, "
                      f"{event.completion_tokens} completion; {event.seconds:.1f} s "
                      f"(scoring {event.scoring_seconds:.1f} s)", markup=False, highlight=False)

    def _draw(self, phase: str) -> None:
        done, total, errors, approx = self.phase_totals(phase)
        fields = {"count": f"{done}/{'~' if approx else ''}{total}", "extra": f"{errors} errors" if errors else ""}
        if phase not in self.phase_ids:
            self.phase_ids[phase] = self.bars.add_task(phase, total=total or None, **fields)
        self.bars.update(self.phase_ids[phase], completed=done, total=total or None, **fields)

    def _task_row(self, e) -> None:
        self.models.add(e.model)
        key = (e.model, e.task)
        tid = self.task_ids.get(key)
        if e.finished:  # its calls are all stored: the summary reports it, the row goes
            if tid is not None:
                self.bars.remove_task(tid)
                self.task_ids[key] = None  # never shown again
            return
        if key in self.task_ids and tid is None:
            return
        turns = getattr(e, "turns", None)  # a conversation task: its conversations, and the turns stored so far
        extra = ", ".join(x for x in (f"{turns} turns" if turns is not None else "",
                                      f"{e.errors} errors" if e.errors else "",
                                      f"{e.judge_failed} judge failed" if e.judge_failed else "") if x)
        fields = {"count": f"{e.done}/{e.total}" + (" conversations" if turns is not None else ""), "extra": extra}
        if tid is None:
            label = f"  {e.task}" + (f" ({e.model})" if len(self.models) > 1 else "")
            self.task_ids[key] = self.bars.add_task(label, total=e.total or None, completed=e.done, **fields)
        else:
            self.bars.update(tid, completed=e.done, total=e.total or None, **fields)


def _pillar_summary(mr, name: str) -> None:
    """The pillars the run has tasks in, with what each rests on: the paper's, then those of one's own tasks
    (outside the overall score); the overall score says how many of the paper's pillars it covers. A pillar
    with no task in the run is left out (the overall row counts it)."""
    from ..tasks import paper_pillars
    paper_rows = paper_pillars()
    shown = [p for p in mr.pillars.values() if p.tasks]
    paper = any(p.pillar in paper_rows for p in shown)
    if not shown:
        return
    narrow = out.width < 120  # no frame: at 80 columns every cell reads whole
    title = "pillars (trustmh's aggregation; the paper publishes ranks only)" if paper else "pillars"
    table = RichTable(title=f"{name}: {title}", title_justify="left",
                      box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
    for col in ("pillar", "trust", "~95% CI", "rows", "samples", ""):
        table.add_column(col, justify="left" if col in ("pillar", "") else "right", overflow="fold")
    for p in shown:
        own = "" if p.pillar in paper_rows else "your own pillar, not in the overall score"
        if p.trust_score is None:
            table.add_row(p.pillar, "-", "", f"0 of {p.n_rows}", str(p.n_samples),
                          ", ".join(filter(None, ["not measured", own])))
            continue
        ci = "" if p.ci is None else f"[{p.ci[0]:.1f}, {p.ci[1]:.1f}]"
        table.add_row(p.pillar, f"{p.trust_score:.1f}", ci, f"{p.n_rows_measured} of {p.n_rows}", str(p.n_samples),
                      ", ".join(filter(None, ["partial" if p.partial else "", own])))
    if paper:
        overall = "-" if mr.trust_score is None else f"{mr.trust_score:.1f}"
        ci = "" if mr.trust_ci is None else f"[{mr.trust_ci[0]:.1f}, {mr.trust_ci[1]:.1f}]"
        table.add_row("overall", overall, ci, f"{mr.n_pillars_measured} of {mr.n_pillars} pillars", "",
                      "partial" if mr.partial else "", style="bold")
    out.print(table)
    if mr.beyond_paper:
        shown = ", ".join(f"{t} {'-' if v is None else f'{v:.1f}'}" for t, v in mr.beyond_paper.items())
        out.print(f"beyond the paper (in no pillar): {shown}", markup=False, highlight=False)


def _value_cells(t, base_sep: str = " ") -> tuple:
    from ..scoring.pillars import judge_mark
    val = ("undefined" if t.n else "-") if t.value is None else f"{t.value:.3f}"
    # too few clusters: a short mark in the cell (an 11-column table fits 120), the reason in the legend below
    ci = ((FEW_MARK if interval_note(t.ci, t.n_clusters) else "-") if t.ci is None
          else f"[{t.ci[0]:.3f}, {t.ci[1]:.3f}]")
    parts: list = [val]
    if t.judge_usable_rate is not None:  # the primary judge's usable-verdict rate, beside the value
        bad = bool(judge_mark(t))
        rate = f"(judge {t.judge_usable_rate:.0%}{'!' if bad else ''})"
        parts += [" ", (rate, "red") if bad else rate]
    fallback = t.metrics.get("judge_fallback_share")
    if fallback is not None and fallback.value:  # rubric answers read by the fall-back rule (no ANSWER:)
        parts += [" ", (f"(fall-back {fallback.value:.0%})", "red")]
    if t.panel is not None and t.panel.low_agreement:  # a judge panel that disagrees: its value is marked
        parts += [" ", ("(judges disagree!)", "red")]
    if t.base_metric:  # a relative measure: its base task's own value beside it
        parts.append(f"{base_sep}(base {'-' if t.base_value is None else f'{t.base_value:.3f}'})")
    return styled(*parts), ci


def _g(t) -> str:
    """G, the clusters the task's interval rests on (red below the minimum for an interval)."""
    if t.n_clusters is None:
        return "-"
    return _red(t.n_clusters) if too_few_clusters(t.n_clusters) else str(t.n_clusters)


def _red(n: int) -> str:
    return styled((str(n), "red")) if n else "0"


def _task_tables(mr, name: str) -> list[RichTable]:
    """The per-task table: one of ten columns from 120 columns on; under that (80 columns must read whole:
    task ids are never cut, they are what users copy into --tasks and gates) two tables, the values and
    then the counts they rest on, each with its full headers."""
    trust = lambda t: "-" if t.trust_score is None else f"{t.trust_score:.1f}{'*' if t.undefined_by_model else ''}"  # noqa: E731
    arrow = lambda t: "↑" if t.higher_is_better else "↓"  # noqa: E731
    ok = [t for t in mr.tasks.values() if t.status == "ok"]
    if out.width >= 120:
        table = RichTable(title=name, title_justify="left", box=box.HEAVY_HEAD)
        for col in ("task", "metric", "value", "95% CI", "n", "G", "no answer", "unscored", "judge failed", "errors",
                    "trust"):
            # headers of two words on two lines, and the interval's note folded: 11 columns fit 120
            table.add_column(col.replace(" ", "\n") if col in ("no answer", "judge failed") else col,
                             justify="right" if col not in ("task", "metric") else "left",
                             no_wrap=col in ("task", "value", "trust"))
        for t in mr.tasks.values():
            if t.status != "ok":
                table.add_row(t.task, t.metric, Text("not run", style="yellow"), "", "", "", "", "", "", "", "")
                continue
            table.add_row(t.task, f"{t.metric} {arrow(t)}", *_value_cells(t), str(t.n), _g(t), str(t.n_no_answer),
                          str(t.n_unscored), _red(t.n_judge_failed), _red(t.n_errors), trust(t))
        return [table]
    values = RichTable(title=f"{name}: values", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                       padding=(0, 1, 0, 0))
    for col in ("task / metric", "value", "95% CI", "trust"):
        values.add_column(col, justify="left" if col == "task / metric" else "right", overflow="fold")
    for t in mr.tasks.values():
        if t.status != "ok":
            values.add_row(t.task, Text("not run", style="yellow"), "", "")
            continue
        val, ci = _value_cells(t, "\n")
        values.add_row(f"{t.task}\n  {t.metric} {arrow(t)}", val, ci, trust(t))
    counts = RichTable(title=f"{name}: what each value rests on", title_justify="left", box=box.SIMPLE_HEAD,
                       pad_edge=False, padding=(0, 1, 0, 0))
    for col in ("task", "n", "G", "no\nanswer", "unscored", "judge\nfailed", "errors"):
        counts.add_column(col, justify="left" if col == "task" else "right", overflow="fold")
    for t in ok:
        counts.add_row(t.task, str(t.n), _g(t), str(t.n_no_answer), str(t.n_unscored), _red(t.n_judge_failed),
                       _red(t.n_errors))
    return [values, counts]


def _summary(results) -> None:
    from ..analysis.runs import model_labels
    from ..scoring.pillars import judge_mark
    if results.banner:  # above and below: the tables between are long, and either end may be all one reads
        out.print(results.banner, style="bold yellow", markup=False, highlight=False, soft_wrap=True)
    from ..engine.spec import limited_banner
    limited = limited_banner(results)
    if limited:
        out.print(limited, style="yellow", markup=False, highlight=False, soft_wrap=True)
    labels = model_labels(results)
    for model, mr in results.models.items():
        # a model's label, from --models FILE, with its spec once here; the leaderboard shows the label alone
        name = labels[model] if labels[model] == model or model in labels[model] else f"{labels[model]} ({model})"
        for table in _task_tables(mr, name):
            out.print(table)
        not_run = [f"  {t.task}: not run: {(t.reason or '').split(' — ')[0]}" for t in mr.tasks.values()
                   if t.status != "ok"]  # own lines: in a cell the reason squeezed every other column
        if not_run:
            data = any(" missing " in (t.reason or "") for t in mr.tasks.values() if t.status != "ok")
            out.print("\n".join(not_run) + ("\n  (how to get the data: `trustmh data check`)" if data else ""),
                      style="yellow", markup=False, highlight=False, soft_wrap=True)
        out.print("no answer: the model's own non-answers, counted against it in the value; unscored and judge "
                  "failed: left out of the value, not the model's doing", markup=False, highlight=False)
        few = [f"{t.task} (G = {t.n_clusters})" for t in mr.tasks.values()
               if t.status == "ok" and interval_note(t.ci, t.n_clusters)]
        if few:
            out.print(f"{FEW_MARK}: {too_few_clusters(0).split(':')[0]} for an interval or a test (fewer than "
                      f"{MIN_CLUSTERS}): " + ", ".join(few), markup=False, highlight=False)
        undefined = [t for t in mr.tasks.values() if t.status == "ok" and t.undefined_by_model]
        if undefined:
            out.print("trust 0*: undefined by the model's replies, the worst score: " + "; ".join(
                f"{t.task}: {t.undefined_by_model}" for t in undefined), markup=False, highlight=False)
        marked = [t for t in mr.tasks.values() if t.status == "ok" and judge_mark(t)]
        if marked:
            out.print("judge N%!: fewer than 95% of the judged samples had a usable verdict; the value rests on the "
                      "judge's fall-back reading: " + ", ".join(t.task for t in marked), style="red", markup=False,
                      highlight=False)
        for t in mr.tasks.values():  # a value that is not its protocol's full measurement, and why
            if t.status == "ok" and t.partial:
                out.print(f"{t.task} rests on: {t.partial}", style="yellow", markup=False, highlight=False,
                          soft_wrap=True)
        from .panel_cmds import panel_summary
        panel_summary(mr)  # a judge panel: each judge's value and the judges' agreement, low agreement marked
        counted = [t for t in mr.tasks.values() if t.status == "ok" and t.credit_note]
        if counted:  # what the pillars below count of a row, where it is not its own trust score
            out.print("counted in the pillars as other than its trust score (robustness: the score on perturbed "
                      "inputs; a row a degenerate behaviour reaches: 0 where the model is flagged for it): "
                      + "; ".join(f"{t.task}: {t.credit_note}" for t in counted), markup=False, highlight=False)
        _pillar_summary(mr, name)
    if len(results.models) > 1:
        _leaderboard(results)
    for note in results.notes:
        out.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    if results.banner:
        out.print(results.banner, style="bold yellow", markup=False, highlight=False, soft_wrap=True)


def _leaderboard(results) -> None:
    """One screen across models, last: the overall ordering and per-pillar trust with ranks, the same ranks the
    report and `trustmh report --format markdown` show (a * marks a rank among models measured on other tasks
    than most; those come after the others)."""
    from ..analysis.runs import Run, entries
    from ..scoring.pillars import PILLAR_NAMES, judge_mark
    from ..report.leaderboard import leaderboard, task_meta
    from ..tasks import PILLARS
    ents = entries([Run(Path("."), results)])
    metas = task_meta(ents)
    pillars = [p for p in PILLARS if any(m.pillar == p for m in metas.values())]
    board = leaderboard(ents, metas, pillars, paired=False, n_boot=0)
    table = RichTable(title="leaderboard (0-100 trust, #rank; * ranked only among models measured on the same tasks)",
                      title_justify="left", box=box.SIMPLE_HEAD)
    short = {"crisis": "Crisis", "sycophancy": "Anti-Syc."}  # the paper's names, short enough for one screen
    for col in ("#", "model", "overall", *(short.get(p, PILLAR_NAMES.get(p, p)) for p in pillars), "marks"):
        table.add_column(col, justify="left" if col in ("model", "marks") else "right", overflow="fold")

    def cell(c) -> str:
        if c.score is None:
            return "-"
        return f"{c.score:.1f} #{c.rank}{'*' if c.apart else ''}"
    for i in board.order:
        e, oc = ents[i], board.cells[(i, "overall")]
        tasks = [t for t in e.result.tasks.values() if t.status == "ok"]
        marks = [f"{sum(bool(t.undefined_by_model) for t in tasks)} trust 0*",
                 f"{sum(bool(judge_mark(t)) for t in tasks)} judge!"]
        table.add_row("-" if oc.rank is None else f"{oc.rank}{'*' if oc.apart else ''}", e.label,
                      cell(oc), *(cell(board.cells[(i, p)]) for p in pillars),
                      ", ".join(m for m in marks if not m.startswith("0 ")))
    out.print(table)
    out.print("marks: tasks at trust 0* (undefined by the model's replies) and tasks whose judge verdicts were "
              "unusable for more than 5% (judge!); the report has the paper's rank table per subtask",
              markup=False, highlight=False, soft_wrap=True)


def _dry_run(spec, run_dir: Path, prices=None) -> None:
    """Per task, the calls `run` would make (stored ones left out) and their estimated size, then one line
    per model and each reason a task cannot run, once; then per model and judge their estimated cost
    (`prices`: a prices.PriceTable)."""
    from ..engine import context, prepare, CHARS_PER_TOKEN, PLAN_ITEMS, plan
    ctx = context(spec)
    prepared, _ = prepare(spec, ctx, lazy=True)  # the plan builds what it needs (plan.sampled)
    rows = plan(spec, ctx, prepared, run_dir)
    ran = [r for r in rows if not r.note.startswith("not run")]
    models = list(dict.fromkeys(r.model for r in rows))
    fields = ("samples", "model_calls", "model_tokens", "judge_calls", "judge_tokens")

    def cells(group) -> list[str]:
        approx = "~" if any(r.estimated for r in group) else ""
        bound = "≤" if any(r.upper_bound for r in group) else ""  # calls and tokens, never the samples
        return [f"{(bound if f != 'samples' else '') + approx if n else ''}{n}"
                for f, n in ((f, sum(getattr(r, f) for r in group)) for f in fields)]

    table = RichTable(title=f"dry run: calls a run into {run_dir} would make (nothing was called)",
                      title_justify="left")
    for col in ("task", "model" if len(models) == 1 else "models", "samples", "model calls", "~prompt tokens",
                "judge calls", "~judge tokens", "G", "detectable"):
        table.add_column(col, justify="left" if col in ("task", "model", "models") else "right", overflow="fold")
    who = models[0] if len(models) == 1 else f"{len(models)} models"
    for task in dict.fromkeys(r.task for r in ran):  # one row per task, every model's calls added up
        mine = [r for r in ran if r.task == task]
        table.add_row(task, who, *cells(mine), *_power_cells(mine[0]))  # G and power: one model's samples
    table.add_row("total", "", *cells(ran), "", "", style="bold")
    out.print(table)
    if spec.limit is not None and ran:  # what --limit N takes, in items and in samples
        from ..engine.spec import describe_limit
        items = {p.task.id: p.n_items for p in prepared}
        first = [r for r in ran if r.model == models[0]]
        several = {r.task: (items[r.task], r.samples) for r in first if r.samples > items.get(r.task, r.samples)}
        out.print(describe_limit(spec.limit, sum(r.samples for r in first), several), markup=False,
                  highlight=False, soft_wrap=True)
    if len(models) > 1:
        per = RichTable(title="per model", title_justify="left")
        for col in ("model", "tasks", "samples", "model calls", "~prompt tokens", "judge calls", "~judge tokens"):
            per.add_column(col, justify="left" if col == "model" else "right", overflow="fold")
        for m in models:
            mine = [r for r in ran if r.model == m]
            per.add_row(m, str(len(mine)), *cells(mine))
        out.print(per)
    not_run: dict[str, list[str]] = {}  # reason -> tasks: the same for every model, and often for several tasks
    for r in rows:
        if r.note.startswith("not run") and r.task not in not_run.setdefault(r.note, []):
            not_run[r.note].append(r.task)
    for note, tasks in not_run.items():
        out.print(f"  {', '.join(tasks)}: {note}", style="yellow", markup=False, highlight=False, soft_wrap=True)
    judge = "; ".join(_role_text(role, r) for role, r in spec.roles().items())
    out.print(f"prompt tokens are an estimate (characters / {CHARS_PER_TOKEN}); for replies not stored yet, "
              f"judge calls assume every reply is judged and judge prompts leave out the reply's text (an upper "
              f"bound: a judgement whose body another sample's already asks is sent once, and replies that repeat "
              f"make fewer); "
              f"~ marks counts scaled up from {PLAN_ITEMS} items spread over a larger task; {judge}",
              markup=False, highlight=False)
    out.print("G: the clusters each model's values will be resampled by (under 5: no interval, no test). detectable: "
              "the smallest difference between two models a paired test at alpha 0.05 detects with 80% power (2.8 "
              "standard errors of the paired difference; Miller 2024, arXiv 2411.00640), assuming a 0-1 share at "
              "p = 0.5 and uncorrelated models: from the samples as independent units to the clusters as the units "
              "(a task whose samples within a cluster agree reaches only the second); raise --limit to lower it",
              markup=False, highlight=False, soft_wrap=True)
    _cost_table(rows, spec, prices)
    bounded = sorted({r.task for r in ran if r.upper_bound})
    if bounded:
        out.print(f"{', '.join(bounded)}: counted at the most turns and rubric questions they can take, so their "
                  f"calls, tokens and cost are upper bounds (≤)", markup=False, highlight=False, soft_wrap=True)


def _role_text(role: str, cast: dict) -> str:
    """'proxy judge openai/gpt-4 (the paper's)', or the paper's model beside one that is not it."""
    calls = ": no judge calls" if cast["model"] == "rules" else ""
    whose = "the paper's" if cast["is_paper"] else f"the paper's is {cast['paper_model']}"
    return f"{role.replace('_', ' ')} {cast['model']}{calls} ({whose})"


def _power_cells(row) -> tuple[str, str]:
    """A dry-run row's G and detectable difference (PlanRow.detectable), '~' when scaled from a sample."""
    d = row.detectable()
    approx = "~" if row.estimated else ""
    if d is None:
        return "", ""
    g = f"{approx}{row.clusters}" + (" (too few)" if too_few_clusters(row.clusters) else "")
    shown = f"{d[0]:.2f}" if abs(d[0] - d[1]) < 0.005 else f"{d[0]:.2f}–{d[1]:.2f}"
    return g, f"{approx}{shown}"


def _cost_table(rows, spec, prices=None) -> None:
    """The plan's estimated cost per tested model and judge, and the total, from the price table."""
    from ..engine import DEFAULT_COMPLETION_TOKENS, load_prices, plan_costs, total_cost
    table_of = prices or load_prices()
    lines = plan_costs(rows, spec, table_of)
    table = RichTable(title="ESTIMATED cost (list prices, token estimates; not a bill)", title_justify="left")
    for col in ("", "spec", "calls", "~prompt tokens", "~completion tokens", "USD / M in, out", "~USD"):
        table.add_column(col, justify="left" if col in ("", "spec") else "right", overflow="fold")
    for line in lines:
        price = line.price
        shown = "no price" if price is None else ("local: free" if price.source == "local" else
                                                  f"{price.input_per_mtok:g}, {price.output_per_mtok:g}"
                                                  + (" unverified" if price.unverified else ""))
        table.add_row(line.role, line.spec, str(line.calls), str(line.prompt_tokens),
                      str(line.completion_tokens), shown, "?" if line.cost is None else f"{line.cost:.2f}")
    total, unpriced = total_cost(lines)
    table.add_row("total", "", str(sum(x.calls for x in lines)), str(sum(x.prompt_tokens for x in lines)),
                  str(sum(x.completion_tokens for x in lines)), "",
                  f"{total:.2f}" + ("+?" if unpriced else ""), style="bold")
    out.print(table)
    note = (f"estimated total: ${total:.2f}" + (f" plus the calls of {', '.join(x.spec for x in unpriced)}, which "
                                                f"have no price (add them with --prices FILE.toml)" if unpriced else "")
            + f". Prices: {table_of.label()}. Completion tokens: the request's max_tokens where a task sets one "
              f"(an upper bound), else {DEFAULT_COMPLETION_TOKENS} a reply.")
    out.print(note, markup=False, highlight=False, soft_wrap=True)
    sources = {line.spec: line.price.source for line in lines if line.price is not None and line.calls
               and line.price.source != "local"}
    if sources:  # where each price used was read, and which were never checked
        out.print("price sources: " + "; ".join(f"{spec}: {src}" for spec, src in sources.items())
                  + (". An unverified price was not checked against its provider's pricing page: give your own "
                     "with --prices FILE.toml." if any(x == "unverified" for x in sources.values()) else ""),
                  markup=False, highlight=False, soft_wrap=True)


def _write_report(run_dir: Path) -> None:
    """report.html next to results.json. The results are already on disk, so a failure here is shown and
    the command goes on: it never costs a run its results."""
    try:
        from ..report import write_report
        # Ties by overlapping intervals here: a paired bootstrap re-runs every task's aggregation and could
        # add minutes to a run; `trustmh report RUN` redoes the page with the paired test.
        path = write_report([run_dir], run_dir / "report.html", paired=False)
    except Exception as e:  # noqa: BLE001 - any report bug must not fail a finished run
        err.print(f"report.html not written ({type(e).__name__}: {e}); results are intact; retry with "
                  f"`trustmh report {run_dir}`", style="yellow")
        return
    out.print(f"report:  {path}")

