"""The terminal rendering: progress bars and notices while a run goes, the summary tables after it, the
dry run's table of planned calls, and report.html written beside a run's results."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.markup import escape
from rich.table import Table as RichTable
from rich.text import Text

from ._base import err, out


class _ProgressView:
    """Renders the engine's events: a rich bar per phase while it runs, notices as they come, and the
    run's totals at the end. With bars off (not a terminal, --no-progress) only notices and totals show."""

    def __init__(self, bars: bool):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
            TimeRemainingColumn
        self.bars = Progress(TextColumn("{task.description:<28}", markup=False), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[errors]}", style="red"), TextColumn("{task.fields[rate]}"),
                             TimeElapsedColumn(), TimeRemainingColumn(), console=err, disable=not bars)
        self.ids: dict[tuple[str, str], object] = {}

    def __enter__(self):
        self.bars.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bars.__exit__(*exc)

    def __call__(self, event) -> None:
        from ..engine import Notice, PhaseProgress, PhaseStarted, RunTotals
        if isinstance(event, PhaseStarted):
            key = (event.phase, event.label)
            if key not in self.ids:
                self.ids[key] = self.bars.add_task(event.label, total=event.total, errors="", rate="")
        elif isinstance(event, PhaseProgress):
            tid = self.ids.get((event.phase, event.label))
            if tid is not None:
                self.bars.update(tid, completed=event.done, total=event.total,
                                 errors=f"{event.errors} errors" if event.errors else "",
                                 rate=f"{event.rate:.1f}/s" if event.rate else "")
        elif isinstance(event, Notice):
            self.bars.console.print(f"note: {event.text}", style="yellow", markup=False, highlight=False)
        elif isinstance(event, RunTotals):
            calls = ", ".join(f"{k} {v}" for k, v in event.requests.items())
            err.print(f"calls made: {calls or 'none'}; tokens stored: {event.prompt_tokens} prompt, "
                      f"{event.completion_tokens} completion; {event.seconds:.1f} s "
                      f"(scoring {event.scoring_seconds:.1f} s)", markup=False, highlight=False)


def _pillar_summary(mr) -> None:
    """The paper's pillars with what each rests on; the overall score says how many pillars it covers."""
    table = RichTable(title=f"{mr.model}: pillars (trustmh's aggregation; the paper publishes ranks only)",
                      title_justify="left")
    for col in ("pillar", "trust", "~95% CI", "rows", "samples", ""):
        table.add_column(col, justify="left" if col in ("pillar", "") else "right", no_wrap=True)
    for p in mr.pillars.values():
        if p.trust_score is None:
            table.add_row(p.pillar, "-", "", f"0 of {p.n_rows}", str(p.n_samples), "not measured")
            continue
        ci = "" if p.ci is None else f"[{p.ci[0]:.1f}, {p.ci[1]:.1f}]"
        table.add_row(p.pillar, f"{p.trust_score:.1f}", ci, f"{p.n_rows_measured} of {p.n_rows}", str(p.n_samples),
                      "partial" if p.partial else "")
    overall = "-" if mr.trust_score is None else f"{mr.trust_score:.1f}"
    ci = "" if mr.trust_ci is None else f"[{mr.trust_ci[0]:.1f}, {mr.trust_ci[1]:.1f}]"
    table.add_row("overall", overall, ci, f"{mr.n_pillars_measured} of {mr.n_pillars} pillars", "",
                  "partial" if mr.partial else "", style="bold")
    out.print(table)
    if mr.beyond_paper:
        shown = ", ".join(f"{t} {'-' if v is None else f'{v:.1f}'}" for t, v in mr.beyond_paper.items())
        out.print(f"beyond the paper (in no pillar): {shown}", markup=False, highlight=False)


# Short headers under 120 columns (each explained below the table), so all ten columns fit at 80.
_NARROW = {"95% CI": "95%\nCI", "no answer": "no\nans", "unscored": "unsc", "judge failed": "judge\nfail",
           "errors": "err"}


def _summary(results) -> None:
    from ..pillars import judge_mark
    if results.banner:  # above and below: the tables between are long, and either end may be all one reads
        out.print(results.banner, style="bold yellow", markup=False, highlight=False, soft_wrap=True)
    for model, mr in results.models.items():
        # Under 120 columns the frame goes (lines between columns only) so that all ten columns still fit
        # at 80 without any header cut to an ellipsis.
        narrow = out.width < 120
        table = RichTable(title=f"{model}", title_justify="left", box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD,
                          pad_edge=not narrow, padding=(0, 0 if narrow else 1))
        for col in ("task", "metric", "value", "95% CI", "n", "no answer", "unscored", "judge failed", "errors",
                    "trust"):
            # Task ids are what users copy into --tasks and gate thresholds: never cut or wrap them.
            table.add_column(_NARROW.get(col, col) if narrow else col,
                             justify="right" if col not in ("task", "metric") else "left",
                             no_wrap=col in ("task", "value", "95% CI", "trust"),
                             min_width=max(map(len, (_NARROW.get(col, col) if narrow else col).split())))
        not_run = []
        for t in mr.tasks.values():
            if t.status != "ok":
                # The reason goes on its own line below the table: in a cell it squeezed every other
                # column to a sliver at 80 or 120 columns. It is text, never markup ('trustmh[hf]').
                table.add_row(t.task, t.metric, Text("not run", style="yellow"), "", "", "", "", "", "", "")
                not_run.append(f"  {t.task}: not run: {(t.reason or '').split(' — ')[0]}")
                continue
            val = ("undefined" if t.n else "-") if t.value is None else f"{t.value:.3f}"
            if t.judge_usable_rate is not None:  # the primary judge's usable-verdict rate, beside the value
                bad = bool(judge_mark(t))
                val += f" {'[red]' if bad else ''}(judge {t.judge_usable_rate:.0%}{'!' if bad else ''}){'[/]' if bad else ''}"
            ci = "-" if t.ci is None else f"[{t.ci[0]:.3f}, {t.ci[1]:.3f}]"
            arrow = "↑" if t.higher_is_better else "↓"
            if t.base_metric:  # a relative measure: its base task's own value beside it
                val += f" (base {'-' if t.base_value is None else f'{t.base_value:.3f}'})"
            table.add_row(t.task, f"{t.metric} {arrow}", val, ci, str(t.n), str(t.n_no_answer), str(t.n_unscored),
                          f"[red]{t.n_judge_failed}[/]" if t.n_judge_failed else "0",
                          f"[red]{t.n_errors}[/]" if t.n_errors else "0",
                          "-" if t.trust_score is None else f"{t.trust_score:.1f}{'*' if t.undefined_by_model else ''}")
        out.print(table)
        if not_run:
            out.print("\n".join(not_run) + "\n  (how to get the data: `trustmh data check`)", style="yellow",
                      markup=False, highlight=False, soft_wrap=True)
        if narrow:
            out.print("  ".join(f"{v.replace(chr(10), ' ')} = {k}" for k, v in _NARROW.items() if k != "95% CI"),
                      markup=False, highlight=False)
        out.print("no answer: the model's own non-answers, counted against it in the value; unscored and judge "
                  "failed: left out of the value, not the model's doing", markup=False, highlight=False)
        undefined = [t for t in mr.tasks.values() if t.status == "ok" and t.undefined_by_model]
        if undefined:
            out.print("trust 0*: undefined by the model's replies, the worst score: " + "; ".join(
                f"{t.task}: {t.undefined_by_model}" for t in undefined), markup=False, highlight=False, soft_wrap=True)
        marked = [t for t in mr.tasks.values() if t.status == "ok" and judge_mark(t)]
        if marked:
            out.print("judge N%!: fewer than 95% of the judged samples had a usable verdict; the value rests on the "
                      "judge's fall-back reading: " + ", ".join(t.task for t in marked), style="red", markup=False,
                      highlight=False, soft_wrap=True)
        relative = [t for t in mr.tasks.values() if t.status == "ok" and t.base_metric]
        if relative:
            out.print("relative measures (base): a model that gives the same reply to everything scores near "
                      "perfect on them; read them beside the base value ("
                      + ", ".join(f"{t.task}: {t.base_metric}" for t in relative) + ")",
                      markup=False, highlight=False)
        _pillar_summary(mr)
    if len(results.models) > 1:
        _leaderboard(results)
    for note in results.notes:
        out.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    if results.banner:
        out.print(results.banner, style="bold yellow", markup=False, highlight=False, soft_wrap=True)


def _leaderboard(results) -> None:
    """One screen across models, last: the overall ordering and per-pillar trust with ranks, the same ranks the
    report and `trustmh report --format markdown` show (a * marks a rank among models measured on the same,
    incomplete set of tasks; those come after the complete ones)."""
    from ..compare import Run, entries
    from ..pillars import PILLAR_NAMES, judge_mark
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
        table.add_column(col, justify="left" if col in ("model", "marks") else "right", no_wrap=col != "marks")

    def cell(c) -> str:
        if c.score is None:
            return "-"
        return f"{c.score:.1f} #{c.rank}{'*' if c.apart else ''}"
    for i in board.order:
        e, oc = ents[i], board.cells[(i, "overall")]
        tasks = [t for t in e.result.tasks.values() if t.status == "ok"]
        marks = [f"{sum(bool(t.undefined_by_model) for t in tasks)} trust 0*",
                 f"{sum(bool(judge_mark(t)) for t in tasks)} judge!"]
        table.add_row("-" if oc.rank is None else f"{oc.rank}{'*' if oc.apart else ''}", escape(e.label),
                      cell(oc), *(cell(board.cells[(i, p)]) for p in pillars),
                      escape(", ".join(m for m in marks if not m.startswith("0 "))))
    out.print(table)
    out.print("marks: tasks at trust 0* (undefined by the model's replies) and tasks whose judge verdicts were "
              "unusable for more than 5% (judge!); the report has the paper's rank table per subtask",
              markup=False, highlight=False, soft_wrap=True)


def _dry_run(spec, run_dir: Path, prices=None) -> None:
    """Per task and model, the calls `run` would make (stored ones left out) and their estimated size;
    then per model and judge their estimated cost (`prices`: a prices.PriceTable)."""
    from ..engine import context, prepare
    from ..engine.plan import CHARS_PER_TOKEN, plan
    ctx = context(spec)
    prepared, _ = prepare(spec, ctx)
    rows = plan(spec, ctx, prepared, run_dir)
    table = RichTable(title=f"dry run: calls a run into {run_dir} would make (nothing was called)",
                      title_justify="left")
    for col in ("task", "model", "samples", "model calls", "~prompt tokens", "judge calls", "~judge tokens", ""):
        table.add_column(col, justify="left" if col in ("task", "model", "") else "right", no_wrap=col == "task")
    for r in rows:
        table.add_row(r.task, r.model, str(r.samples), str(r.model_calls), str(r.model_tokens), str(r.judge_calls),
                      str(r.judge_tokens), escape(r.note))
    table.add_row("total", "", str(sum(r.samples for r in rows)), str(sum(r.model_calls for r in rows)),
                  str(sum(r.model_tokens for r in rows)), str(sum(r.judge_calls for r in rows)),
                  str(sum(r.judge_tokens for r in rows)), "", style="bold")
    out.print(table)
    judge = "rules judge: no judge calls" if spec.judge == "rules" else f"judge {spec.judge}"
    if spec.options.get("proxy_judge"):
        judge += f", proxy judge {spec.options['proxy_judge']}"
    out.print(f"prompt tokens are an estimate (characters / {CHARS_PER_TOKEN}); for replies not stored yet, "
              f"judge calls assume every reply is judged and judge prompts leave out the reply's text; {judge}",
              markup=False, highlight=False)
    _cost_table(rows, spec, prices)


def _cost_table(rows, spec, prices=None) -> None:
    """The plan's estimated cost per tested model and judge, and the total, from the price table."""
    from ..prices import DEFAULT_COMPLETION_TOKENS, load_prices, plan_costs, total_cost
    table_of = prices or load_prices()
    lines = plan_costs(rows, spec, table_of)
    table = RichTable(title="ESTIMATED cost (list prices, token estimates; not a bill)", title_justify="left")
    for col in ("", "spec", "calls", "~prompt tokens", "~completion tokens", "USD / M in, out", "~USD"):
        table.add_column(col, justify="left" if col in ("", "spec") else "right")
    for line in lines:
        price = line.price
        shown = "no price" if price is None else ("local: free" if price.source == "local" else
                                                  f"{price.input_per_mtok:g}, {price.output_per_mtok:g}")
        table.add_row(line.role, escape(line.spec), str(line.calls), str(line.prompt_tokens),
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


def _write_report(run_dir: Path) -> None:
    """report.html next to results.json. The results are already on disk, so a failure here is shown and
    the command goes on: it never costs a run its results."""
    try:
        from ..report import write_report
        # Ties by overlapping intervals here: a paired bootstrap re-runs every task's aggregation and could
        # add minutes to a run; `trustmh report RUN` redoes the page with the paired test.
        path = write_report([run_dir], run_dir / "report.html", paired=False)
    except Exception as e:  # noqa: BLE001 - any report bug must not fail a finished run
        err.print(f"[yellow]report.html not written ({escape(type(e).__name__)}: {escape(str(e))}); results are "
                  f"intact; retry with `trustmh report {escape(str(run_dir))}`[/]")
        return
    out.print(f"report:  {path}")

