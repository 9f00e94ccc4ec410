"""The `trustmh` command line (typer). Only argument handling and printing live here."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.markup import escape
from rich.text import Text

from .errors import UserError

PAPER_JUDGE = "openai/gpt-4.1"  # the LLM judge the paper names (PAPER_PROTOCOL.md §3)

# Help texts are plain text (rich_markup_mode None): "[min]" and "trustmh[hf]" show as written.
app = typer.Typer(add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Measure how far an LLM can be trusted in mental-health use (TrustMH-Bench method).")
data_app = typer.Typer(add_completion=False, help="Get and verify the upstream datasets.")
app.add_typer(data_app, name="data")
# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; give them room instead, unless
# COLUMNS says how wide the reader is (rich reads it when width is None).
_WIDE = None if os.environ.get("COLUMNS") else 160
out = Console(width=None if sys.stdout.isatty() else _WIDE)
err = Console(stderr=True, width=None if sys.stderr.isatty() else _WIDE)
_INCLUDE_HELP = ("A Python file (or importable module name) defining tasks (@register) or model providers "
                 "(@register_model) to load first; repeatable. Installed plugins (entry points trustmh.tasks, "
                 "trustmh.models) load by themselves.")


def _show_version(value: bool) -> None:
    if value:
        from . import __version__
        out.print(f"trustmh {__version__}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Measure how far an LLM can be trusted in mental-health use (TrustMH-Bench method)."""


def _data_dir(data_dir: Optional[Path]) -> Path:
    from .data.fetch import default_data_dir
    return data_dir or default_data_dir()


def _choose_suite(suite: str, data_dir: Path) -> str:
    if suite in ("sample", "data"):
        return suite
    if suite != "auto":
        raise UserError(f"--suite must be auto, sample or data, not '{suite}'")
    from .data.manifest import DATASETS
    present = any((data_dir / f.path).is_file() for d in DATASETS.values() for f in d.files)
    if not present:
        err.print(f"No datasets in {data_dir}: using the built-in sample suite (a few items per task). "
                  f"Run `trustmh data pull` for the full benchmark.", style="yellow", markup=False, highlight=False)
        return "sample"
    return "data"


@app.command("list")
def list_tasks(
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: $TRUSTMH_DATA_DIR or user cache)."),
    suite: str = typer.Option("auto", help="Count items in: auto, sample or data."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
) -> None:
    """List tasks: pillar, dataset, metric, direction and number of items."""
    _load_plugins(include)
    from .engine import data_source
    from .tasks import RunContext, resolve_tasks
    ddir = _data_dir(data_dir)
    suite = _choose_suite(suite, ddir)
    source = data_source(_probe_spec(suite, ddir))
    table = RichTable(title=f"trustmh tasks ({'sample suite' if suite == 'sample' else ddir})")
    for col in ("task", "pillar", "dataset", "metric", "better", "items"):
        table.add_column(col)
    for task in resolve_tasks("all"):
        missing = task.missing_files(source)
        if missing:
            n = "[red]missing[/]"
        else:
            try:
                n = str(len(task.load(source, RunContext())))
            except UserError as e:
                n = Text(f"error: {e}", style="red")  # text: a message may hold brackets ('trustmh[hf]')
        table.add_row(task.id, task.pillar, task.dataset, task.metric.name,
                      "higher" if task.metric.higher_is_better else "lower", n)
    out.print(table)


@data_app.command("pull")
def data_pull(
    datasets: Optional[list[str]] = typer.Argument(None, help="Dataset names (default: every public one)."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: $TRUSTMH_DATA_DIR or user cache)."),
    from_dir: Optional[Path] = typer.Option(None, "--from", help="Import from a local copy instead of downloading."),
    url_base: Optional[str] = typer.Option(None, help="Mirror URL with the same layout (or $TRUSTMH_DATA_URL)."),
    force: bool = typer.Option(False, help="Fetch again even if a file is present and valid."),
) -> None:
    """Download (or import) the upstream datasets and verify every file's sha256."""
    from .data.fetch import pull
    ddir = _data_dir(data_dir)
    if datasets and "swmh" in datasets and from_dir is None:  # gated: from the Hub, with the user's own token
        _pull_swmh(ddir)
        datasets = [d for d in datasets if d != "swmh"]
        if not datasets:
            return
    statuses = pull(ddir, datasets=datasets or None, url_base=url_base, from_dir=from_dir,
                    progress=sys.stderr.isatty(), force=force)
    fetched = sum(1 for s in statuses if s.detail != "already present")
    out.print(f"{len(statuses)} files verified in {ddir} ({fetched} fetched, {len(statuses) - fetched} already present)")


@data_app.command("check")
def data_check(
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: $TRUSTMH_DATA_DIR or user cache)."),
) -> None:
    """Report which datasets are present, missing or corrupt, and how to get what is missing."""
    from .data.fetch import check
    ddir = _data_dir(data_dir)
    table = RichTable(title=f"datasets in {ddir}")
    for col in ("dataset", "state", "files", "license", "how to get"):
        table.add_column(col, overflow="fold")
    bad = False
    for st in check(ddir):
        colour = {"present": "green", "user-supplied": "green", "corrupt": "red"}.get(st.state, "yellow")
        ok = sum(1 for f in st.files if f.state == "present")
        table.add_row(st.dataset.name, f"[{colour}]{st.state}[/]", f"{ok}/{len(st.files)}", st.dataset.license,
                      "" if st.state in ("present", "user-supplied") else st.how_to_get)
        bad |= st.state == "corrupt"
    out.print(table)
    if bad:
        raise typer.Exit(1)


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
        from .engine import Notice, PhaseProgress, PhaseStarted, RunTotals
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


def _probe_spec(suite: str, ddir: Path):
    """A spec that only says where the data is (for listing and judge validation)."""
    from .engine import RunSpec
    return RunSpec(models=["baseline/refuse"], suite=suite, data_dir=str(ddir))


def _limits(max_connections: int, timeout: float, max_retries: int, batch_size: int | None = None):
    from .engine import Limits
    if max_connections < 1:
        raise UserError("--max-connections must be at least 1")
    if batch_size is not None and batch_size < 1:
        raise UserError("--batch-size must be at least 1")
    if not 0 < timeout < float("inf"):  # 0 or less would fail every request, after its retries
        raise UserError(f"--timeout must be a positive number of seconds, not {timeout}")
    return Limits(max_connections=max_connections, timeout=timeout, max_retries=max_retries, batch_size=batch_size)


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
            ci = "-" if t.ci is None else f"[{t.ci[0]:.3f}, {t.ci[1]:.3f}]"
            arrow = "↑" if t.higher_is_better else "↓"
            if t.base_metric:  # a relative measure: its base task's own value beside it
                val += f" (base {'-' if t.base_value is None else f'{t.base_value:.3f}'})"
            table.add_row(t.task, f"{t.metric} {arrow}", val, ci, str(t.n), str(t.n_no_answer), str(t.n_unscored),
                          f"[red]{t.n_judge_failed}[/]" if t.n_judge_failed else "0",
                          f"[red]{t.n_errors}[/]" if t.n_errors else "0",
                          "-" if t.trust_score is None else f"{t.trust_score:.1f}")
        out.print(table)
        if not_run:
            out.print("\n".join(not_run) + "\n  (how to get the data: `trustmh data check`)", style="yellow",
                      markup=False, highlight=False, soft_wrap=True)
        if narrow:
            out.print("  ".join(f"{v.replace(chr(10), ' ')} = {k}" for k, v in _NARROW.items() if k != "95% CI"),
                      markup=False, highlight=False)
        out.print("no answer: the model's own non-answers, counted against it in the value; unscored and judge "
                  "failed: left out of the value, not the model's doing", markup=False, highlight=False)
        relative = [t for t in mr.tasks.values() if t.status == "ok" and t.base_metric]
        if relative:
            out.print("relative measures (base): a model that gives the same reply to everything scores near "
                      "perfect on them; read them beside the base value ("
                      + ", ".join(f"{t.task}: {t.base_metric}" for t in relative) + ")",
                      markup=False, highlight=False)
        _pillar_summary(mr)
    for note in results.notes:
        out.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    if results.banner:
        out.print(results.banner, style="bold yellow", markup=False, highlight=False, soft_wrap=True)


def _model_urls(models: list[str], base_urls: list[str]) -> tuple[list[str], dict[str, str], str | None]:
    """Model specs, each model's own base URL (`spec@http...`, or the --base-url paired with it when
    there is one per --model) and the URL shared by the others (a single --base-url)."""
    import re
    specs, own = [], {}
    for m in models:
        # Only '@' before a URL splits: a model name may hold one (Vertex's claude-3-5-sonnet@20240620).
        found = re.fullmatch(r"(.+?)@([A-Za-z][A-Za-z0-9+.-]*://.*)", m)
        spec, url = (found.group(1), found.group(2)) if found else (m, None)
        if spec in specs:
            raise UserError(f"--model {spec} is given twice; a run names each model once")
        specs.append(spec)
        if url:
            own[spec] = url
    if len(base_urls) > 1:
        if len(base_urls) != len(specs):
            raise UserError(f"{len(base_urls)} --base-url for {len(specs)} --model: give one for every model, "
                            f"paired in order, or a single one for all")
        for spec, url in zip(specs, base_urls):
            own.setdefault(spec, url)
        return specs, own, None
    return specs, own, base_urls[0] if base_urls else None


@app.command("run")
def run_cmd(
    model: list[str] = typer.Option(["baseline/counselor"], "--model", "-m",
                                    help="Model spec provider/name; repeat for several models."),
    judge: Optional[str] = typer.Option(
        None, help=f"Judge: a model spec, or rules (offline heuristics; judge-rated metrics then stay unscored). "
                   f"Default: {PAPER_JUDGE}, the paper's judge, under --protocol paper; rules otherwise."),
    tasks: str = typer.Option("all", "--tasks", "-t", help="Comma-separated task ids and/or pillar names."),
    limit: Optional[int] = typer.Option(None, help="First N items of each task, in data order."),
    seed: int = typer.Option(0, help="Seed for sampling, variants, baselines and the bootstrap."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: $TRUSTMH_DATA_DIR or user cache)."),
    suite: str = typer.Option("auto", help="auto (data dir if it has data, else sample suite), sample or data."),
    base_url: Optional[list[str]] = typer.Option(
        None, help="Base URL of an OpenAI-compatible or Anthropic server: once for every model, or once per "
                   "--model, paired in order (or give a model its own: --model openai/NAME@URL)."),
    judge_base_url: Optional[str] = typer.Option(None, help="Base URL for the judge model."),
    max_connections: int = typer.Option(32, help="Concurrent requests per endpoint."),
    timeout: float = typer.Option(120.0, help="Per-request timeout in seconds."),
    max_retries: int = typer.Option(6, help="Retries for rate limits, 5xx, timeouts and broken replies."),
    transport: str = typer.Option("http", help="How openai/ models send requests: http (trustmh's own kept-alive "
                                               "client, ~0.07 ms of CPU per request; aiohttp when a proxy is set), "
                                               "aiohttp (~0.2 ms) or sdk (the official openai SDK, ~1.5 ms)."),
    temperature: float = typer.Option(0.0, help="Sampling temperature for the tested model."),
    max_tokens: Optional[int] = typer.Option(None, help="Override every task's max tokens."),
    protocol: Optional[str] = typer.Option(
        None, help="paper: what the authors' code sends and how it scores (templates read from their method "
                   "files; the default on real data); trustmh: the project's corrected design (the default, and "
                   "the only choice, on the sample suite). Each task's results name the protocol it followed."),
    upstream_compat: bool = typer.Option(False, help="Same as --protocol paper (kept for older scripts)."),
    methods_dir: Optional[Path] = typer.Option(
        None, help="The authors' method files (default: $TRUSTMH_METHODS_DIR, else <data dir>/methods; "
                   "`trustmh data pull methods` fetches them)."),
    n_boot: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples for confidence intervals."),
    out_dir: Optional[str] = typer.Option(None, "--out", help="Run directory (default: runs/<id from spec>): a new "
                                                              "or empty folder, or a run of the same spec."),
    force: bool = typer.Option(False, help="Run into an --out that holds a run of another spec (its results are "
                                           "replaced), or whose local (hf/) model files have changed since."),
    runs_dir: Path = typer.Option(Path("runs"), help="Where run directories are created."),
    fail_on_error: bool = typer.Option(False, help="Exit 1 if any sample failed with an API error."),
    max_failed: float = typer.Option(0.05, "--max-failed", help="Exit 2 when more than this share of a task's "
                                                               "samples failed with API errors (0 to 1)."),
    lang: str = typer.Option("en", help="Language of reliability.emotion_recognition items: en, zh or all."),
    perturbations: Optional[str] = typer.Option(
        None, help="Robustness tasks: only these perturbations (comma-separated kinds, levels char/word/sentence, "
                   "@low/@medium/@high or kind@intensity; default all 30)."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    refusal_classifier: Optional[str] = typer.Option(
        None, help="Decide refusals (safety.jailbreak, safety.over_refusal) with a local Hugging Face "
                   "classifier: hf/<path>, or hf/<path>#refusal_label=<label> when the refusal class is not "
                   "LABEL_0 (needs the hf extra)."),
    batch_size: Optional[int] = typer.Option(
        None, help="hf/ models: requests per generate() call, fixed (default: adapted to measured throughput, "
                   "per prompt-length bucket). Never part of the run's identity."),
    executor: str = typer.Option("local", help="Where replies are fetched: local (this process) or ray (shards "
                                               "as Ray tasks; needs the ray extra; see docs/scale.md)."),
    ray_address: Optional[str] = typer.Option(None, help="With --executor ray: a cluster to join (auto, or "
                                                         "ray://host:10001); default: a Ray instance on this machine."),
    shard_size: Optional[int] = typer.Option(
        None, help="With --executor ray: items per shard (a request family: an item with all its perturbed "
                   "and judged variants). Default: the work cut into about 4 shards per cluster CPU, at "
                   "least 10 items each. Smaller shards lose less to a failed node; larger ones pay less "
                   "per-task overhead."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the model and judge calls this run would make "
                                                          "(minus those stored in --out) with an estimate of their "
                                                          "prompt tokens, and exit without calling anything."),
) -> None:
    """Run (or resume) an evaluation. Rerunning the same command never repeats a stored call."""
    _load_plugins(include)
    from .engine import RunSpec, run
    from .executors import make_executor
    from .models import split_spec
    if not 0 <= max_failed <= 1:
        raise UserError("--max-failed must be between 0 and 1")
    if out_dir is not None and not out_dir.strip():  # --out "$UNSET" must not mean the current folder
        raise UserError("--out is empty; give a directory")
    chosen_executor = make_executor(executor, ray_address=ray_address, shard_size=shard_size)
    model, own_urls, shared_url = _model_urls(model, base_url or [])
    for m in model:
        split_spec(m)
    if data_dir is not None and not data_dir.is_dir():  # a typo must not fall back to the sample suite
        raise UserError(f"--data-dir {data_dir} is not a directory; `trustmh data pull --data-dir {data_dir}` "
                        f"fetches the data there")
    ddir = _data_dir(data_dir)
    chosen = _choose_suite(suite, ddir)
    # The paper's protocol judges with the paper's judge unless told otherwise.
    default_judge = judge is None
    if judge is None:
        paper = protocol == "paper" or upstream_compat or (protocol is None and chosen == "data")
        judge = PAPER_JUDGE if paper else "rules"
    if judge != "rules":
        split_spec(judge)
    if limit is not None and limit < 1:
        raise UserError("--limit must be at least 1")
    from .models import resolve_base_url
    # A server named only by OPENAI_BASE_URL / ANTHROPIC_BASE_URL is recorded in the spec, so that results
    # say where replies came from and a later `score` in another environment finds the same stored calls.
    base_url = resolve_base_url(model[0], shared_url)
    if judge != "rules":
        judge_base_url = resolve_base_url(judge, judge_base_url)
    spec = RunSpec(models=list(model), judge=judge, tasks=tasks, seed=seed, limit=limit, suite=chosen,
                   data_dir=str(ddir.resolve()) if chosen == "data" else None, base_url=base_url,
                   judge_base_url=judge_base_url, temperature=temperature, max_tokens=max_tokens,
                   upstream_compat=upstream_compat, n_boot=n_boot,
                   protocol=protocol or ("paper" if upstream_compat else None),
                   methods_dir=str(methods_dir.resolve()) if methods_dir else None)
    from .models.openai_api import TRANSPORTS  # light: the SDK is imported only by the sdk transport
    if transport not in TRANSPORTS:
        raise UserError(f"--transport must be {', '.join(TRANSPORTS[:-1])} or {TRANSPORTS[-1]}, not '{transport}'")
    if own_urls:  # set only when given, so runs without them keep their run id
        from .engine.spec import check_url
        for url in own_urls.values():
            check_url("--base-url", url)
        spec.options["base_urls"] = own_urls
    if transport != "http":  # set only when not the default, so default runs keep their run id
        spec.options["transport"] = transport
    if lang not in ("en", "zh", "all"):
        raise UserError(f"--lang must be en, zh or all, not '{lang}'")
    if lang != "en":  # set only when not the default, so default runs keep their run id
        spec.options["lang"] = lang
    if perturbations:
        from .tasks import RunContext
        from .tasks.robustness import selected_perturbations
        selected_perturbations(RunContext(options={"perturbations": perturbations}))  # bad names fail here
        spec.options["perturbations"] = perturbations
    if refusal_classifier:
        from .judges.hf_classifier import parse_spec
        parse_spec(refusal_classifier)  # a malformed spec is a one-line error before anything runs
        spec.options["refusal_classifier"] = refusal_classifier
    if dry_run:
        _dry_run(spec, Path(out_dir) if out_dir else runs_dir / spec.run_id())
        return
    try:
        with _ProgressView(progress and sys.stderr.isatty()) as view:
            run_dir, results, _calls = run(spec, Path(out_dir) if out_dir else None, runs_root=runs_dir,
                                           limits=_limits(max_connections, timeout, max_retries, batch_size),
                                           executor=chosen_executor, force=force, events=view)
    except KeyboardInterrupt:
        err.print("interrupted: every reply received so far is stored; rerun the same command to resume")
        raise typer.Exit(130)
    except UserError as e:
        if default_judge and judge == PAPER_JUDGE and "needs an API key" in str(e):
            raise UserError(f"{e}. The paper's protocol judges with {PAPER_JUDGE} by default: pass --judge rules "
                            f"to judge offline (judge-rated metrics are then left unscored) or another judge") from None
        raise
    _summary(results)
    out.print(f"results: {run_dir / 'results.json'}\nsamples: {run_dir / 'samples.jsonl'}")
    _write_report(run_dir)
    _failed_exit(results, fail_on_error, max_failed)


def _failed_exit(results, fail_on_error: bool, max_failed: float) -> None:
    """Samples that failed are named by error kind. Exit 1 on any with --fail-on-error; otherwise exit 2
    when a task lost more than `max_failed` of its samples: its value rests on too little to be read."""
    import collections
    kinds: collections.Counter = collections.Counter()
    over = []
    for mr in results.models.values():
        for t in mr.tasks.values():
            kinds.update(t.error_kinds)
            if t.n_samples and t.n_errors / t.n_samples > max_failed:
                over.append(f"{mr.model} {t.task} {t.n_errors}/{t.n_samples}")
    n_err = sum(kinds.values())
    if not n_err:
        return
    shown = ", ".join(f"{k} {v}" for k, v in kinds.most_common())
    err.print(f"{n_err} samples failed with errors (not scored: {shown}); rerun the same command to retry them",
              style="red", markup=False, highlight=False, soft_wrap=True)
    if fail_on_error:
        raise typer.Exit(1)
    if over:
        err.print(f"error: more than {max_failed:.0%} of a task's samples failed ({'; '.join(over)}); the run "
                  f"is incomplete (--max-failed sets the share)", style="red", markup=False, highlight=False,
                  soft_wrap=True)
        raise typer.Exit(2)


@app.command("score")
def score_cmd(
    run_dir: Path = typer.Argument(..., help="A run directory (runs/<id>)."),
    judge: Optional[str] = typer.Option(None, help="Judge to (re-)score with; default: the run's judge."),
    judge_base_url: Optional[str] = typer.Option(None, help="Base URL for the judge model."),
    max_connections: int = typer.Option(32, help="Concurrent judge requests."),
    timeout: float = typer.Option(120.0, help="Per-request timeout in seconds."),
    max_retries: int = typer.Option(6, help="Retries for the judge."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    accept_stored: bool = typer.Option(False, help="Use stored judgements even when they were made with another "
                                                   "version of their rubric (by default they are left out and "
                                                   "counted)."),
    include: list[Path] = typer.Option([], "--include", help=_INCLUDE_HELP),
    out_dir: Optional[str] = typer.Option(None, "--out", help="Write the re-scored run to this new folder (a copy "
                                                              "of the store) and leave RUN_DIR as it is."),
) -> None:
    """Re-judge and re-score a run's saved responses; the tested model is never called."""
    _load_plugins(include)
    from .engine import load_spec, run
    from .models import split_spec
    spec = load_spec(run_dir)
    if judge:
        if judge != "rules":
            split_spec(judge)
        spec.judge = judge
        spec.judge_base_url = judge_base_url
    limits = _limits(max_connections, timeout, max_retries)
    if out_dir is not None:  # checked before anything is copied
        if not out_dir.strip():
            raise UserError("--out is empty; give a directory")
        from .engine.rundir import copy_run
        run_dir = copy_run(run_dir, Path(out_dir))  # from here on the copy is re-scored
    with _ProgressView(progress and sys.stderr.isatty()) as view:
        _, results, _ = run(spec, run_dir, limits=limits, generate=False,
                            accept_stored=accept_stored, events=view)
    _summary(results)
    out.print(f"results: {run_dir / 'results.json'}")
    _write_report(run_dir)


@app.command("validate-judge")
def validate_judge_cmd(
    judge: str = typer.Option("rules", help="Judge to validate: a model spec, or rules (offline heuristic baseline)."),
    judge_base_url: Optional[str] = typer.Option(None, help="Base URL for the judge model."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: $TRUSTMH_DATA_DIR or user cache)."),
    suite: str = typer.Option("auto", help="auto (data dir if it has data, else sample suite), sample or data."),
    seed: int = typer.Option(0, help="Seed for the judge and the bootstrap."),
    n_boot: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples for confidence intervals."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: runs/validate-judge-<id>)."),
    runs_dir: Path = typer.Option(Path("runs"), help="Where output directories are created."),
    max_connections: int = typer.Option(32, help="Concurrent judge requests."),
    timeout: float = typer.Option(120.0, help="Per-request timeout in seconds."),
    max_retries: int = typer.Option(6, help="Retries for the judge."),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """Agreement of the crisis-escalation judge with the two human raters (H1, H2), and H1 vs H2."""
    from .validation import ValidateSpec, report_table, validate_judge
    from .models import split_spec
    if judge != "rules":
        split_spec(judge)
    ddir = _data_dir(data_dir)
    chosen = _choose_suite(suite, ddir)
    spec = ValidateSpec(judge=judge, judge_base_url=judge_base_url, suite=chosen,
                        data_dir=str(ddir.resolve()) if chosen == "data" else None, seed=seed, n_boot=n_boot)
    with _ProgressView(progress and sys.stderr.isatty()) as view:
        run_dir, results = validate_judge(spec, out_dir, runs_root=runs_dir,
                                          limits=_limits(max_connections, timeout, max_retries), events=view)
    out.print(report_table(results))
    out.print(f"results: {run_dir / 'results.json'}\nsamples: {run_dir / 'samples.jsonl'}")


# --- report, compare, gate -----------------------------------------------------------------------

def _write_report(run_dir: Path) -> None:
    """report.html next to results.json. The results are already on disk, so a failure here is shown and
    the command goes on: it never costs a run its results."""
    try:
        from .report import write_report
        # Ties by overlapping intervals here: a paired bootstrap re-runs every task's aggregation and could
        # add minutes to a run; `trustmh report RUN` redoes the page with the paired test.
        path = write_report([run_dir], run_dir / "report.html", paired=False)
    except Exception as e:  # noqa: BLE001 - any report bug must not fail a finished run
        err.print(f"[yellow]report.html not written ({escape(type(e).__name__)}: {escape(str(e))}); results are "
                  f"intact; retry with `trustmh report {escape(str(run_dir))}`[/]")
        return
    out.print(f"report:  {path}")


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
    from .compare import load_run
    from .report import write_report
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
    from .compare import compare_runs, load_run, rich_tables, to_csv, to_json, to_markdown
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
        from .report import write_report
        write_report(loaded, html, comparisons=comparisons)
        err.print(f"report: {html}", markup=False, highlight=False)


@app.command("gate")
def gate_cmd(
    run_dir: Path = typer.Argument(..., help="The run to check (directory or results.json)."),
    min_: list[str] = typer.Option([], "--min", help="NAME=VALUE lower bound; repeatable. NAME: task id, "
                                                      "task:metric, pillar:<name> or overall."),
    max_: list[str] = typer.Option([], "--max", help="NAME=VALUE upper bound; repeatable."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML file with [min] and [max] tables "
                                                                        "(and optional baseline, alpha)."),
    baseline: Optional[Path] = typer.Option(None, help="Also fail on any significant regression against this run."),
    alpha: Optional[float] = typer.Option(None, help="Significance level for --baseline (default 0.05)."),
    n_boot: int = typer.Option(1000, "--bootstrap", help="Paired bootstrap resamples for --baseline."),
    seed: int = typer.Option(0, help="Seed of the paired bootstrap."),
    max_unscored: float = typer.Option(0.05, "--max-unscored",
                                       help="Fail a checked task with more than this share of its samples left "
                                            "out of its metric (API errors, judge failures) or judge-failed."),
    allow_partial: bool = typer.Option(False, "--allow-partial",
                                       help="Accept a checked pillar or overall score measured on fewer rows or "
                                            "pillars than the paper has."),
) -> None:
    """Exit 0 when every threshold holds, 1 with one line per failure otherwise (2: bad names or input)."""
    from .compare import load_run
    from .gate import GateConfig, check_baseline, check_coverage, check_thresholds, load_config, parse_threshold
    if not 0 <= max_unscored <= 1:
        raise UserError("--max-unscored must be between 0 and 1")
    cfg = load_config(config) if config else GateConfig([])
    thresholds = cfg.thresholds + [parse_threshold(t, "min") for t in min_] + [parse_threshold(t, "max") for t in max_]
    base_path = baseline or (Path(cfg.baseline) if cfg.baseline else None)
    level = alpha if alpha is not None else (cfg.alpha if cfg.alpha is not None else 0.05)
    if not 0 < level < 1:
        raise UserError("--alpha must be between 0 and 1")
    if not thresholds and base_path is None:
        raise UserError("nothing to check: give --min/--max thresholds, --config or --baseline")
    run = load_run(run_dir)
    failures, n = check_thresholds(run, thresholds)
    failures += check_coverage(run, thresholds, max_unscored=max_unscored, allow_partial=allow_partial)
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


# --- plugins, dry runs, gated data ---------------------------------------------------------------

def _load_plugins(include: list[Path]) -> None:
    from .plugins import load
    load(include)


def _dry_run(spec, run_dir: Path) -> None:
    """Per task and model, the calls `run` would make (stored ones left out) and their estimated size."""
    from .engine import context, prepare
    from .engine.plan import CHARS_PER_TOKEN, plan
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
    out.print(f"prompt tokens are an estimate (characters / {CHARS_PER_TOKEN}); for replies not stored yet, "
              f"judge calls assume every reply is judged and judge prompts leave out the reply's text; {judge}",
              markup=False, highlight=False)


def _pull_swmh(ddir: Path) -> None:
    from .data.swmh import pull_swmh
    rows = pull_swmh(ddir)
    out.print(f"swmh: {', '.join(f'{k} {v} rows' for k, v in sorted(rows.items()))} in {ddir / 'swmh'}",
              markup=False, highlight=False)


def main() -> None:
    try:
        # standalone mode: typer handles usage errors (exit 2) and --help itself. The name is fixed so that
        # `python -m trustmh` prints the same usage lines as the `trustmh` script.
        app(prog_name="trustmh")
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


if __name__ == "__main__":
    main()
