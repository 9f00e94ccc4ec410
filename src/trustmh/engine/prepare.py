"""Turning the selected tasks' data into samples, and reading them back from a run's store."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..data.loaders import file_sha256
from ..data.methods import MethodError
from ..errors import UserError
from ..store import Store, sample_row
from ..tasks import RunContext, Task, resolve_tasks
from ..types import Sample
from .spec import RunSpec, data_source


@dataclass
class Prepared:
    task: Task
    samples: list[Sample] = field(default_factory=list)
    not_run: str | None = None
    all_ids: set[str] = field(default_factory=set)


def prepare(spec: RunSpec, ctx: RunContext) -> tuple[list[Prepared], dict[str, str]]:
    """Load every selected task's items and build its samples (in data order, `--limit` first N)."""
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
            items = task.load(data, ctx)
            p.all_ids = {it.id for it in items}
            if spec.limit is not None:
                items = items[: spec.limit]
            for it in items:
                p.samples.extend(task.samples(it, ctx))
        except MethodError as e:
            # The paper's protocol without its method file (or with an altered one): this task does not
            # run, and says why; there is no fall-back to other text.
            p.samples, p.not_run = [], str(e)
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
        raise UserError(f"no task could run: no selected task has its data in {data.root} "
                        f"({len(needs_data)} missing; first: {needs_data[0].not_run})"
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


SLICE_S = 0.005  # work done beside phase 1 on its event loop gives the loop back this often


class Recorder:
    """Writes the run's samples into its store, which `trustmh score` reads back instead of the data: all
    at once (`finish`), or a slice at a time on phase 1's event loop (`background`), so that the first
    requests do not wait for every sample to be serialised (~2 s of CPU for the full benchmark's 21k).
    The "prepared" record that makes the samples usable is written last: a run killed before they are
    all in is re-scored from the data, never from part of its samples."""

    def __init__(self, store: Store, prepared: list[Prepared], checksums: dict[str, str]):
        self.store, self.prepared, self.checksums = store, prepared, checksums
        self.todo = enumerate(s for p in prepared for s in p.samples)
        self.done = False
        store.del_meta("prepared")
        store.clear_samples()

    def _step(self, slice_s: float | None) -> None:
        """Write the next samples, for about `slice_s` seconds (None: all of them)."""
        deadline = None if slice_s is None else time.perf_counter() + slice_s
        rows = []
        for i, s in self.todo:
            rows.append(sample_row(i, s))
            if deadline is not None and time.perf_counter() > deadline:
                break
        else:
            self.done = True
        self.store.add_samples(rows)
        if self.done:
            self.store.set_meta("prepared", {"checksums": self.checksums, "tasks": {
                p.task.id: {"not_run": p.not_run, "n": len(p.samples)} for p in self.prepared}})

    async def background(self) -> None:
        while not self.done:
            self._step(SLICE_S)
            await asyncio.sleep(0)

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
