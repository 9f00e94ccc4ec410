"""`trustmh panel`: one run judged by several judges, combined (trustmh.analysis.panel)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ._base import app, err, out, styled


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
    from ..files import atomic_write
    from ..analysis.panel import ALPHA_THRESHOLD, panel, to_json
    skipped: list[str] = []
    tasks = panel(runs, seed=seed, n_boot=n_boot, skipped=skipped)
    for note in skipped:
        err.print(f"warning: {note}", style="yellow", soft_wrap=True)
    table = RichTable(title=f"judge panel: {', '.join(tasks[0].judges) if tasks else '-'}")
    for col in ("model", "task", "metric", "panel", "judges", "judge failures", "alpha", ""):
        table.add_column(col, overflow="fold")

    def num(v) -> str:
        return "-" if v is None else f"{v:.3f}"

    for t in tasks:
        alpha = num(t.alpha) + (f" [{t.alpha_ci[0]:.2f}, {t.alpha_ci[1]:.2f}]" if t.alpha_ci else "")
        table.add_row(t.model, t.task, t.metric, num(t.value), " ".join(num(v) for v in t.judge_values.values()),
                      str(t.n_judge_failed), f"{alpha} ({t.alpha_level})",
                      styled((f"judges agree below {ALPHA_THRESHOLD}", "red")) if t.low_agreement else "")
    out.print(table)
    if json_out is not None:
        atomic_write(json_out, json.dumps(to_json(tasks), indent=2, ensure_ascii=False))
        out.print(f"panel: {json_out}")


def panel_summary(mr) -> None:
    """The terminal summary's judge panel table (a run judged by several --judge): per judged task the
    panel's value, each judge's own value and Krippendorff's alpha per value, the low ones marked."""
    from rich.table import Table as RichTable
    tasks = [t for t in mr.tasks.values() if t.status == "ok" and t.panel is not None]
    if not tasks:
        return
    judges = tasks[0].panel.judges
    table = RichTable(title=f"{mr.model}: judge panel", title_justify="left")
    for col in ("task", "panel", *judges, "alpha [95% CI] per value"):
        table.add_column(col, overflow="fold")

    def num(v) -> str:
        return "-" if v is None else f"{v:.3f}"

    for t in tasks:
        alphas = []
        for name, a in t.panel.agreement.items():
            cell = f"{name} {num(a.alpha)}" + (f" [{a.ci[0]:.2f}, {a.ci[1]:.2f}]" if a.ci else "") + f" ({a.level})"
            alphas.append((f"{cell}!", "red") if name in t.panel.low_agreement else cell)
        joined = [part for k, a in enumerate(alphas) for part in (("; ", a) if k else (a,))]
        table.add_row(t.task, num(t.value), *(num(t.panel.judge_values[j].value) if j in t.panel.judge_values else "-"
                                             for j in judges), styled(*joined))
    out.print(table)
    low = [t.task for t in tasks if t.panel.low_agreement]
    if low:
        out.print(f"judges disagree!: the panel's judges agree below alpha {tasks[0].panel.min_alpha} "
                  f"(--min-judge-alpha) on: {', '.join(low)}; read those values with care", style="red",
                  markup=False, highlight=False, soft_wrap=True)
