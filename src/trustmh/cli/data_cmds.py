"""`trustmh list` and `trustmh data pull|check`: what tasks there are and the datasets they read."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table as RichTable
from rich.text import Text

from ..errors import UserError
from ._base import (QUIET_HELP, _INCLUDE_HELP, _choose_suite, _data_dir, _load_plugins, _probe_spec, app, data_app,
                    note, out, set_quiet, styled)


@app.command("list")
def list_tasks(
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: $TRUSTMH_DATA_DIR or user cache)."),
    suite: str = typer.Option("auto", help="Count items in: auto, sample or data."),
    protocol: Optional[str] = typer.Option(
        None, help="Count the items this protocol runs: paper, trustmh or both (default: the one `run` uses: paper "
                   "on real data, trustmh on the sample suite)."),
    methods_dir: Optional[Path] = typer.Option(
        None, "--methods-dir", help="The authors' method files, for the paper protocol's counts (as `run`)."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
) -> None:
    """List tasks: pillar, dataset, metric, direction and number of items."""
    _load_plugins(include)
    from ..engine import context, data_source
    from ..tasks import TASKS
    from ..plugins import load_task_plugins
    ddir = _data_dir(data_dir)
    chosen = _choose_suite(suite, ddir)
    if chosen == "sample" and suite == "auto":
        note.print()  # the notice above is its own paragraph, not the table's first line
    if protocol not in (None, "paper", "trustmh", "both"):
        raise UserError(f"--protocol must be paper, trustmh or both, not '{protocol}'")
    if chosen == "sample" and protocol in ("paper", "both"):
        raise UserError("--protocol paper counts real data; the sample suite runs the trustmh protocol only")
    shown = (["paper", "trustmh"] if protocol == "both" else [protocol] if protocol
             else ["paper" if chosen == "data" else "trustmh"])
    from ..engine import RunSpec
    source = data_source(_probe_spec(chosen, ddir))
    contexts = {name: context(RunSpec(models=["baseline/refuse"], suite=chosen, data_dir=str(ddir), protocol=name,
                                      methods_dir=str(methods_dir) if methods_dir else None)) for name in shown}
    where = "sample suite" if chosen == "sample" else str(ddir)
    table = RichTable(title=f"trustmh tasks ({where}; items under the {' and the '.join(shown)} protocol"
                            f"{'s' if len(shown) > 1 else ''})", title_justify="left")
    for col in ("task", "pillar", "dataset", "metric", "better"):
        table.add_column(col, overflow="fold")
    for name in shown:
        table.add_column("items" if len(shown) == 1 else f"items ({name})", justify="right", overflow="fold")
    # Fresh task objects per protocol: a task may adapt itself to the protocol it loads under (the files
    # it reads), and one protocol's count must not change the other's.
    load_task_plugins()
    every = [TASKS[k] for k in sorted(TASKS)]  # with the tasks run by name only
    counts = {name: {cls.id: _count(cls(), source, ctx) for cls in every} for name, ctx in contexts.items()}
    for task in (cls() for cls in every):
        table.add_row(task.id, task.pillar, task.dataset, task.metric.name,
                      "higher" if task.metric.higher_is_better else "lower", *(counts[n][task.id] for n in shown))
    out.print(table)
    named = [cls.id for cls in every if cls.by_name_only]
    if named:
        out.print(f"run only when named in --tasks (not part of 'all' or of its pillar): {', '.join(named)}")


def _count(task, source, ctx) -> str | Text:
    if task.missing_files(source):
        return Text("missing", style="red")
    try:
        return str(len(task.method(ctx).load(source, ctx)))
    except UserError as e:  # text: a message may hold brackets ('trustmh[hf]')
        return styled((f"error: {str(e).split(' — ')[0]}", "red"))


@data_app.command("pull")
def data_pull(
    datasets: Optional[list[str]] = typer.Argument(None, help="Dataset names (default: every public one); `punkt`: "
                                                              "NLTK's English Punkt model (punkt_tab) the ESConv "
                                                              "reference metrics split sentences with, as the "
                                                              "original does (with --from: a local copy, the zip, its "
                                                              "folder or an NLTK data folder; else NLTK's "
                                                              "downloader, its index at --url-base)."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: $TRUSTMH_DATA_DIR or user cache)."),
    from_dir: Optional[Path] = typer.Option(None, "--from", help="Import from a local copy instead of downloading."),
    url_base: Optional[str] = typer.Option(None, help="Mirror URL with the same layout (or $TRUSTMH_DATA_URL)."),
    force: bool = typer.Option(False, help="Fetch again even if a file is present and valid."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Download (or import) the upstream datasets and verify every file's sha256."""
    set_quiet(quiet)
    from ..data.fetch import pull
    ddir = _data_dir(data_dir)
    if datasets and "punkt" in datasets:  # a model, not a dataset: NLTK's own format and downloader
        from ..data.punkt import fingerprint, pull_punkt
        folder = pull_punkt(ddir, from_path=from_dir, url_base=url_base)
        out.print(f"punkt_tab (English) installed in {folder} (sha256 {fingerprint(folder)[:16]}): the ESConv "
                  f"reference metrics now split sentences as the original does", markup=False, highlight=False,
                  soft_wrap=True)
        datasets = [d for d in datasets if d != "punkt"]
        if not datasets:
            return
    if datasets and "swmh" in datasets and from_dir is None:  # gated: from the Hub, with the user's own token
        _pull_swmh(ddir)
        datasets = [d for d in datasets if d != "swmh"]
        if not datasets:
            return
    statuses = pull(ddir, datasets=datasets or None, url_base=url_base, from_dir=from_dir,
                    progress=sys.stderr.isatty() and not quiet, force=force)
    out.print(pull_line(statuses, ddir, from_dir), markup=False, highlight=False, soft_wrap=True)


def pull_line(statuses, ddir: Path, from_dir: Path | None) -> str:
    """One line: what a pull took (data and method files apart), and per dataset what the source lacked."""
    from collections import Counter

    from ..data.manifest import dataset_for_path
    took = [s for s in statuses if s.state == "present"]
    new = [s for s in took if s.detail != "already present"]
    n_methods = sum(s.path.startswith("methods/") for s in new)
    verb = f"imported from {from_dir}" if from_dir is not None else "fetched"
    line = (f"{len(took)} files verified in {ddir}: {verb} {len(new) - n_methods} data and {n_methods} "
            f"method files, {len(took) - len(new)} already present")
    lacking = [s.path for s in statuses if s.state == "missing"]
    if lacking:
        parts = []
        data = Counter(getattr(dataset_for_path(p), "name", p) for p in lacking if not p.startswith("methods/"))
        if data:
            names = list(data)
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            parts.append(f"{sum(data.values())} data files ({shown})")
        if len(lacking) > sum(data.values()):
            parts.append(f"{len(lacking) - sum(data.values())} method files")
        line += f"; not in the copy: {' and '.join(parts)} (`trustmh data check` says how to get them)"
    return line


@data_app.command("check")
def data_check(
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: $TRUSTMH_DATA_DIR or user cache)."),
    methods_dir: Optional[Path] = typer.Option(
        None, "--methods-dir", help="The authors' method files, as `run --methods-dir` (default $TRUSTMH_METHODS_DIR, "
                                    "else <data dir>/methods)."),
) -> None:
    """Report which datasets are present, missing or corrupt, and how to get what is missing."""
    from ..data.fetch import check
    from ..data.methods import methods_dir as methods_root
    ddir = _data_dir(data_dir)
    mroot = methods_root(ddir, methods_dir)  # the same place `run` reads them from
    title = f"datasets in {ddir}" + ("" if mroot == ddir / "methods" else f"; method files in {mroot}")
    table = RichTable(title=title)
    for col in ("dataset", "state", "files", "license", "how to get"):
        table.add_column(col, overflow="fold")
    bad = False
    for st in check(ddir, methods_root=mroot):
        colour = {"present": "green", "user-supplied": "green", "corrupt": "red"}.get(st.state, "yellow")
        ok = sum(1 for f in st.files if f.state == "present")
        table.add_row(st.dataset.name, styled((st.state, colour)), f"{ok}/{len(st.files)}", st.dataset.license,
                      "" if st.state in ("present", "user-supplied") else st.how_to_get)
        bad |= st.state == "corrupt"
    out.print(table)
    from ..data.punkt import find
    try:
        punkt = find(ddir)
    except UserError as e:  # $TRUSTMH_PUNKT names no model
        punkt, bad = None, True
        out.print(str(e), style="red", markup=False, highlight=False)
    out.print(f"punkt_tab (the ESConv reference metrics' sentence splitter): "
              + (f"present in {punkt}" if punkt else "not installed: `trustmh data pull punkt` (without it an untrained "
                                                      "splitter is used, which differs from the original at abbreviations)"),
              markup=False, highlight=False, soft_wrap=True)
    if bad:
        raise typer.Exit(1)


def _pull_swmh(ddir: Path) -> None:
    from ..data.swmh import pull_swmh
    rows = pull_swmh(ddir)
    out.print(f"swmh: {', '.join(f'{k} {v} rows' for k, v in sorted(rows.items()))} in {ddir / 'swmh'}",
              markup=False, highlight=False)

