"""`trustmh annotate`: clinicians rate a blind sample of a run's judged replies in a local page."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from ._base import _INCLUDE_HELP, _load_plugins, app, err, out


@app.command("annotate")
def annotate_cmd(
    runs: list[Path] = typer.Argument(..., help="Run directories whose judged replies are rated."),
    n: Optional[int] = typer.Option(None, "--n", help="Items to draw per run (default: 100, or all when fewer); "
                                                    "a uniform draw gives each task at least the 10 rated items a "
                                                    "calibrated value needs where N allows (the rest in proportion "
                                                    "to the tasks' sizes) and rates each drawn item's reply from "
                                                    "every model of the run; a stratified one draws N replies; "
                                                    "only for a new draw."),
    design: Optional[str] = typer.Option(None, "--design", help="uniform (default: every judged sample equally "
                                                                "likely) or stratified (by model, task and the "
                                                                "judge's verdict, probabilities recorded)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of a new draw (default 0)."),
    port: int = typer.Option(7576, help="Port on 127.0.0.1 (0: any free one)."),
    export: Optional[Path] = typer.Option(None, "--export", help="Write the ratings in validate-judge's format "
                                                                 "(.csv, or .jsonl) and exit, serving nothing."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
) -> None:
    """Rate a seeded sample of the runs' judged replies in a browser, blind to the model and the judge's verdict:
    a local server on 127.0.0.1 that keeps the draw and every rating in RUN/annotation.json (rerun to resume;
    several raters may take part). The ratings then calibrate the judged values (`trustmh score RUN`)."""
    from ..files import run_lock
    from ..validation import annotate
    _load_plugins(include)
    if design is not None and design not in ("uniform", "stratified"):
        raise UserError("--design must be uniform or stratified")
    if not 0 <= port <= 65535:
        raise UserError("--port must be 0 to 65535")
    loaded = annotate.load_runs(runs)
    with contextlib.ExitStack() as stack:
        for r in loaded:
            stack.enter_context(run_lock(r.dir, "annotate.lock", busy=f"another `trustmh annotate` is serving {r.dir}"))
        anns = [annotate.open_annotation(r, n, design, seed) for r in loaded]
        for r, a in zip(loaded, anns):  # said before anyone rates: what this draw cannot calibrate
            for task, why in annotate.plan_notes(a):
                err.print(f"note: {task} of {r.dir.name} will not reach a calibrated value: {why}", markup=False,
                          highlight=False)
        if export is not None:
            k = annotate.export(loaded, anns, export)
            out.print(f"export: {k} ratings to {export}", markup=False, highlight=False)
            return
        server = annotate.make_server(loaded, anns, port)
        total = sum(len(a.units) for a in anns)
        rated = sum(len({r['unit'] for r in a.ratings}) for a in anns)
        out.print(f"trustmh annotate: {total} items ({rated} rated so far) at {annotate.url(server)} "
                  f"(this machine only; keep the address to yourself; Ctrl-C stops it)", markup=False, highlight=False)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
