"""What every command shares: the typer apps, the two consoles, the help text of --include, and the
small checks of data dir, suite and limits several commands make."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.segment import Segment

from ..errors import UserError
from ..escaping import CONTROL, printable, styled  # noqa: F401 - what commands import from here

from ..judges import PAPER_JUDGE, PAPER_PROXY  # noqa: F401 - the paper's judges (engine/spec.py decides when)

# Help texts are plain text (rich_markup_mode None): "[min]" and "trustmh[hf]" show as written.
app = typer.Typer(add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Measure how far an LLM can be trusted in mental-health use (TrustMH-Bench method).")
data_app = typer.Typer(add_completion=False, help="Get and verify the upstream datasets.")
app.add_typer(data_app, name="data")


class _SafeConsole(Console):
    """A console that shows every text it is given as that text (escaping.py): control characters are
    made visible before rich reads a string (rich would drop some, BEL and CR among them, and pass the
    others), and neither rich markup nor emoji codes are read in one, so `[/x]` or `:cat:` in a name is
    printed as written. Styled text is built as rich Text (`styled`); a segment that still carries a
    control character when rendered is cleaned too. Rich's own control codes (styles, cursor moves) are
    segments of another kind and pass."""

    def __init__(self, **kw):
        super().__init__(markup=False, emoji=False, **kw)

    def render_str(self, text: str, **kw):
        return super().render_str(printable(text), **kw)

    def render(self, renderable, options=None):
        for seg in super().render(renderable, options):
            if not seg.control and CONTROL.search(seg.text):
                seg = Segment(printable(seg.text), seg.style, seg.control)
            yield seg


# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; give them room instead, unless
# COLUMNS says how wide the reader is (rich reads it when width is None).
_WIDE = None if os.environ.get("COLUMNS") else 160
out = _SafeConsole(width=None if sys.stdout.isatty() else _WIDE)  # what a command shows a person: tables, paths
err = _SafeConsole(stderr=True, width=None if sys.stderr.isatty() else _WIDE)  # errors and warnings: always
note = _SafeConsole(stderr=True, width=None if sys.stderr.isatty() else _WIDE)  # notes and progress lines
QUIET_HELP = ("Print nothing but errors and warnings: no progress bars, notes or summaries (a document asked for "
              "with --format still goes to standard output; the exit code says how it went).")


def set_quiet(quiet: bool) -> None:
    """--quiet: `out` and `note` print nothing; `err` still does. Reset when every command starts (the root
    callback) and ends (`main`), so a quiet command leaves no quiet console behind in the same process."""
    out.quiet = note.quiet = quiet
_INCLUDE_HELP = ("A Python file (or importable module name) defining tasks (@register) or model providers "
                 "(@register_model) to load first; repeatable. Installed plugins (entry points trustmh.tasks, "
                 "trustmh.models) load by themselves.")


@contextlib.contextmanager
def loading():
    """The collector off while a command's modules load, then what they made frozen: start-up makes some
    hundred thousand objects that live to the end (modules, classes, tables), and collecting while they
    pile up walks them all again and again (~45 ms of the ~0.4 s before a run's first request); frozen,
    no later collection walks them either. A block that loads nothing new (a command run again in the same
    process, as tests do) freezes nothing: what it made may be garbage soon."""
    was, before = gc.isenabled(), len(sys.modules)
    gc.disable()
    try:
        yield
    finally:
        if len(sys.modules) > before:
            gc.freeze()
        if was:
            gc.enable()


def _show_version(value: bool) -> None:
    if value:
        from .. import __version__
        out.print(f"trustmh {__version__}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Measure how far an LLM can be trusted in mental-health use (TrustMH-Bench method)."""
    set_quiet(False)


def _data_dir(data_dir: Optional[Path]) -> Path:
    if data_dir:
        return data_dir
    from ..data.fetch import default_data_dir  # with the download code (httpx only when it downloads)
    return default_data_dir()


def _choose_suite(suite: str, data_dir: Path, tasks: str | None = None) -> str:
    """The suite `auto` means here; `tasks` (a run's selection), when given and none of them reads a data
    file (a plugin's tasks with items of their own), leaves the note about the sample suite out: it would
    not be what the run rests on."""
    if suite in ("sample", "data"):
        return suite
    if suite != "auto":
        raise UserError(f"--suite must be auto, sample or data, not '{suite}'")
    from ..data.manifest import DATASETS
    from ..data.methods import DATASET as METHODS
    # Only the benchmark's own data decide: the authors' method files or a dataset fetched on request
    # (MentalAlign, for checking judges) are no task's items, and alone would run every task as "not run".
    present = any((data_dir / f.path).is_file() for d in DATASETS.values() if d.name != METHODS and not d.on_request
                  for f in d.files)
    if not present:
        if tasks is not None:
            from ..tasks import resolve_tasks
            if not any(t.files for t in resolve_tasks(tasks)):
                return "sample"
        note.print(f"No datasets in {data_dir}: using the built-in sample suite (a few items per task). "
                  f"Run `trustmh data pull` for the full benchmark.", style="yellow", markup=False, highlight=False)
        return "sample"
    return "data"


def _probe_spec(suite: str, ddir: Path):
    """A spec that only says where the data is (for listing and judge validation)."""
    from ..engine import RunSpec
    return RunSpec(models=["baseline/refuse"], suite=suite, data_dir=str(ddir))


def _limits(max_connections: int, timeout: float, max_retries: int, batch_size: int | None = None):
    from ..engine import Limits
    if max_connections < 1:
        raise UserError("--max-connections must be at least 1")
    if batch_size is not None and batch_size < 1:
        raise UserError("--batch-size must be at least 1")
    if not 0 < timeout < float("inf"):  # 0 or less would fail every request, after its retries
        raise UserError(f"--timeout must be a positive number of seconds, not {timeout}")
    return Limits(max_connections=max_connections, timeout=timeout, max_retries=max_retries, batch_size=batch_size)


def _load_plugins(include: list[Path]) -> None:
    from ..plugins import load
    load(include)

