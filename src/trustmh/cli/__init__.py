"""The `trustmh` command line (typer). Only argument handling and printing live here: the shared apps and
consoles in _base, the commands grouped by concern (data_cmds, run_cmds, report_cmds) and the terminal
rendering in render. `main` stays here and looks `app` up in this module, so that it can be replaced."""

from __future__ import annotations

import atexit
import functools
import gc
import os
import platform
import sqlite3
import sys

# One BLAS thread, unless the user's environment says otherwise; read once, when numpy loads OpenBLAS, so set
# before anything imports numpy. A run's matrix products are small (a bootstrap block's 1000 x 40 weights
# times a task's per-cluster counts), and OpenBLAS's worker threads spin-wait after each one: a
# (1000 x 40) @ (40 x 64) product cost 2.8 ms of CPU with them and 0.19 ms without, on 2 cores, and they
# take the event loop's core while they spin. The products' values do not depend on the thread count.
# Not on ARM: torch's builds there do their own products with OpenBLAS too, and an hf/ model would generate
# on one thread (torch's x86 builds use MKL, which this variable does not touch).
if platform.machine().lower() not in ("aarch64", "arm64"):
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The youngest generation collected every 10,000 new container objects instead of 700: a run makes
# short-lived dicts, tuples and futures by the million (each call's request, reply, keys and events), nearly
# all freed by their reference counts, and the default threshold made ~800 collections and 70 of the middle
# generation at 4 models x --limit 40, 0.7 s of its ~12 s of CPU (0.2 s so; what start-up loads is frozen
# apart, _base.loading). Cyclic garbage waits a little longer for its collection; nothing else changes.
gc.set_threshold(10_000, *gc.get_threshold()[1:])

import typer

from ..errors import UserError
from ._base import PAPER_JUDGE, app, data_app, err, loading, out, set_quiet

with loading():
    # Importing the command modules registers their commands on `app`.
    from . import data_cmds, run_cmds, report_cmds, panel_cmds, annotate_cmds  # noqa: F401  (this order is --help's)
    from .render import _summary

__all__ = ["PAPER_JUDGE", "app", "data_app", "err", "main", "out", "_summary"]

_freeze_registered = False


@functools.lru_cache(maxsize=1)
def _command(typer_app):
    """What `typer_app(...)` calls: the click command typer builds from every command's signature (~20 ms),
    built once for main() called again in one process (the tests run the command line in-process hundreds
    of times); `app` itself where it was replaced by a callable. With app's pretty exceptions off,
    typer's exception hook would hand a traceback to Python's own: calling the command is calling `app`."""
    return typer.main.get_command(typer_app) if isinstance(typer_app, typer.Typer) else typer_app


def main() -> None:
    # The interpreter's exit collects garbage among everything still alive (a whole benchmark's samples,
    # caches and modules), several full passes; frozen first, the process ends without them (~0.2 s of a
    # small job's exit). Nothing is lost: every output is written and closed before the command returns.
    # Registered once a process: main() called again in one process (the tests, an embedding program)
    # would pile up one handler a call (and atexit.unregister does not find a builtin such as gc.freeze).
    global _freeze_registered
    if not _freeze_registered:
        atexit.register(gc.freeze)
        _freeze_registered = True
    try:
        # standalone mode: typer handles usage errors (exit 2) and --help itself. The name is fixed so that
        # `python -m trustmh` prints the same usage lines as the `trustmh` script.
        _command(app)(prog_name="trustmh")
    except UserError as e:
        # Plain text: a message quotes user input (--tasks 'foo[/]') and install hints ('trustmh[hf]').
        err.print(f"error: {e}", style="red", markup=False, highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except (OSError, sqlite3.Error) as e:
        # The machine, not trustmh: disk full, a read-only folder, too many open files. Every write is
        # atomic or a transaction, so what is on disk is as before; say what failed, on one line.
        where = f": {e.filename}" if getattr(e, "filename", None) else ""
        what = getattr(e, "strerror", None) or str(e) or type(e).__name__
        err.print(f"error: {what}{where}; nothing stored was damaged, rerun when this is fixed", style="red",
                  markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    finally:
        set_quiet(False)  # a --quiet command leaves no quiet console behind in this process

