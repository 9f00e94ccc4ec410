"""Running one evaluation: the spec's context, the two phases in one run directory, and the checks that
a directory holds this spec (`run`, `check_same_spec`, `load_spec`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import UserError
from ._store import Store
from ..tasks import TASKS, RunContext, load_pillars
from . import _identity as identity
from .collect import collect
from ._endpoint import AuthFailure, EndpointDown
from ._events import EventSink, Notice, RunTotals, ignore
from .prepare import Recorder, prepare, prepare_from_store
from ..files import open_run_dir, run_lock, sweep_temps
from .score import Phase2, task_origins
from ..tasks.versions import scoring_version
from .spec import PRESENTATION, Limits, RunSpec, data_source, package_versions

if TYPE_CHECKING:  # results.json's models (pydantic) load when phase 2 makes a result, after the first requests
    from ..scoring.results import RunResults


def context(spec: RunSpec) -> RunContext:
    from ..data.methods import methods_dir
    root = methods_dir(spec.data_dir, spec.methods_dir) if spec.protocol == "paper" else None
    return RunContext(seed=spec.seed, protocol=spec.protocol, judge=spec.judge, options=dict(spec.options),
                      methods_root=root, data_root=Path(spec.data_dir) if spec.data_dir else None)


def run(spec: RunSpec, out: Path | None = None, *, runs_root: Path = Path("runs"), limits: Limits | None = None,
        generate: bool = True, executor=None, accept_stored: bool = False, force: bool = False,
        events: EventSink = ignore, idle: Sequence[Callable[[], object]] = ()) -> tuple[Path, RunResults, dict[str, int]]:
    """Run (or resume) an evaluation and write its outputs. Returns (run dir, results, calls made).
    With `generate` False the tested models are never called (re-scoring). `executor` (see
    trustmh.executors) runs phase 1 elsewhere, e.g. on Ray; phase 2 always runs here. `force` starts a new
    run in a directory that holds another spec, or whose local (hf/) model files have changed (both are
    refused otherwise: its results would be overwritten by a different run). `idle` are calls made once
    each while phase 1 waits for its first replies (the CLI compiles the report's template then); one
    that fails is left to fail again where its work is needed."""
    limits, ctx, t0 = limits or Limits(), context(spec), time.perf_counter()
    with run_directory(out or runs_root / spec.run_id(), spec, generate=generate, force=force) as (run_dir, store):
        prepared, checksums, recorder = prepare_stage(spec, ctx, store, generate=generate,
                                                      lazy=generate and executor is None)
        # phase 2 (judge verdicts read, scores, samples.jsonl, results.json) takes each task as phase 1 ends it
        phase2 = Phase2(run_dir, spec, ctx, prepared, store, accept_stored=accept_stored, events=events)
        calls = collect_stage(spec, ctx, prepared, store, limits, executor=executor, generate=generate, force=force,
                              recorder=recorder, phase2=phase2, idle=idle, events=events)
        t1 = time.perf_counter()
        results = phase2.finish(checksums)
        prompt_tokens, completion_tokens = store.totals()
    _say_stale(results, events)
    t2 = time.perf_counter()
    events(RunTotals(dict(calls), prompt_tokens, completion_tokens, t2 - t0, t2 - t1))
    return run_dir, results, calls


@contextlib.contextmanager
def run_directory(path: Path, spec: RunSpec, *, generate: bool, force: bool):
    """The run folder, locked for this process, what a killed run left half-written swept away, and its
    store open and checked (a damaged store is refused, with how to recover); a run that generates records
    its spec there, after checking the folder holds no other run's."""
    run_dir = open_run_dir(path)
    with run_lock(run_dir):
        sweep_temps(run_dir)
        store = Store(run_dir / "store.sqlite")
        try:
            store.check_integrity()
            if generate:
                check_same_spec(run_dir, store.get_meta("spec"), spec, force)
                store.set_meta("spec", spec.to_json())
            yield run_dir, store
        finally:
            store.close()


def prepare_stage(spec: RunSpec, ctx: RunContext, store: Store, *, generate: bool, lazy: bool):
    """The run's samples: read back from the store when re-scoring, else built from the data (`lazy`: most
    as phase 1 reaches them, recorded beside it by the returned Recorder, so that the first requests wait
    only for the data to load). Returns (prepared, data checksums, recorder or None)."""
    from_store = None if generate else prepare_from_store(spec, store)
    if from_store is not None:
        prepared, checksums = from_store
        for p in prepared:  # a task whose scoring reads its own data files (a rubric) loads them still
            if not p.not_run and getattr(p.task.method(ctx), "scores_with_its_data", False):
                p.task.method(ctx).load(data_source(spec), ctx)
        return prepared, checksums, None
    prepared, checksums = prepare(spec, ctx, lazy=lazy)
    if generate:
        store.set_meta("task_origins", task_origins(prepared))  # what `score` imports again
    return prepared, checksums, Recorder(store, prepared, checksums, ctx)


def collect_stage(spec: RunSpec, ctx: RunContext, prepared, store: Store, limits: Limits, *, executor, generate: bool,
                  force: bool, recorder, phase2: Phase2, idle: Sequence[Callable[[], object]],
                  events: EventSink) -> dict[str, int]:
    """Phase 1: every model's replies and the judges' verdicts into the store, here (the recorder and phase
    2 working beside it in slices) or on an executor (the samples recorded first, the models' files
    identified here, as the workers load them). Returns the calls made, by model and judge."""
    idle_threads: list[threading.Thread] = []
    try:
        if executor is not None and generate:
            if recorder is not None:
                recorder.finish()
            for m in spec.models:
                identity.record(m, None, store, force=force)
            calls = executor(spec, ctx, prepared, store, limits, events=events)
        else:
            # what phase 2 will need, made while the first requests are out rather than on the loop (each
            # on its own: one that fails leaves the next to be made), in the order phase 2 needs them (its
            # first task's result, the first reply scored ahead, the run's results and summary: every
            # pillar, whose rows of the paper's rank figure the summary reads), then the caller's calls
            ahead = [_results_models, functools.partial(_scoring_versions, prepared),
                     functools.partial(_warm_up, prepared, ctx), load_pillars, package_versions,
                     *idle] if generate else list(idle)
            beside = ([recorder.background] if recorder is not None else []) + \
                ([phase2.background] if generate else []) + \
                ([functools.partial(_while_waiting, ahead, idle_threads)] if ahead else [])
            calls = asyncio.run(collect(spec, ctx, prepared, store, limits, generate=generate, force=force,
                                        events=events, ready=phase2.ready if generate else None, beside=beside,
                                        replied=phase2.replied if generate else None))
    except (AuthFailure, EndpointDown) as e:
        raise UserError(str(e)) from None
    if recorder is not None:
        recorder.finish()
    for thread in idle_threads:  # done long before, but what it made is about to be used
        thread.join()
    return calls


def _say_stale(results: RunResults, events: EventSink) -> None:
    for m in results.models.values():
        stale = sum(t.n_stale_judgements for t in m.tasks.values())
        if stale:
            events(Notice(f"{stale} stored judgements of {m.model} were made with another rubric and were not "
                          f"used: rerun to refresh them, or score with --accept-stored"))
            return


def _results_models() -> None:
    """results.json's models (pydantic: ~0.1 s to build them), which phase 2 needs for the first task it
    scores; made first, so that it rarely waits on the import lock while this thread is still importing."""
    from ..scoring import results  # noqa: F401


def _scoring_versions(prepared) -> None:
    """Each task's scoring version, found once here (`versions._scoring_files` remembers the files it hashes
    per task class: ~0.02 s for privacy and ethics, ~0.1 s for every task, read with `ast`)."""
    for p in prepared:
        scoring_version(p.task)


def _warm_up(prepared, ctx: RunContext) -> None:
    """Each task's own warm-up (Method.warm_up: ESConv's reference metrics import nltk)."""
    for p in prepared:
        if not p.not_run:
            p.task.method(ctx).warm_up(ctx)


async def _while_waiting(calls: Sequence[Callable[[], object]], threads: list[threading.Thread]) -> None:
    """Make `calls` once phase 1's workers have sent their first requests (they do at their first await),
    in a thread of their own (appended to `threads`): the loop then has little to do until the first
    replies, and a call longer than a latency (the report's template: ~0.2 s to import and compile) no
    longer holds back the replies that arrive meanwhile; it shares the interpreter with the loop instead,
    at a short switch interval while it runs (`_ShortSwitches`)."""
    for _ in range(3):
        await asyncio.sleep(0)

    def make() -> None:
        try:
            for call in calls:
                try:
                    call()
                except Exception:  # noqa: BLE001 - work done ahead only; it is done again where it is needed
                    pass
        finally:
            _short_switches.leave()

    thread = threading.Thread(target=make, name="trustmh-while-waiting", daemon=True)
    _short_switches.enter()
    try:
        thread.start()
    except BaseException:  # no thread (the process is out of them): nothing will put the interval back
        _short_switches.leave()
        raise
    threads.append(thread)


class _ShortSwitches:
    """While a thread works beside the loop, the loop thread waits for the interpreter at each of its
    wake-ups (a reply read, a commit, a send: three or four a wave), each time for up to the switch interval
    (5 ms): at 16 connections and 100 ms the first half-second's requests left ~50 ms late, ~12 ms with the
    interval at 0.5 ms. Counted, so that runs in threads of one process put back the interval found."""

    SHORT_S = 0.0005

    def __init__(self) -> None:
        self.lock, self.users, self.saved = threading.Lock(), 0, None

    def enter(self) -> None:
        with self.lock:
            if self.users == 0:
                found = sys.getswitchinterval()
                # one already as short is left alone (the interpreter keeps whole microseconds: setting back
                # what it reads can move it by one)
                self.saved = found if found > self.SHORT_S else None
                if self.saved is not None:
                    sys.setswitchinterval(self.SHORT_S)
            self.users += 1

    def leave(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0 and self.saved is not None:
                sys.setswitchinterval(self.saved)


_short_switches = _ShortSwitches()


def check_same_spec(run_dir: Path, stored: dict | None, spec: RunSpec, force: bool) -> None:
    """A run directory belongs to one spec: running another (a --tasks subset, other models) into it
    would replace its results with a different run's."""
    if stored is None or force:
        return
    def deciding(d: dict) -> dict:  # the transport only decides how replies travel, never what they are;
        # labels and groups only how the report shows the models
        d = dict(d, options={k: v for k, v in (d.get("options") or {}).items()
                             if k != "transport" and k not in PRESENTATION})
        return d
    stored, new = deciding(stored), deciding(json.loads(json.dumps(spec.to_json())))  # as stored: lists
    diff = sorted(k for k in stored.keys() | new.keys() if stored.get(k) != new.get(k))
    if diff:
        raise UserError(f"{run_dir} holds a run with another spec ({', '.join(diff)} differ); use another --out, "
                        f"or --force to replace its results with this run's")


def load_spec(run_dir: Path) -> RunSpec:
    """A run's spec, with the tasks it ran from plugins, --include files or scripts imported again (or a
    one-line error naming the file to --include)."""
    db = run_dir / "store.sqlite"
    if not db.is_file():
        raise UserError(f"{run_dir} is not a trustmh run directory (no store.sqlite)")
    store = Store(db)
    try:
        raw = store.get_meta("spec")
        origins = store.get_meta("task_origins") or {}
    finally:
        store.close()
    if raw is None:
        raise UserError(f"{db}: no run spec stored")
    if origins:
        from ..plugins import restore
        restore(origins, TASKS)
    return RunSpec.from_json(raw)
