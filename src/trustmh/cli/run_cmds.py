"""`trustmh run`, `score` and `validate-judge`: the commands that call models and judges."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from ..judges import PAPER_JUDGE, PAPER_PROXY
from ..scoring import ALPHA_MIN
from ._base import (QUIET_HELP, _INCLUDE_HELP, _choose_suite, _data_dir, _limits, _load_plugins, app, err, loading,
                    note, out, set_quiet)
from .judge_opts import (JUDGE_HELP, JUDGE_URL_HELP, MIN_ALPHA_HELP, _model_urls, called_judges, judge_list,
                         set_min_alpha)
from .render import _ProgressView, _dry_run, _summary, _write_report


_MAX_FAILED_HELP = "Exit 2 when more than this share of a task's samples failed with API errors (0 to 1)."
_MAX_JUDGE_FAILED_HELP = ("Exit 2 when more than this share of a task's samples got no usable judge verdict (judge "
                          "API errors, unusable judge output; 0 to 1). Never counts a --judge rules verdict.")
_FAIL_ON_ERROR_HELP = "Exit 1 if any sample failed with an API error of the model or of the judge."
_PRICES_HELP = ("A TOML price table ([models.\"SPEC\"] input_per_mtok, output_per_mtok: USD per million tokens) "
                "over trustmh's shipped one (list prices, each with the page and date it was read, or marked "
                "unverified); for the cost estimates.")
_LIMIT_HELP = ("The first N items of each task, in data order (all of a task with fewer). An item can make several "
               "samples, each a model call: robustness tasks ask it perturbed, fairness.support as 17 people, so "
               "--limit 20 is about 1,100 samples per model on the whole benchmark; --dry-run counts them.")
_SYSTEM_PROMPT_HELP = (
    "The deployed assistant's system prompt, as TEXT or @FILE (a UTF-8 file, at most 256 KiB): sent first in every "
    "request to the tested models (never to the judge) and recorded in the run's spec, so it is part of every "
    "request's cache key and of the run id. Under --protocol paper a task whose request has a system message of "
    "its own (reliability.emotion_recognition) is not run, with that reason.")
_MAX_COST_HELP = ("Stop before the estimated spend of this invocation would pass this many USD (stored calls cost "
                  "nothing): exit 2 with what was spent and what remains; rerun the same command to continue.")


@app.command("run")
def run_cmd(
    model: Optional[list[str]] = typer.Option(None, "--model", "-m",
                                              help="Model spec provider/name; repeat for several models "
                                                   "(default: baseline/counselor)."),
    models_file: Optional[Path] = typer.Option(
        None, "--models", help="A TOML file listing the models to test, one [[model]] table each: spec, and "
                               "optionally base_url, label and group (e.g. general, mental-health), which the "
                               "report shows; all run at the same time. Instead of --model."),
    judge: Optional[list[str]] = typer.Option(
        None, help=f"{JUDGE_HELP} Default: {PAPER_JUDGE}, the paper's judge, under --protocol paper; rules otherwise."),
    tasks: str = typer.Option("all", "--tasks", "-t", help="Comma-separated task ids and/or pillar names."),
    limit: Optional[int] = typer.Option(None, help=_LIMIT_HELP),
    seed: int = typer.Option(0, help="Seed for sampling, variants, baselines and the bootstrap."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: $TRUSTMH_DATA_DIR or user cache)."),
    suite: str = typer.Option("auto", help="auto (data dir if it has data, else sample suite), sample or data."),
    base_url: Optional[list[str]] = typer.Option(
        None, help="Base URL of an OpenAI-compatible or Anthropic server: once for every model, or once per "
                   "--model, paired in order (or give a model its own: --model openai/NAME@URL)."),
    judge_base_url: Optional[list[str]] = typer.Option(None, help=JUDGE_URL_HELP),
    min_judge_alpha: Optional[float] = typer.Option(None, "--min-judge-alpha", help=MIN_ALPHA_HELP),
    proxy_judge: Optional[str] = typer.Option(
        None, help=f"The model that reads privacy.leakage replies as a third party under --protocol paper (the "
                   f"paper's proxy). Default: {PAPER_PROXY}, as the paper, whatever --judge names (an LLM judge; "
                   f"with --judge rules the rules read it); 'rules': the run's judge reads it."),
    proxy_judge_base_url: Optional[str] = typer.Option(None, help="Base URL for --proxy-judge."),
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
    fail_on_error: bool = typer.Option(False, help=_FAIL_ON_ERROR_HELP),
    max_failed: float = typer.Option(0.05, "--max-failed", help=_MAX_FAILED_HELP),
    max_judge_failed: float = typer.Option(0.05, "--max-judge-failed", help=_MAX_JUDGE_FAILED_HELP),
    lang: Optional[str] = typer.Option(None, help="Language of reliability.emotion_recognition items: en, zh or "
                                                  "all (default: all under --protocol paper, as EmoBench runs, "
                                                  "en under trustmh's)."),
    perturbations: Optional[str] = typer.Option(
        None, help="Robustness tasks: only these perturbations (comma-separated kinds, levels char/word/sentence "
                   "or all, each optionally @low/@medium/@high, or an intensity alone; default all 30). Under "
                   "--protocol paper, robustness.support/.diagnosis run the original's perturbation types these "
                   "name: a level (or a kind of it) its single-stage type, all or an intensity alone the "
                   "cumulative type (the default, at all three intensities)."),
    user_model: Optional[str] = typer.Option(
        None, help="crisis.conversation: the model that plays the simulated person (its own server, concurrency "
                   "and price, as a judge). Default: the run's LLM judge; with --judge rules, baseline/persona, "
                   "an offline scripted person. The run says which it chose."),
    user_model_base_url: Optional[str] = typer.Option(None, help="Base URL for --user-model."),
    turns: Optional[int] = typer.Option(None, help="crisis.conversation: messages per conversation, both sides "
                                                   "together, the simulated person first (default 30, as VERA-MH)."),
    runs: Optional[int] = typer.Option(None, help="crisis.conversation: conversations per persona (default 5)."),
    personas: Optional[str] = typer.Option(
        None, help="crisis.conversation: your own personas (a TSV file with VERA-MH's personas.tsv columns), or "
                   "a comma-separated list of names to keep of the data's."),
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
                                                          "tokens and cost per model and judge, and exit without "
                                                          "calling anything."),
    prices: Optional[Path] = typer.Option(None, "--prices", help=_PRICES_HELP),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help=_MAX_COST_HELP),
    system_prompt: Optional[str] = typer.Option(None, "--system-prompt", help=_SYSTEM_PROMPT_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Run (or resume) an evaluation. Rerunning the same command never repeats a stored call."""
    set_quiet(quiet)
    _load_plugins(include)
    _check_shares_and_out(max_failed, max_judge_failed, out_dir)
    chosen_executor = _make_executor(executor, ray_address, shard_size)
    spec = spec_from_flags(
        model=model, models_file=models_file, judge=judge, tasks=tasks, limit=limit, seed=seed, data_dir=data_dir,
        suite=suite, base_url=base_url, judge_base_url=judge_base_url, min_judge_alpha=min_judge_alpha,
        proxy_judge=proxy_judge, proxy_judge_base_url=proxy_judge_base_url, transport=transport,
        temperature=temperature, max_tokens=max_tokens, protocol=protocol, upstream_compat=upstream_compat,
        methods_dir=methods_dir, n_boot=n_boot, lang=lang, perturbations=perturbations,
        refusal_classifier=refusal_classifier, system_prompt=system_prompt, user_model=user_model,
        user_model_base_url=user_model_base_url, turns=turns, runs=runs, personas=personas)
    if not judge and spec.protocol == "paper" and spec.judge == "rules":
        note.print(f"judge: rules (the models are offline baselines; --judge {PAPER_JUDGE} for the paper's "
                   f"judge)", style="yellow", markup=False, highlight=False)
    target = Path(out_dir) if out_dir else runs_dir / spec.run_id()
    from ..engine import load_prices
    table = load_prices(prices) if prices is not None or max_cost is not None or dry_run else None
    if dry_run:
        _dry_run(spec, target, table)
        return
    limits = _limits(max_connections, timeout, max_retries, batch_size)
    if max_cost is not None:
        limits.budget = _budget(spec, max_cost, table, executor)
    run_dir, results = _run_with_progress(spec, Path(out_dir) if out_dir else None, runs_dir, target, limits,
                                          chosen_executor, force, progress, paper_default=not judge)
    _finish_run(run_dir, results, limits, fail_on_error, max_failed, max_judge_failed)


def _check_shares_and_out(max_failed: float, max_judge_failed: float, out_dir: Optional[str]) -> None:
    _check_share(max_failed)
    _check_share(max_judge_failed, "--max-judge-failed")
    if out_dir is not None and not out_dir.strip():  # --out "$UNSET" must not mean the current folder
        raise UserError("--out is empty; give a directory")


def _make_executor(executor: str, ray_address: Optional[str], shard_size: Optional[int]):
    with loading():
        from ..executors import make_executor
    return make_executor(executor, ray_address=ray_address, shard_size=shard_size)


def _run_with_progress(spec, out: Optional[Path], runs_dir: Path, target: Path, limits, executor, force: bool,
                       progress: bool, *, paper_default: bool):
    """The run, its progress on stderr (a terminal only), and what each way it can stop tells the user: the
    spend cap reached, Ctrl-C (everything received is stored), the paper's default judge (`paper_default`: no
    --judge given) without its key."""
    with loading():
        from ..engine import run
    from ..engine import BudgetStop, stop_message
    try:
        with _ProgressView(progress and sys.stderr.isatty()) as view:
            run_dir, results, _calls = run(spec, out, runs_root=runs_dir, limits=limits, executor=executor,
                                           force=force, events=view, idle=[_prepare_report])
    except BudgetStop as stop:
        raise UserError(stop_message(stop.budget, spec, target)) from None
    except KeyboardInterrupt:
        err.print("interrupted: every reply received so far is stored; rerun the same command to resume")
        raise typer.Exit(130)
    except UserError as e:
        if paper_default and spec.judge == PAPER_JUDGE and "needs an API key" in str(e):
            raise UserError(f"{e}. The paper's protocol judges with {PAPER_JUDGE} by default: pass --judge rules "
                            f"to judge offline (judge-rated metrics are then left unscored) or another judge") from None
        raise
    return run_dir, results


def _finish_run(run_dir: Path, results, limits, fail_on_error: bool, max_failed: float,
                max_judge_failed: float) -> None:
    """After a run: its calibrated values kept, the summary, the spend, where the outputs are, the report,
    and the exit code the run's failures decide."""
    results = _calibrate(run_dir, results)  # a run resumed after `trustmh annotate` keeps its calibrated values
    _summary(results)
    _spent(limits.budget)
    out.print(f"results: {run_dir / 'results.json'}\nsamples: {run_dir / 'samples.jsonl'}")
    _write_report(run_dir)
    _failed_exit(results, fail_on_error, max_failed, max_judge_failed)
    _methods_exit(results)


def _personas(personas: str) -> str:
    """--personas: a TSV file (checked now, with the one-line error of a bad cell, and kept by its full path)
    or persona names as given."""
    path = Path(personas).expanduser()
    if path.suffix.lower() in (".tsv", ".txt") or path.exists():
        from ..tasks.crisis.conversation_common import read_personas
        read_personas(path)  # a bad file is one line naming file:line, before anything runs
        return str(path.resolve())
    return personas


SYSTEM_PROMPT_MAX_BYTES = 256 << 10


def read_system_prompt(value: str) -> str:
    """--system-prompt TEXT, or @FILE: the file's text, less its final line break."""
    text = value
    if value.startswith("@"):
        from ..data.loaders import read_user_text
        text = read_user_text(Path(value[1:]), "system prompt file", SYSTEM_PROMPT_MAX_BYTES)
        text = text[:-1] if text.endswith("\n") else text
    if not text.strip():
        raise UserError("--system-prompt is empty" + (f" ({value[1:]} holds no text)" if value.startswith("@") else ""))
    return text


def spec_from_flags(*, model, models_file, judge, tasks, limit, seed, data_dir, suite, base_url, judge_base_url,
                    min_judge_alpha, proxy_judge, proxy_judge_base_url, transport, temperature, max_tokens, protocol,
                    upstream_compat, methods_dir, n_boot, lang, perturbations, refusal_classifier, system_prompt,
                    user_model=None, user_model_base_url=None, turns=None, runs=None, personas=None):
    """`trustmh run`'s flags as a RunSpec, resolved by the same step as `trustmh.run` (engine/spec.py
    `resolve`): what the command line adds is only how flags are written (--models FILE, SPEC@URL, a
    --base-url per --model, --suite auto, --upstream-compat, --system-prompt @FILE)."""
    with loading():  # the engine and every task: the first of a run's modules to load, the largest share
        from ..engine import RunSpec
        from ..engine.spec import resolve
    info: dict[str, dict[str, str]] = {}
    if models_file is not None:
        if model:
            raise UserError("--models FILE and --model: give the models one way (list them all in the file)")
        from .models_file import model_info, read_judges, read_models_file
        listed = read_models_file(models_file)
        model = [f"{m.spec}@{m.base_url}" if m.base_url else m.spec for m in listed]
        info = model_info(listed)
        file_judges = read_judges(models_file)
        if file_judges and judge:
            raise UserError("--models FILE names the judge and so does --judge: give the judges one way")
        judge = file_judges or judge
    models, own_urls, shared_url = _model_urls(model or ["baseline/counselor"], base_url or [])
    from ..models import split_spec
    for m in models:  # resolve() checks them too; a mistyped provider is the first thing said, before the data
        split_spec(m)
    judges, own_judge_urls, shared_judge_url = _model_urls(judge or [], judge_base_url or [], flag="--judge",
                                                           url_flag="--judge-base-url")
    if data_dir is not None and not data_dir.is_dir():  # a typo must not fall back to the sample suite
        raise UserError(f"--data-dir {data_dir} is not a directory; `trustmh data pull --data-dir {data_dir}` "
                        f"fetches the data there")
    ddir = _data_dir(data_dir)
    chosen = _choose_suite(suite, ddir, tasks)
    if upstream_compat:  # the old name of --protocol paper
        if protocol == "trustmh":
            raise UserError("--upstream-compat means --protocol paper; it cannot be combined with --protocol trustmh")
        protocol = protocol or "paper"
    urls = [own_judge_urls.get(j) or shared_judge_url for j in judges]
    return resolve(RunSpec(
        models=models, judge=judges[0] if judges else None, judge_base_url=urls[0] if judges else shared_judge_url,
        panel_judges=[{"judge": j, "base_url": u} for j, u in zip(judges[1:], urls[1:])], tasks=tasks, seed=seed,
        limit=limit, suite=chosen, data_dir=str(ddir.resolve()) if chosen == "data" else None, base_url=shared_url,
        base_urls=own_urls, temperature=temperature, max_tokens=max_tokens, n_boot=n_boot, protocol=protocol,
        methods_dir=str(methods_dir.resolve()) if methods_dir else None, model_info=info, transport=transport,
        lang=lang, perturbations=perturbations or None, proxy_judge=proxy_judge,
        proxy_judge_base_url=proxy_judge_base_url, refusal_classifier=refusal_classifier or None,
        system_prompt=read_system_prompt(system_prompt) if system_prompt is not None else None,
        min_judge_alpha=ALPHA_MIN if min_judge_alpha is None else min_judge_alpha, user_model=user_model or None,
        user_model_base_url=user_model_base_url or None, turns=turns, runs=runs,
        personas=_personas(personas) if personas else None))


def _prepare_report() -> None:
    """The report's template compiled while the run waits for its first replies (`_write_report` after it)."""
    from ..report import prepare
    prepare()


def _methods_exit(results) -> None:
    """Exit 2 when a task could not follow the paper's protocol for want of a method file: the run is not
    what was asked for, and one command fixes it."""
    missing = sorted({t.task for mr in results.models.values() for t in mr.tasks.values()
                      if t.status != "ok" and (t.reason or "").startswith("method file")})
    if missing:
        raise UserError(f"{len(missing)} task(s) not run for want of the authors' method files "
                        f"({', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}): run `trustmh data pull "
                        f"methods` (or `trustmh data pull --from DIR` with a copy holding methods/, or pass "
                        f"--methods-dir DIR), then the same command again")


def _budget(spec, max_cost: float, table, executor: str, called: list[str] | None = None):
    """--max-cost: a spend cap every endpoint checks before it sends a call (engine/_budget.py); `called`:
    the specs that will be called (default: the models and the judges)."""
    import math
    from ..engine import Budget, check_priced
    if not (math.isfinite(max_cost) and max_cost > 0):
        raise UserError(f"--max-cost must be a positive number of USD, not {max_cost}")
    if executor != "local":
        raise UserError("--max-cost works with the local executor only (Ray workers spend out of its sight)")
    from ..engine import called_users
    specs = called if called is not None else [*spec.models, *called_judges(spec), *called_users(spec)]
    check_priced(specs, table)
    unchecked = [s for s in dict.fromkeys(specs) if s and s != "rules" and table.price(s).unverified]
    if unchecked:  # the cap is only as good as the prices it is counted in
        note.print(f"note: --max-cost counts {', '.join(unchecked)} at an unverified shipped price (not checked "
                  f"against the provider's pricing page); give your own with --prices FILE.toml",
                  markup=False, highlight=False, soft_wrap=True)
    budget = Budget(max_cost, table)
    loose = budget.best_effort(specs)
    if loose:  # said before anything is sent: the cap cannot bound these calls
        note.print(f"note: {loose}", style="yellow", markup=False, highlight=False, soft_wrap=True)
    return budget


def _spent(budget) -> None:
    """Under --max-cost, what the finished run spent and by which rules (engine/_budget.py)."""
    if budget is not None:
        note.print(f"--max-cost: {budget.account()}", markup=False, highlight=False, soft_wrap=True)


def _check_share(share: float, flag: str = "--max-failed") -> None:
    if not 0 <= share <= 1:  # NaN fails this too
        raise UserError(f"{flag} must be between 0 and 1")


# Error kinds a rerun meets again (the same request gets the same answer), with what would fix them.
_NOT_RETRIED = {"not_recorded": "the replay file holds no reply for them; record them, a rerun cannot",
                "context_length": "the prompt does not fit the model's context; a rerun sends the same",
                "content_filter": "the provider's filter refused the prompt; a rerun sends the same"}


def _failed_exit(results, fail_on_error: bool, max_failed: float, max_judge_failed: float = 0.05) -> None:
    """Samples that failed are named by error kind. Exit 1 on any model or judge API error with
    --fail-on-error; otherwise exit 2 when a task lost more than `max_failed` of its samples to API errors,
    or more than `max_judge_failed` of them to its judge (no usable verdict): its value rests on too little
    to be read. A judge that fails every call must not leave a run that looks finished."""
    import collections
    kinds: collections.Counter = collections.Counter()
    judge_kinds: collections.Counter = collections.Counter()
    over, judge_over = [], []
    for mr in results.models.values():
        for t in mr.tasks.values():
            kinds.update(t.error_kinds)
            judge_kinds.update(t.judge_error_kinds)
            if t.n_samples and t.n_errors / t.n_samples > max_failed:
                over.append(f"{mr.model} {t.task} {t.n_errors}/{t.n_samples}")
            if t.n_samples and t.n_judge_failed / t.n_samples > max_judge_failed:
                why = ", ".join(f"{r} {k}" for r, k in collections.Counter(t.judge_failed_reasons).most_common(2))
                judge_over.append(f"{mr.model} {t.task} {t.n_judge_failed}/{t.n_samples}: {why}")
            fallback = t.metrics.get("judge_fallback_share")  # answers VERA-MH's rule read for want of one
            if fallback is not None and fallback.value is not None and fallback.value > max_judge_failed:
                judge_over.append(f"{mr.model} {t.task}: {fallback.value:.0%} of the rubric answers read by the "
                                  f"fall-back rule (no ANSWER:)")
    n_err, n_judge = sum(kinds.values()), sum(judge_kinds.values())
    if n_err:
        shown = ", ".join(f"{k} {v}" for k, v in kinds.most_common())
        fixed = [f"{k}: {why}" for k, why in _NOT_RETRIED.items() if k in kinds]
        advice = "rerun the same command to retry them" if set(kinds) - set(_NOT_RETRIED) else "a rerun cannot help"
        err.print(f"{n_err} samples failed with errors (not scored: {shown}); {advice}"
                  + (f" ({'; '.join(fixed)})" if fixed else ""), style="red", markup=False, highlight=False,
                  soft_wrap=True)
    if n_judge:
        shown = ", ".join(f"{k} {v}" for k, v in judge_kinds.most_common())
        err.print(f"{n_judge} judge calls failed ({shown}); their verdicts are left out, never counted against the "
                  f"model; rerun the same command to retry them", style="red", markup=False, highlight=False,
                  soft_wrap=True)
    if fail_on_error and (n_err or n_judge):
        raise typer.Exit(1)
    if over:
        err.print(f"error: more than {max_failed:.0%} of a task's samples failed ({'; '.join(over)}); the run "
                  f"is incomplete (--max-failed sets the share)", style="red", markup=False, highlight=False,
                  soft_wrap=True)
        raise typer.Exit(2)
    if judge_over:
        err.print(f"error: more than {max_judge_failed:.0%} of a task's samples have no usable judge verdict "
                  f"({'; '.join(judge_over)}); its judged metrics rest on too little (--max-judge-failed sets "
                  f"the share)", style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2)


@app.command("score")
def score_cmd(
    run_dir: Path = typer.Argument(..., help="A run directory (runs/<id>)."),
    judge: Optional[list[str]] = typer.Option(None, help="Judge to (re-)score with, repeated for a judge panel "
                                                         "(the tested model is never called; each judge makes only "
                                                         "the judgements it has not made); default: the run's."),
    judge_base_url: Optional[list[str]] = typer.Option(None, help=JUDGE_URL_HELP),
    min_judge_alpha: Optional[float] = typer.Option(None, "--min-judge-alpha", help=MIN_ALPHA_HELP),
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
    fail_on_error: bool = typer.Option(False, help=_FAIL_ON_ERROR_HELP),
    max_failed: float = typer.Option(0.05, "--max-failed", help=_MAX_FAILED_HELP),
    max_judge_failed: float = typer.Option(0.05, "--max-judge-failed", help=_MAX_JUDGE_FAILED_HELP),
    prices: Optional[Path] = typer.Option(None, "--prices", help=_PRICES_HELP),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help=_MAX_COST_HELP),
    ratings: Optional[Path] = typer.Option(None, "--ratings", help="Human ratings of the run to calibrate its judged "
                                                                   "values with: an annotation.json of `trustmh "
                                                                   "annotate`, or its --export (.csv, .jsonl: the "
                                                                   "draw is read from RUN_DIR/annotation.json) "
                                                                   "(default: RUN_DIR/annotation.json when there "
                                                                   "is one)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Re-judge and re-score a run's saved responses; the tested model is never called. With human ratings of
    the run (`trustmh annotate`) every judged value also gets a calibrated value (PPI++). The exit code says,
    as `run`'s does, whether too many samples failed."""
    set_quiet(quiet)
    _load_plugins(include)
    _check_share(max_failed)
    _check_share(max_judge_failed, "--max-judge-failed")
    from ..engine import load_spec, run
    spec = load_spec(run_dir)
    if judge:
        from ..engine.judge import set_judges
        set_judges(spec, judge_list(judge, judge_base_url or []))
    set_min_alpha(spec, min_judge_alpha)
    limits = _limits(max_connections, timeout, max_retries)
    if max_cost is not None:  # only the judges are called here: only they need a price
        from ..engine import load_prices
        limits.budget = _budget(spec, max_cost, load_prices(prices), "local", called_judges(spec))
    if out_dir is not None:  # checked before anything is copied
        if not out_dir.strip():
            raise UserError("--out is empty; give a directory")
        from ..files import copy_run
        run_dir = copy_run(run_dir, Path(out_dir))  # from here on the copy is re-scored
    from ..engine import BudgetStop, stop_message
    try:
        with _ProgressView(progress and sys.stderr.isatty()) as view:
            _, results, _ = run(spec, run_dir, limits=limits, generate=False,
                                accept_stored=accept_stored, events=view)
        results = _calibrate(run_dir, results, ratings)
    except BudgetStop as stop:
        raise UserError(stop_message(stop.budget, spec, run_dir)) from None
    _summary(results)
    _spent(limits.budget)
    out.print(f"results: {run_dir / 'results.json'}")
    _write_report(run_dir)
    _failed_exit(results, fail_on_error, max_failed, max_judge_failed)


def _calibrate(run_dir: Path, results, ratings: Optional[Path] = None):
    """With human ratings of the run (`trustmh annotate`), its judged values' calibrated blocks, written into
    results.json under the run's lock."""
    if ratings is None and not (Path(run_dir) / "annotation.json").exists():
        return results  # (before the imports: every run ends here, most without ratings)
    from ..files import run_lock
    from ..validation.calibrated import with_ratings
    with run_lock(Path(run_dir)):
        results = with_ratings(Path(run_dir), results, ratings)
    blocks = [mv.calibrated for mr in results.models.values() for tr in mr.tasks.values()
              for mv in tr.metrics.values() if mv.calibrated is not None]
    cal = results.calibration or {}
    left = cal.get("ratings_left_out") or {}
    why = (f"; {sum(left.values())} of {sum(left.values()) + cal.get('n_ratings', 0)} ratings left out ("
           + ", ".join(f"{k}: {v}" for k, v in left.items()) + ")") if left else ""
    out.print(f"calibrated: {sum(b.value is not None for b in blocks)} of {len(blocks)} judged values anchored to "
              f"{cal.get('n_rated', 0)} rated items ({', '.join(cal.get('raters') or []) or 'no rater yet'}){why}; "
              f"the others say why not (results.json, report: Anchored to clinicians)", markup=False, highlight=False)
    return results


@app.command("validate-judge")
def validate_judge_cmd(
    judge: str = typer.Option("rules", help="Judge to validate: a model spec, or rules (offline heuristic baseline; "
                                            "built-in crisis set only)."),
    judge_base_url: Optional[str] = typer.Option(None, help="Base URL for the judge model."),
    ratings: Optional[Path] = typer.Option(
        None, help="A human-rated set (CSV or JSONL, one rating a line: item, context, reply, criterion, rater, "
                   "rating; docs/judges.md). Default: the built-in crisis-escalation set (H1, H2)."),
    rubric: str = typer.Option("reliability.support", help="With --ratings: the judge rubric, a task id "
                               "(reliability.support, reliability.intervention) or your own jinja2 template file."),
    scale: str = typer.Option("1-5", help="With --ratings and your own rubric: the rating scale LO-HI."),
    protocol: str = typer.Option("trustmh", help="Built-in set: the escalation judge prompt to check, trustmh's or "
                                                 "paper (the paper's, from the authors' judging.py; real data)."),
    methods_dir: Optional[Path] = typer.Option(None, help="With --protocol paper: the authors' method files."),
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
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """The judge against human raters, per criterion, with the human ceiling beside it: the built-in
    crisis-escalation set (H1, H2), or any human-rated set given with --ratings."""
    set_quiet(quiet)
    import json
    from ..validation.judge import ValidateSpec, report_table, validate_judge
    from ..models import split_spec
    if judge != "rules":
        split_spec(judge)
    limits = _limits(max_connections, timeout, max_retries)
    if ratings is not None:
        from ..validation.human_ratings import agreement_table, parse_scale, ratings_spec, validate_ratings
        spec = ratings_spec(ratings, rubric=rubric, scale=parse_scale(scale), judge=judge,
                            judge_base_url=judge_base_url, seed=seed, n_boot=n_boot)
        with _ProgressView(progress and sys.stderr.isatty()) as view:
            run_dir, _results = validate_ratings(spec, out_dir, runs_root=runs_dir, limits=limits, events=view)
        out.print(agreement_table(json.loads((run_dir / "agreement.json").read_text(encoding="utf-8"))))
        out.print(f"results: {run_dir / 'results.json'}\nreport: {run_dir / 'report.html'}")
        return
    ddir = _data_dir(data_dir)
    chosen = _choose_suite(suite, ddir)
    spec = ValidateSpec(judge=judge, judge_base_url=judge_base_url, suite=chosen,
                        data_dir=str(ddir.resolve()) if chosen == "data" else None, seed=seed, n_boot=n_boot,
                        protocol=protocol, methods_dir=str(methods_dir.resolve()) if methods_dir else None)
    with _ProgressView(progress and sys.stderr.isatty()) as view:
        run_dir, results = validate_judge(spec, out_dir, runs_root=runs_dir, limits=limits, events=view)
    out.print(report_table(results))
    from ..validation.human_ratings import agreement_table
    out.print(agreement_table(json.loads((run_dir / "agreement.json").read_text(encoding="utf-8"))))
    out.print(f"results: {run_dir / 'results.json'}\nsamples: {run_dir / 'samples.jsonl'}\nreport: {run_dir / 'report.html'}")
