"""A task's samples leave memory once every model of the run has scored it (engine/prepare.py
`Prepared.release`): a whole-benchmark run held every task's samples (~115 MiB) to its end. What stays is
a sized view of the store, which reads them back should anything ask again; results are unchanged."""

import gc
import json
import weakref

import pytest

from conftest import run_quiet, run_spec
from trustmh.engine import Limits, context, prepare
from trustmh.engine.prepare import Prepared, Recorder, StoredSamples
from trustmh.engine.score import Phase2
from trustmh.engine._store import Store
from trustmh.tasks import TASKS, register
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.types import Item
from test_models_together import Judged1, reply

N = 12
IDS = ("testrelease.first", "testrelease.second")


class _Judged(Judged1):  # one judgement per sample, as in test_models_together; two tasks of N items
    def load(self, data, ctx):
        return [Item(f"i{n}", {"q": f"{self.id} question {n}"}, target=str(n % 3)) for n in range(N)]

    def prompt(self, item, ctx):
        return [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": item.input["q"]}]


@pytest.fixture
def tasks():
    for task_id in IDS:
        register(type(task_id.replace(".", "_"), (_Judged,), {"id": task_id}))
    yield
    for task_id in IDS:
        TASKS.pop(task_id, None)


def watched_run(srv, out, monkeypatch):
    """A two-model run whose phase 2 notes, each time a task has been scored by every model, how many of
    each started task's samples are still alive, and the task's samples as they read then."""
    refs, first_json, seen = {}, {}, []
    start, scored = Phase2._start, Phase2._scored

    def watched_start(self, key):
        p = self.by_id[key[1]]
        if key[1] not in refs:
            refs[key[1]] = [weakref.ref(s) for s in p.samples]
            first_json[key[1]] = [json.dumps(s.to_json()) for s in p.samples]  # not the objects
        return start(self, key)

    def watched_scored(self, key, result):
        scored(self, key, result)
        if all((m, key[1]) in self.results for m in self.spec.models):
            gc.collect()
            p = self.by_id[key[1]]
            seen.append({"task": key[1], "alive": {t: sum(r() is not None for r in rs) for t, rs in refs.items()},
                         "kind": type(p.samples), "n": len(p.samples),
                         "reads": [json.dumps(s.to_json()) for s in p.samples] == first_json[key[1]]})

    monkeypatch.setattr(Phase2, "_start", watched_start)
    monkeypatch.setattr(Phase2, "_scored", watched_scored)
    spec = run_spec(models=["openai/a", "openai/b"], judge="openai/j", base_url=srv.openai_base_url,
                    judge_base_url=srv.openai_base_url, tasks=",".join(IDS), n_boot=50)
    _, results, _ = run_quiet(spec, out, limits=Limits(max_connections=2))
    monkeypatch.setattr(Phase2, "_start", start)
    monkeypatch.setattr(Phase2, "_scored", scored)
    return results, seen


def test_a_tasks_samples_leave_memory_once_every_model_has_scored_it(tasks, tmp_path, monkeypatch):
    with FakeLLMServer(reply=reply, latency_s=0.01) as srv:
        results, seen = watched_run(srv, tmp_path / "released", monkeypatch)
        # the same run with nothing released: the check above sees samples that are held
        release = Prepared.release
        monkeypatch.setattr(Prepared, "release", lambda self: None)
        held_results, held = watched_run(srv, tmp_path / "held", monkeypatch)
        monkeypatch.setattr(Prepared, "release", release)
    assert [s["task"] for s in seen] == list(IDS) and [s["task"] for s in held] == list(IDS)
    for s in seen:
        assert s["alive"][s["task"]] == 0, s  # none of its samples is referenced any more
        assert s["kind"] is StoredSamples and s["n"] == N
        assert s["reads"]  # read back from the store, they are the samples the run scored
    for s in held:
        assert s["alive"][s["task"]] == N and s["kind"] is list
    # the results and every samples.jsonl line are those of the run that held its samples
    assert results.models.keys() == held_results.models.keys()
    for m in results.models:
        assert results.models[m].model_dump(exclude={"created"}) == held_results.models[m].model_dump(exclude={"created"})
    def lines(run):  # each reply's latency is the server's of the moment, the rest is the run's result
        return [{k: v for k, v in json.loads(x).items() if k != "latency_s"}
                for x in (tmp_path / run / "samples.jsonl").read_text().splitlines()]
    assert lines("released") == lines("held") and len(lines("held")) == 2 * 2 * N
    assert results.models["openai/a"].tasks[IDS[0]].value == 2.0 and results.models["openai/b"].tasks[IDS[1]].value == 4.0


def test_release_waits_for_the_recorder_to_store_the_samples(tasks, tmp_path):
    """Scored by every model before the Recorder wrote them (it writes beside phase 1 and may lag): the
    samples stay until they are in the store, then leave."""
    spec = run_spec(models=["openai/a"], tasks=",".join(IDS))
    ctx = context(spec)
    prepared, checksums = prepare(spec, ctx, lazy=True)  # the first item of each task built, the rest later
    store = Store(tmp_path / "store.sqlite")
    try:
        recorder = Recorder(store, prepared, checksums, ctx)
        first = prepared[0]
        first.release()
        assert isinstance(first.samples, list)  # not stored yet: kept
        recorder.finish()  # builds and stores every sample
        assert isinstance(first.samples, StoredSamples) and len(first.samples) == N
        assert [s.item.id for s in first.samples] == [f"i{n}" for n in range(N)]
        assert isinstance(prepared[1].samples, list)  # not scored: kept in memory
        prepared[1].release()
        assert isinstance(prepared[1].samples, StoredSamples) and len(prepared[1].samples) == N
    finally:
        store.close()
