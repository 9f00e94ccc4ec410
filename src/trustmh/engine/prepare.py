"""Turning the selected tasks' data into samples, and reading them back from a run's store."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..data.loaders import file_sha256
from ..data.methods import MethodError
from ..errors import UserError
from ._requests import own_system_message
from ._store import Store, sample_row
from ..tasks import RunContext, Task, resolve_tasks
from ..types import Item, Sample
from ._slices import beside
from .spec import RunSpec, data_source


@dataclass
class Prepared:
    task: Task
    samples: list[Sample] = field(default_factory=list)
    not_run: str | None = None
    all_ids: set[str] = field(default_factory=set)
    # Items whose samples are not built yet: a run builds them as phase 1 reaches them (`batches`).
    pending: Iterator[Item] | None = None
    on_built: Callable[[], None] | None = None  # told of each item built (Recorder follows the building)
    n_items: int = 0  # the items the run takes (after --limit), known before any is built
    n_built: int = 0  # of them, the items built so far
    # The store that holds every one of this task's samples (set by Recorder once they are all in), and
    # whether every model has scored the task (`release`): with both, the samples leave memory.
    recorded: Store | None = None
    scored: bool = False

    def expected_samples(self) -> int:
        """The samples this task will have: exact once every item is built; before that the items not built
        yet are counted at the mean of those built (tasks whose variants vary per item differ by a few %)."""
        if self.pending is None or not self.n_built:
            return len(self.samples)
        return round(len(self.samples) * max(self.n_items, self.n_built) / self.n_built)

    def build_next(self, ctx: RunContext) -> bool:
        """Build the next pending item's samples; False once none is left."""
        item = next(self.pending, None) if self.pending is not None else None
        built = item is not None
        if not built:
            self.pending = None
        else:
            try:
                samples = self.task.method(ctx).samples(item, ctx)
                refused = own_system_message(self.task.id, samples, ctx)
                if refused:
                    raise MethodError(refused)
                self.samples.extend(samples)
                self.n_built += 1
            except MethodError as e:
                # The paper's protocol without its method file (or with an altered one), or its request with
                # a system message of its own under --system-prompt: this task does not run, and says why;
                # there is no fall-back to other text.
                self.samples, self.not_run, self.pending, built = [], str(e), None, False
        if self.on_built is not None:
            self.on_built()
        return built

    def release(self) -> None:
        """Every model of the run has scored this task: nothing needs its samples in memory any more (its
        replies and verdicts are all made, so no request or judgement holds one), and a run would otherwise
        hold the whole benchmark's (~115 MiB) to its end. Once they are in the store they are dropped and
        read back from it should anything ask again; before that, the Recorder drops them when it has
        written them."""
        self.scored = True
        if self.recorded is not None and isinstance(self.samples, list) and self.pending is None:
            self.samples = StoredSamples(self.recorded, self.task.id, len(self.samples))  # type: ignore[assignment]

    def batches(self, ctx: RunContext) -> Iterator[list[Sample]]:
        """The samples in run order: those already built, then an item's at a time as it is built."""
        i = 0
        while True:
            if i < len(self.samples):
                batch, i = self.samples[i:], len(self.samples)
                yield batch
            elif not self.build_next(ctx):
                return


def prepare(spec: RunSpec, ctx: RunContext, *, lazy: bool = False) -> tuple[list[Prepared], dict[str, str]]:
    """Load every selected task's items and build its samples (in data order, `--limit` first N). With
    `lazy` only each task's first item is built (so that a missing method file shows before any call):
    a run builds the rest as phase 1 reaches them (`Prepared.batches`), its first requests waiting for
    none of the ~3 s the full benchmark's perturbed variants take to build."""
    data = data_source(spec)
    prepared, checksums = [], {}
    for task in resolve_tasks(spec.tasks):
        p = Prepared(task)
        missing = task.missing_files(data)
        if missing:
            how = ("run `trustmh data pull` (or `trustmh data pull --from DIR`)" if data.kind == "data"
                   else "the sample suite lacks it")
            from ..data.manifest import DATASETS
            gated = DATASETS.get(task.dataset)
            if gated is not None and gated.gated:  # `data pull` cannot fetch it: say how the user gets it
                how = gated.how_to_get
            p.not_run = f"{task.dataset} missing ({missing[0]}) — {how}"
            prepared.append(p)
            continue
        try:
            items = task.method(ctx).load(data, ctx)
        except MethodError as e:
            p.not_run = str(e)
            prepared.append(p)
            continue
        p.all_ids = {it.id for it in items}
        taken = items[: spec.limit] if spec.limit is not None else items
        p.n_items, p.pending = len(taken), iter(taken)
        while p.build_next(ctx) and not lazy:
            pass
        if p.not_run:
            prepared.append(p)
            continue
        for f in task.files:
            checksums[f] = file_sha256(data.path(f))
        prepared.append(p)
    # A task with built-in items (no files) does not make a data run: with every data-reading task missing
    # its files, a score would rest on the built-in ones alone and look like a result.
    needs_data = [p for p in prepared if p.not_run or p.task.files]
    if needs_data and all(p.not_run for p in needs_data):
        built_in = [p.task.id for p in prepared if not p.not_run]
        missing = [p for p in needs_data if " missing (" in (p.not_run or "")]
        why = (f"no selected task has its data in {data.root} ({len(needs_data)} missing; first: {needs_data[0].not_run})"
               if len(missing) == len(needs_data) else
               f"{len(needs_data)} not run ({'; '.join(f'{p.task.id}: {p.not_run}' for p in needs_data[:3])}"
               f"{' ...' if len(needs_data) > 3 else ''})")
        raise UserError(f"no task could run: {why}"
                        + (f"; only tasks with built-in items ({', '.join(built_in)}) could, and a score from "
                           f"them alone would not be a result" if built_in else ""))
    return prepared, checksums


class StoredSamples:
    """A task's samples as its run stored them, read back one at a time (sized, re-iterable)."""

    def __init__(self, store: Store, task_id: str, n: int):
        self.store, self.task_id, self.n = store, task_id, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Sample]:
        return self.store.iter_samples(self.task_id)


def samples_except(samples, skip: Callable[[str, str], bool]) -> Iterator[Sample]:
    """The samples `skip(item_id, variant)` is false of; stored ones that are skipped are never parsed."""
    if isinstance(samples, StoredSamples):
        return samples.store.iter_samples(samples.task_id, skip)
    return (s for s in samples if not skip(s.item.id, s.variant))


class Recorder:
    """Writes the run's samples into its store, which `trustmh score` reads back instead of the data: all
    at once (`finish`), or a slice at a time on phase 1's event loop (`background`), following phase 1
    as it builds them, so that no request waits for samples to be serialised (~2 s of CPU for the full
    benchmark's 21k). The "prepared" record that makes them usable is written last: a run killed before
    they are all in is re-scored from the data, never from part of its samples."""

    def __init__(self, store: Store, prepared: list[Prepared], checksums: dict[str, str], ctx: RunContext):
        self.store, self.prepared, self.checksums, self.ctx = store, prepared, checksums, ctx
        self.task_i = self.sample_i = self.seq = 0  # the next sample to write
        self.done = False
        self.more: asyncio.Event | None = None
        for p in prepared:
            p.on_built = self._built
        store.del_meta("prepared")
        store.clear_samples()

    def _step(self, deadline: float | None) -> bool:
        """Write the samples built so far, until about `deadline` (None: all of them, building what is
        left). False when it has caught up with the building and waits for more."""
        rows, more, written = [], True, []
        while self.task_i < len(self.prepared):
            p = self.prepared[self.task_i]
            if self.sample_i < len(p.samples):
                rows.append(sample_row(self.seq, p.samples[self.sample_i]))
                self.seq, self.sample_i = self.seq + 1, self.sample_i + 1
                if deadline is not None and time.perf_counter() > deadline:
                    break
            elif p.pending is None:  # built and written: the next task
                written.append(p)
                self.task_i, self.sample_i = self.task_i + 1, 0
            elif deadline is None:
                p.build_next(self.ctx)
            else:
                more = False
                break
        else:
            self.done = True
        self.store.add_samples(rows)
        for p in written:  # committed: a task every model has scored already leaves memory now
            p.recorded = self.store
            if p.scored:
                p.release()
        if self.done:
            self.store.set_meta("prepared", {"checksums": self.checksums, "tasks": {
                p.task.id: {"not_run": p.not_run, "n": len(p.samples)} for p in self.prepared}})
        return more

    def _built(self) -> None:
        if self.more is not None:
            self.more.set()

    async def background(self) -> None:
        """Store the samples a slice at a time beside phase 1; caught up with the building, wait for the
        next item built."""
        self.more = asyncio.Event()
        await beside(lambda deadline: None if self.done else self._step(deadline), self.more)

    def finish(self) -> None:
        if not self.done:
            self._step(None)


def prepare_from_store(spec: RunSpec, store: Store) -> tuple[list[Prepared], dict[str, str]] | None:
    """Re-scoring: the samples the run generated, streamed from its store instead of loading the data
    again, so memory does not grow with the run. None when the store cannot stand in for the data
    (an older store, another task selection, replay files whose ids are checked against the data)."""
    meta = store.get_meta("prepared")
    if meta is None or any(m.startswith("replay/") for m in [*spec.models, spec.judge]):
        return None
    tasks = resolve_tasks(spec.tasks)
    if [t.id for t in tasks] != list(meta["tasks"]):
        return None
    counts = store.sample_counts()
    prepared = []
    for task in tasks:
        m = meta["tasks"][task.id]
        if m["not_run"]:
            prepared.append(Prepared(task, not_run=m["not_run"]))
        elif counts.get(task.id, 0) != m["n"]:
            return None
        else:
            prepared.append(Prepared(task, samples=StoredSamples(store, task.id, m["n"])))  # type: ignore[arg-type]
    return prepared, meta["checksums"]
