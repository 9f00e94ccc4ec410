"""`trustmh panel`: one run judged by several judges, combined (trustmh.panel)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ._base import app, out


@app.command("panel")
def panel_cmd(
    runs: list[Path] = typer.Argument(..., help="The run and its re-judged copies (trustmh score RUN --judge J "
                                                "--out DIR), one per judge."),
    seed: int = typer.Option(0, help="Seed for the bootstrap of Krippendorff's alpha."),
    n_boot: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples for alpha's interval."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the panel as JSON to this file."),
) -> None:
    """A judge panel: per judged task each judge's value, the panel's (mean of scores, strict majority of
    labels; ties and too few usable verdicts are judge failures) and Krippendorff's alpha of the judges."""
    from rich.table import Table as RichTable
    from ..engine.rundir import atomic_write
    from ..panel import ALPHA_THRESHOLD, panel, to_json
    tasks = panel(runs, seed=seed, n_boot=n_boot)
    table = RichTable(title=f"judge panel: {', '.join(tasks[0].judges) if tasks else '-'}")
    for col in ("model", "task", "metric", "panel", "judges", "judge failures", "alpha", ""):
        table.add_column(col)

    def num(v) -> str:
        return "-" if v is None else f"{v:.3f}"

    for t in tasks:
        alpha = num(t.alpha) + (f" [{t.alpha_ci[0]:.2f}, {t.alpha_ci[1]:.2f}]" if t.alpha_ci else "")
        table.add_row(t.model, t.task, t.metric, num(t.value), " ".join(num(v) for v in t.judge_values.values()),
                      str(t.n_judge_failed), f"{alpha} ({t.alpha_level})",
                      f"[red]judges agree below {ALPHA_THRESHOLD}[/]" if t.low_agreement else "")
    out.print(table)
    if json_out is not None:
        atomic_write(json_out, json.dumps(to_json(tasks), indent=2, ensure_ascii=False))
        out.print(f"panel: {json_out}")
