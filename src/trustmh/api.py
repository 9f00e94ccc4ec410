"""`trustmh.run`: the engine's run, then the run's report.html beside its results, as `trustmh run` writes
it (a script's run is read like any other)."""

from __future__ import annotations

from pathlib import Path

from .engine import Notice, RunSpec, ignore, run as engine_run
from .engine.spec import resolve


def run(spec: RunSpec, out: Path | None = None, *, report: bool = True, **options):
    """Run (or resume) an evaluation, write results.json, samples.jsonl and (unless `report` is False)
    report.html; returns (run dir, results, calls made). `options` are `trustmh.engine.run`'s. The spec is
    resolved as `trustmh run` resolves its flags (engine/spec.py `resolve`), so the same arguments make the
    same run either way."""
    run_dir, results, calls = engine_run(resolve(spec), out, **options)
    if report:
        try:
            from .report import write_report
            write_report([run_dir], run_dir / "report.html", paired=False)  # as `trustmh run`: fast ties
        except Exception as e:  # noqa: BLE001 - the results are on disk: a report bug must not lose them
            options.get("events", ignore)(Notice(f"report.html not written ({type(e).__name__}: {e}); results "
                                                 f"are intact; retry with `trustmh report {run_dir}`"))
    return run_dir, results, calls
