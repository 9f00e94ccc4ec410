"""`trustmh report`, `compare` and `gate`: what is read from finished runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from ._base import _INCLUDE_HELP, _load_plugins, app, err, out


@app.command("report")
def report_cmd(
    runs: list[Path] = typer.Argument(..., help="Run directories (or their results.json); several are merged."),
    output: Optional[Path] = typer.Option(None, "--output", "-o",
                                          help="HTML file (default: RUN/report.html for one run, else report.html)."),
    samples: bool = typer.Option(True, help="Include the per-sample drill-down."),
    max_samples: int = typer.Option(50_000, help="Most samples embedded (the lowest-scoring of each model and task)."),
    page_size: int = typer.Option(50, help="Samples per page in the drill-down (0: all on one page)."),
    paired: bool = typer.Option(True, help="Mark ties in the leaderboard with a paired bootstrap when two models "
                                           "share a run (otherwise by overlapping 95% intervals)."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
) -> None:
    """Write one self-contained HTML report: leaderboard, ranks, radar, per-task detail, samples, run spec."""
    from ..compare import load_run
    from ..report import write_report
    _load_plugins(include)
    loaded = [load_run(r) for r in runs]
    target = output or (loaded[0].dir / "report.html" if len(loaded) == 1 else Path("report.html"))
    path = write_report(loaded, target, include_samples=samples, max_samples=max_samples, page_size=page_size,
                        paired=paired)
    out.print(f"report: {path}")


@app.command("compare")
def compare_cmd(
    runs: list[Path] = typer.Argument(..., help="Runs; every model is compared with the first model of the first run."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, markdown or csv."),
    html: Optional[Path] = typer.Option(None, "--html", help="Also write the HTML report of these runs with the comparison."),
    all_metrics: bool = typer.Option(False, help="Compare every sub-metric too, not only primary metrics."),
    n_boot: int = typer.Option(1000, "--bootstrap", help="Paired bootstrap resamples."),
    seed: int = typer.Option(0, help="Seed of the paired bootstrap."),
    alpha: float = typer.Option(0.05, help="Significance level for the verdict column."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
) -> None:
    """Differences between models per task, pillar and overall: paired bootstrap CI over shared items, p-value."""
    _load_plugins(include)
    from ..compare import compare_runs, load_run, rich_tables, to_csv, to_json, to_markdown
    if fmt not in ("table", "json", "markdown", "csv"):
        raise UserError(f"--format must be table, json, markdown or csv, not '{fmt}'")
    if not 0 < alpha < 1:
        raise UserError("--alpha must be between 0 and 1")
    if n_boot < 100:
        raise UserError("--bootstrap must be at least 100")
    loaded = [load_run(r) for r in runs]
    comparisons = compare_runs(loaded, n_boot=n_boot, seed=seed, all_metrics=all_metrics)
    if fmt == "table":
        for c, table in rich_tables(comparisons, alpha):
            for w in c.warnings:
                err.print(f"warning: {w}", markup=False, highlight=False)
            out.print(table)
    else:
        text = {"json": to_json, "markdown": to_markdown, "csv": to_csv}[fmt](comparisons, alpha)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if html:
        from ..report import write_report
        write_report(loaded, html, comparisons=comparisons)
        err.print(f"report: {html}", markup=False, highlight=False)


@app.command("gate")
def gate_cmd(
    run_dir: Path = typer.Argument(..., help="The run to check (directory or results.json)."),
    min_: list[str] = typer.Option([], "--min", help="NAME=VALUE lower bound; repeatable. NAME: task id, "
                                                      "task:metric, pillar:<name> or overall."),
    max_: list[str] = typer.Option([], "--max", help="NAME=VALUE upper bound; repeatable."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML file with [min] and [max] tables "
                                                                        "(and optional baseline, alpha, max_unscored, "
                                                                        "allow_partial)."),
    baseline: Optional[Path] = typer.Option(None, help="Also fail on any significant regression against this run."),
    alpha: Optional[float] = typer.Option(None, help="Significance level for --baseline (default 0.05)."),
    n_boot: int = typer.Option(1000, "--bootstrap", help="Paired bootstrap resamples for --baseline."),
    seed: int = typer.Option(0, help="Seed of the paired bootstrap."),
    max_unscored: Optional[float] = typer.Option(
        None, "--max-unscored", help="Fail a checked task with more than this share of its samples left out of "
                                     "its metric (API errors, judge failures) or judge-failed (default: the "
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
) -> None:
    """Exit 0 when every threshold holds, 1 with one line per failure otherwise (2: bad names or input)."""
    from ..compare import load_run
    from ..gate import (GateConfig, check_baseline, check_coverage, check_judge_addressed, check_thresholds,
                        load_config, parse_threshold)
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
    run = load_run(run_dir)
    failures, n = check_thresholds(run, thresholds)
    failures += check_coverage(run, thresholds, max_unscored=max_unscored, allow_partial=allow_partial)
    if max_judge_addressed is not None:
        failures += check_judge_addressed(run, max_judge_addressed)
        n += sum(len(mr.tasks) for mr in run.results.models.values())
    if base_path is not None:
        more, warnings, m = check_baseline(run, load_run(base_path), alpha=level, n_boot=n_boot, seed=seed)
        for w in warnings:
            err.print(f"warning: {w}", markup=False, highlight=False)
        failures, n = failures + more, n + m
    for line in failures:
        out.print(f"FAIL {line}", markup=False, highlight=False, soft_wrap=True)
    if failures:
        raise typer.Exit(1)
    out.print(f"gate passed: {n} checks on {len(run.results.models)} model(s)", markup=False, highlight=False)

