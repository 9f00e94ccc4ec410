"""`trustmh report`, `compare` and `gate`: what is read from finished runs."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from ._base import QUIET_HELP, _INCLUDE_HELP, _load_plugins, app, err, note, out, printable, set_quiet
from .formats import COMPARE, GATE, RANKS, REPORT


_TIES_HELP = ("The rank table's tie rule: paper (a tie broken by the row's declared secondary value, marked †; "
              "shared where a row has none) or shared (1, 2, 2, 4). Default: paper for runs under --protocol "
              "paper, else shared.")
_GROUP_HELP = ("LABEL=GROUP: a model's group in the rank table (e.g. general, mental-health); repeatable. LABEL is "
               "the model as listed (its spec, or 'spec @ run' when runs share one). Default: the run's model_groups.")


@app.command("report")
def report_cmd(
    runs: list[Path] = typer.Argument(..., help="Run directories (or their results.json); several are merged."),
    output: Optional[Path] = typer.Option(None, "--output", "-o",
                                          help="HTML file (default: RUN/report.html for one run, else report.html)."),
    samples: bool = typer.Option(True, help="Include the per-sample drill-down."),
    max_samples: int = typer.Option(50_000, help="Most samples embedded (the lowest-scoring of each model and task)."),
    samples_per_task: int = typer.Option(100, help="Most samples embedded per model and task: its lowest-scoring "
                                                   "(`trustmh view` pages through all of them)."),
    sample_mb: float = typer.Option(20.0, help="Most megabytes of sample data embedded (spread evenly over the "
                                               "models and tasks), so that the page opens in a browser."),
    page_size: int = typer.Option(50, help="Samples per page in the drill-down (0: all on one page)."),
    paired: bool = typer.Option(True, help="Mark ties in the leaderboard with a paired bootstrap when two models "
                                           "share a run (otherwise by overlapping 95% intervals)."),
    fmt: str = REPORT.option("html: the report; csv, markdown or latex: the paper's rank table alone (to --output, "
                             "else to stdout)."),
    group: list[str] = typer.Option([], "--group", help=_GROUP_HELP),
    ties: Optional[str] = typer.Option(None, "--ties", help=_TIES_HELP),
    figures: Optional[Path] = typer.Option(None, "--figures", help="Write the rank heat map and the pillar radar "
                                                                   "as SVG and PNG into this folder instead of "
                                                                   "the report (needs trustmh[figures])."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
    calibrated: bool = typer.Option(False, "--calibrated", help="With --format csv|markdown|latex: rank by the judged "
                                                               "values anchored to human ratings (trustmh annotate)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Write one self-contained HTML report: leaderboard, ranks, radar, per-task detail, samples, run spec."""
    set_quiet(quiet)
    from ..analysis.runs import load_run
    from ..files import check_output_target
    from ..report import write_report
    _load_plugins(include)
    REPORT.check(fmt)
    if samples_per_task < 1 or max_samples < 1:
        raise UserError("--samples-per-task and --max-samples must be at least 1")
    if not 0 < sample_mb < 1e6:
        raise UserError("--sample-mb must be a positive number of megabytes")
    groups = _groups(group)
    _check_ties(ties)
    loaded = [load_run(r) for r in runs]
    if figures is not None:
        from ..report.figures import write_figures
        ents, board, table, pillars = _rank_table(loaded, groups, ties)
        for path in write_figures(table, board, [e.label for e in ents], pillars, figures):
            out.print(f"figure: {path}", markup=False, highlight=False)
        return
    if fmt != "html":
        if calibrated:
            loaded = _calibrated_runs(loaded)
        _emit(_rank_text(loaded, fmt, groups, ties=ties, calibrated=calibrated), output)
        _skip_notes(loaded)
        return
    if calibrated:
        raise UserError("--calibrated goes with --format csv|markdown|latex (the HTML report shows both values side by side)")
    target = output or (loaded[0].dir / "report.html" if len(loaded) == 1 else Path("report.html"))
    check_output_target(target, [r.dir for r in loaded], "-o")  # never a run's own file, a link or a device
    read, t0 = [0], time.perf_counter()

    def work(progress):
        def both(done: int, total: int | None, label: str) -> None:
            if label == "reading samples":
                read[0] = done
            progress(done, total, label)
        return write_report(loaded, target, include_samples=samples, max_samples=max_samples, page_size=page_size,
                            paired=paired, groups=groups, progress=both, per_task=samples_per_task,
                            max_bytes=int(sample_mb * 1e6), ties=ties)
    path = _with_progress(work)
    note.print(f"report: {read[0]} samples read, page written in {time.perf_counter() - t0:.1f} s",
              markup=False, highlight=False)
    _skip_notes(loaded)
    out.print(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB)")


@app.command("view")
def view_cmd(
    runs: list[Path] = typer.Argument(..., help="Run directories (or their results.json); several are merged."),
    port: int = typer.Option(7575, help="Port on 127.0.0.1 (0: any free one)."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
) -> None:
    """Page through every sample of runs in a browser: a read-only server on 127.0.0.1 (filter by model, task,
    outcome; search), reading the runs' own files. Ctrl-C stops it."""
    from ..analysis.runs import load_run
    from ..report.viewer import make_server
    _load_plugins(include)
    if not 0 <= port <= 65535:
        raise UserError("--port must be 0 to 65535")
    loaded = [load_run(r) for r in runs]
    server = make_server(loaded, port)
    index = server.RequestHandlerClass.index
    out.print(f"trustmh view: {len(index.rows)} samples at {server.url} (read-only, for whoever has this URL's "
              f"token, this machine only; Ctrl-C stops it)", markup=False, highlight=False, soft_wrap=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _calibrated_runs(runs):
    """The runs as their calibrated values tell them (validation/calibrated.py `calibrated_view`)."""
    from ..analysis.runs import Run
    from ..validation.calibrated import calibrated_view
    return [Run(r.dir, calibrated_view(r.results)) for r in runs]


def _groups(pairs: list[str]) -> dict[str, str]:
    out_: dict[str, str] = {}
    for p in pairs:
        label, sep, grp = p.rpartition("=")
        if not sep or not label.strip() or not grp.strip():
            raise UserError(f"--group expects LABEL=GROUP, not '{p}'")
        out_[label.strip()] = grp.strip()
    return out_


def _check_ties(ties: str | None) -> None:
    from ..report.ranks import TIES
    if ties is not None and ties not in TIES:
        raise UserError(f"--ties must be {' or '.join(TIES)}, not '{ties}'")


def _rank_table(loaded, groups: dict[str, str], ties: str | None = None, n_boot: int = 200):
    """The runs' entries, leaderboard, rank table and pillars, in the report's overall ordering."""
    from ..analysis.runs import entries
    from ..report.leaderboard import leaderboard, task_meta
    from ..report.ranks import rank_table
    from ..tasks import PILLARS
    ents = entries(loaded, groups)
    metas = task_meta(ents)
    pillars = [p for p in PILLARS if any(m.pillar == p for m in metas.values())]
    board = leaderboard(ents, metas, pillars, paired=False, n_boot=n_boot)
    return ents, board, rank_table(ents, board, {e.label: e.group for e in ents if e.group}, ties), pillars


def _rank_text(loaded, fmt: str, groups: dict[str, str], *, ties: str | None = None, calibrated: bool = False) -> str:
    """The paper's rank table (subtask rows x models) as CSV, Markdown or LaTeX. Calibrated (--calibrated): the
    rules under it say so, and give the reason for every judged value without a calibrated one."""
    from ..validation.calibrated import calibrated_notes
    table = _rank_table(loaded, groups, ties)[2]
    if calibrated and fmt != "csv":  # under the table; the reasons hold run text: escaped for the format
        from ..escaping import markdown_cell
        notes = ["judged values are calibrated: anchored to clinicians' ratings (PPI++, trustmh annotate); trust, "
                 "pillar and overall scores computed from them", *(n for r in loaded for n in calibrated_notes(r.results, ""))]
        table.rules = [*table.rules, *(markdown_cell(n) if fmt == "markdown" else n for n in notes)]  # LaTeX: tex()
    if calibrated and fmt == "csv":  # a column says so on every row; a missing value's reason is its `undefined`
        return RANKS.writer(fmt)(table, values="calibrated: anchored to clinicians' ratings (PPI++)")
    return RANKS.writer(fmt)(table)


def _skip_notes(loaded) -> None:
    """What the readers left out of each run's samples.jsonl (analysis/runs.py), on stderr."""
    for r in loaded:
        if skipped := r.skip_note():
            err.print(f"warning: {skipped}", style="yellow", soft_wrap=True)


def _emit(text: str, output: Optional[Path]) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from ..files import atomic_write
    atomic_write(output, text)
    note.print(f"ranks: {output}", markup=False, highlight=False)


@app.command("compare")
def compare_cmd(
    runs: list[Path] = typer.Argument(..., help="Runs; every model is compared with the first model of the first run."),
    fmt: Optional[str] = COMPARE.option("The differences as a terminal table or a document; with --ranks, the rank "
                                        "table as csv, markdown (its default) or latex.", default=None),
    html: Optional[Path] = typer.Option(None, "--html", help="Also write the HTML report of these runs with the comparison."),
    all_metrics: bool = typer.Option(False, help="Compare every sub-metric too, not only primary metrics."),
    n_boot: int = typer.Option(1000, "--bootstrap", help="Paired bootstrap resamples."),
    seed: int = typer.Option(0, help="Seed of the paired bootstrap."),
    alpha: float = typer.Option(0.05, help="Significance level for the verdict column, which reads the adjusted "
                                           "p-value (--correction); the interval shown is the unadjusted (1 - alpha) "
                                           "interval of the same draws, so it excludes 0 exactly when the raw "
                                           "p < alpha."),
    correction: str = typer.Option("holm", "--correction", help="How the verdict column's p-values are adjusted "
                                                                "for the many differences of one call: holm "
                                                                "(family-wise error, the default), bonferroni or "
                                                                "none. Raw p and Benjamini-Hochberg q are shown "
                                                                "beside it."),
    ranks: bool = typer.Option(False, "--ranks", help="Print the paper's rank table (subtask rows x models) "
                                                      "instead of the differences (--format csv, markdown or "
                                                      "latex)."),
    group: list[str] = typer.Option([], "--group", help=_GROUP_HELP),
    ties: Optional[str] = typer.Option(None, "--ties", help=_TIES_HELP + " With --ranks."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Differences between models per task, pillar and overall: paired bootstrap CI over shared items, p-value."""
    set_quiet(quiet)
    _load_plugins(include)
    from ..analysis.compare import compare_runs
    from ..analysis.runs import load_run
    from ..analysis.compare_format import rich_tables
    if ranks:
        fmt = RANKS.check(fmt or RANKS.default, "--ranks --format")
    else:
        fmt = COMPARE.check(fmt or COMPARE.default)
    if not 0 < alpha < 1:
        raise UserError("--alpha must be between 0 and 1")
    if n_boot < 100:
        raise UserError("--bootstrap must be at least 100")
    _check_correction(correction)
    loaded = [load_run(r) for r in runs]
    if html:
        from ..files import check_output_target
        check_output_target(html, [r.dir for r in loaded], "--html")  # refused before any work is done
    _check_ties(ties)
    if ranks:
        _emit(_rank_text(loaded, fmt, _groups(group), ties=ties), None)
        _skip_notes(loaded)
        return
    comparisons = _with_progress(lambda progress: compare_runs(loaded, n_boot=n_boot, seed=seed,
                                                              all_metrics=all_metrics, level=1 - alpha,
                                                              progress=progress, correction=correction))
    if fmt == "table":
        for c, table in rich_tables(comparisons, alpha):
            for w in c.warnings:
                err.print(f"warning: {w}", markup=False, highlight=False)
            out.print(table)
    else:
        text = printable(COMPARE.writer(fmt)(comparisons, alpha))
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    _skip_notes(loaded)
    if html:
        from ..report import write_report
        write_report(loaded, html, comparisons=comparisons, groups=_groups(group), ties=ties)
        note.print(f"report: {html}", markup=False, highlight=False)


def _check_correction(correction: str) -> None:
    from ..analysis.multiplicity import CORRECTIONS
    if correction not in CORRECTIONS:
        raise UserError(f"--correction must be {', '.join(CORRECTIONS[:-1])} or {CORRECTIONS[-1]}, not '{correction}'")


def _with_progress(work):
    """Run `work(progress)` with a bar on stderr (shown only on a terminal): one step per comparison."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn("paired comparisons"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[label]}",
                                                                                        markup=False),
                  TimeElapsedColumn(), console=err, transient=True, disable=note.quiet) as bar:
        task = bar.add_task("compare", total=None, label="")

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, label=label)
        return work(progress)


@app.command("gate")
def gate_cmd(
    run_dir: Path = typer.Argument(..., help="The run to check (directory or results.json)."),
    min_: list[str] = typer.Option([], "--min", help="NAME=VALUE lower bound; repeatable. NAME: task id, "
                                                      "task:metric, pillar:<name> or overall."),
    max_: list[str] = typer.Option([], "--max", help="NAME=VALUE upper bound; repeatable."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML file with [min] and [max] tables "
                                                                        "(and optional baseline, alpha, max_unscored, "
                                                                        "allow_partial)."),
    baseline: Optional[Path] = typer.Option(None, help="Also fail on a regression against this run: a value worse by "
                                                        "more than its margin (--margin) with confidence, the "
                                                        "p-values of all comparisons adjusted together "
                                                        "(--correction)."),
    alpha: Optional[float] = typer.Option(None, help="Family-wise significance level for --baseline (default 0.05)."),
    correction: Optional[str] = typer.Option(None, "--correction", help="How --baseline's p-values are adjusted for "
                                                                      "its many comparisons: holm (the default: "
                                                                      "family-wise error at most alpha under any "
                                                                      "dependence), bonferroni or none."),
    margin: list[str] = typer.Option([], "--margin", help="NAME=δ: the non-inferiority margin of a --baseline "
                                                          "comparison, in the name's own units (a task's metric, "
                                                          "trust points for pillar:<name> and overall); task=δ sets "
                                                          "every task's as a share of its metric's range (default "
                                                          "0.02), pillar=δ every pillar's (default 2), overall "
                                                          "default 1. Repeatable; 0 tests for any regression."),
    n_boot: int = typer.Option(1000, "--bootstrap", help="Paired bootstrap resamples for --baseline."),
    seed: int = typer.Option(0, help="Seed of the paired bootstrap."),
    max_unscored: Optional[float] = typer.Option(
        None, "--max-unscored", help="Fail a checked task with more than this share of its samples left out of "
                                     "its metric (API errors, judge failures) or judge-failed, or of its judged "
                                     "samples with an unusable verdict (failed, or read by the paper's "
                                     "fall-back rule); every task when --baseline is given (default: the "
                                     "config's max_unscored, else 0.05)."),
    allow_partial: Optional[bool] = typer.Option(
        None, "--allow-partial/--no-allow-partial", help="Accept a checked pillar or overall score measured on fewer "
                                                         "rows or pillars than the paper has (default: the "
                                                         "config's allow_partial, else no)."),
    max_judge_addressed: Optional[int] = typer.Option(
        None, "--max-judge-addressed", help="Fail every task with more than this many judged replies that address "
                                            "the judge (a verdict in the judge's format, an instruction to an "
                                            "evaluator, the rubric's score lines, a closing tag); not checked "
                                            "by default."),
    calibrated: bool = typer.Option(False, "--calibrated", help="Check the judged values anchored to human ratings "
                                                               "(trustmh annotate, then score) instead of the judge's "
                                                               "own; a judged value without one fails with the reason. "
                                                               "--baseline's paired test stays on the judged values."),
    fmt: str = GATE.option("text: a FAIL line per failed check, then a summary line; json: every check, passed or "
                           "failed; junit: JUnit XML, a test case per check; github: GitHub Actions error "
                           "annotations. The exit code is the same in every format."),
) -> None:
    """Exit 0 when every threshold holds, 1 with one line per failure otherwise (2: bad names or input)."""
    from ..analysis.runs import load_run
    from ..analysis.gate import (GateConfig, check_baseline, check_bootstrap, check_coverage, check_input,
                                 check_judge_addressed, check_thresholds, load_config, parse_margin,
                                 parse_threshold)
    GATE.check(fmt)
    cfg = load_config(config) if config else GateConfig([])
    # The command line wins over the file, the file over the defaults.
    max_unscored = next(v for v in (max_unscored, cfg.max_unscored, 0.05) if v is not None)
    allow_partial = next(v for v in (allow_partial, cfg.allow_partial, False) if v is not None)
    if not 0 <= max_unscored <= 1:
        raise UserError("--max-unscored must be between 0 and 1")
    thresholds = cfg.thresholds + [parse_threshold(t, "min") for t in min_] + [parse_threshold(t, "max") for t in max_]
    base_path = baseline or (Path(cfg.baseline) if cfg.baseline else None)
    level = alpha if alpha is not None else (cfg.alpha if cfg.alpha is not None else 0.05)
    if not 0 < level < 1:
        raise UserError("--alpha must be between 0 and 1")
    if max_judge_addressed is not None and max_judge_addressed < 0:
        raise UserError("--max-judge-addressed must not be negative")
    if not thresholds and base_path is None and max_judge_addressed is None:
        raise UserError("nothing to check: give --min/--max thresholds, --config, --baseline or --max-judge-addressed")
    if base_path is None and (margin or correction is not None):
        raise UserError("--margin and --correction go with --baseline (they decide its comparisons)")
    correction = next(v for v in (correction, cfg.correction, "holm") if v is not None)
    _check_correction(correction)
    margins = {**(cfg.margins or {}), **dict(parse_margin(m) for m in margin)}
    if base_path is not None:
        check_bootstrap(n_boot)
    run = load_run(run_dir)
    check_input(run)  # fails closed: a file that cannot carry a verdict is exit 2, never a pass
    if calibrated:
        run = _calibrated_runs([run])[0]
    checks = check_thresholds(run, thresholds)
    checks += check_coverage(run, thresholds, max_unscored=max_unscored, allow_partial=allow_partial,
                             every_task=base_path is not None)
    if max_judge_addressed is not None:
        checks += check_judge_addressed(run, max_judge_addressed)
    warnings: list[str] = []
    about = ""
    if base_path is not None:
        base_run = load_run(base_path)
        check_input(base_run)
        more, warnings, about = check_baseline(run, base_run, alpha=level, n_boot=n_boot, seed=seed,
                                               correction=correction, margins=margins)
        checks += more
        if fmt not in ("json", "github"):  # those carry the warnings in the document itself
            for w in warnings:
                err.print(f"warning: {w}", markup=False, highlight=False)
    if not checks:  # a gate that checked nothing has not passed
        raise UserError("nothing was checked (no threshold applies to this run's models)")
    models = len(run.results.models)
    text = GATE.writer(fmt)(checks, models, warnings=warnings, clean=printable, about=about)
    sys.stdout.write(text)
    sys.stdout.flush()
    if any(not c.passed for c in checks):
        raise typer.Exit(1)
