"""--executor ray on a local Ray instance against a loopback fake server: the same results as a local
run, nothing paid twice, and merging a shard again adds no row."""

import json

import pytest

from conftest import Lazy, run_quiet, run_spec
from trustmh.testing.fake_server import FakeLLMServer

ray = Lazy("ray")

MODELS = ["openai/model-a", "openai/model-b"]
# a pillar with an LLM judge, and a robustness task whose clean samples are its base task's requests
TASKS = "ethics.reasoning,reliability.support,robustness.support"


def reply(body):
    """Deterministic, parseable by the tasks and their judges, and different per model in every branch:
    shards of two models run side by side, so a judge body their identical replies would share is paid
    once per model on Ray (once in all locally); see executors/ray_executor.py. Within a model, replies
    repeat (a robustness task's perturbed replies equal its clean one), and those judge bodies are paid
    once on Ray too: a shard holds a task's items with the robustness variants built on them."""
    text = body["messages"][-1]["content"]
    if "APA" in text:
        return '{"sc1": 4, "sc2": 3, "sc3": 5, "sc4": 2, "sc5": 4}'
    if "Rate" in text or "rate" in text:
        return f"Rating: {1 + len(text) % 5} ({body['model']})"
    choice = "ABCD"[(len(text) + ord(body["model"][-1])) % 4]
    model = body["model"]
    return f'```json\n{{"choice": "{choice}", "reasoning": "because ({model})"}}\n```'


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


def outputs(run_dir):
    res = json.loads((run_dir / "results.json").read_text())
    res.pop("created")
    res.pop("outputs")  # hashes samples.jsonl, whose latencies differ between runs
    lines = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    for line in lines:
        line.pop("latency_s", None)
        # which of two samples asking one body sent it (attempts 1) and which took its reply (0) is timing's
        line.pop("attempts", None)
    return res, lines


def test_ray_run_equals_local_run_and_pays_each_call_once(local_ray, tmp_path):
    from trustmh.executors.ray_executor import RayExecutor
    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=MODELS, judge="openai/judge", base_url=srv.openai_base_url,
                        judge_base_url=srv.openai_base_url, tasks=TASKS, limit=6)
        run_quiet(spec, tmp_path / "local" / "run")
        local_calls, local_paid = srv.n_completed, srv.calls
        srv.reset_counters()

        executor = RayExecutor(units_per_shard=4)  # several shards per model
        _, res, calls = run_quiet(spec, tmp_path / "ray" / "run", executor=executor)
        assert srv.calls == local_paid  # the same requests, each paid as often as in the local run
        assert calls["openai/model-a"] + calls["openai/model-b"] + calls["judge"] == local_calls

        _, _, again = run_quiet(spec, tmp_path / "ray" / "run", executor=executor)  # resume: all stored
        assert srv.n_completed == local_calls and sum(again.values()) == 0
    assert outputs(tmp_path / "local" / "run") == outputs(tmp_path / "ray" / "run")
    t = res.models["openai/model-b"].tasks["ethics.reasoning"]
    assert t.n_samples > 0 and t.n_errors == 0 and t.metrics["sc1"].value == 4.0


def test_merging_a_shard_again_adds_no_row_and_keeps_successes(tmp_path):
    from trustmh.engine._store import Store
    from trustmh.types import Response
    store = Store(tmp_path / "s.sqlite")
    store.put_call("k1", "ep", "model", ("t", "1", ""), Response("ok"))
    store.put_call("k2", "ep", "model", ("t", "2", ""), Response(None, error_kind="timeout", error="slow"))
    shard = Store(tmp_path / "shard.sqlite")
    shard.put_call("k1", "ep", "model", ("t", "1", ""), Response(None, error_kind="timeout", error="slow"))
    shard.put_call("k2", "ep", "model", ("t", "2", ""), Response("fixed"))
    shard.put_call("k3", "ep", "model", ("t", "3", ""), Response("new"))
    rows = shard.call_rows()
    store.merge_calls(rows)
    store.merge_calls(rows)  # a shard run again after a node failure
    assert store.db.execute("SELECT count(*) FROM calls").fetchone()[0] == 3
    assert store.get_call("k1").text == "ok"  # a stored success is never replaced by a failure
    assert store.get_call("k2").text == "fixed" and store.get_call("k3").text == "new"
    assert [r[0] for r in store.call_rows("t", ["2", "3"])] == ["k2", "k3"]


def test_executor_flags_are_checked(tmp_path):
    from trustmh.errors import UserError
    from trustmh.executors import make_executor
    assert make_executor("local") is None
    with pytest.raises(UserError, match="--executor"):
        make_executor("dask")
    with pytest.raises(UserError, match="--ray-address needs --executor ray"):
        make_executor("local", ray_address="auto")
    with pytest.raises(UserError, match="--shard-size needs --executor ray"):
        make_executor("local", shard_size=5)
    with pytest.raises(UserError, match="at least 1"):
        make_executor("ray", shard_size=0)
    assert make_executor("ray", shard_size=7).units_per_shard == 7


def test_shard_size_cuts_families_not_samples():
    """A family is a task's item with the robustness variants built on it: its clean sample is the base
    task's request and its perturbed replies are judged in the base item's context, so the requests and
    judge bodies a family shares are in one shard."""
    from trustmh.executors.ray_executor import plan
    from trustmh.engine import prepare
    from trustmh.tasks import RunContext
    spec = run_spec(models=MODELS, tasks=TASKS, limit=6)
    prepared, _ = prepare(spec, RunContext(seed=spec.seed, judge=spec.judge, options=spec.options))
    family_of = {p.task.id: getattr(p.task, "base_id", None) or p.task.id for p in prepared}
    assert family_of["robustness.support"] == "reliability.support"
    families = {(family_of[s.task], s.item.id) for p in prepared for s in p.samples}
    n_samples = sum(len(p.samples) for p in prepared)
    for size in (1, 4, len(families)):
        shards = plan(spec, prepared, size, cpus=2)
        assert len(shards) == len(MODELS) * -(-len(families) // size)
        assert sum(s.n for s in shards) == len(MODELS) * n_samples  # every sample in exactly one shard
        where: dict = {}
        for i, shard in enumerate(shards):
            mine = {(family_of[d["task"]], d["item"]["id"]) for samples in shard.samples.values() for d in samples}
            assert len(mine) <= size
            for samples in shard.samples.values():
                for d in samples:
                    where.setdefault((shard.model, family_of[d["task"]], d["item"]["id"]), set()).add(i)
                    # the seed rows of a shard cover every request task its samples are filed under
                    assert d["item"]["id"] in shard.items[d["request_task"] or d["task"]]
        # a robustness item, its perturbed variants and the base task's clean request are never split
        assert len(where) == len(MODELS) * len(families) and all(len(v) == 1 for v in where.values())


def test_a_relative_hf_path_works_on_workers_started_elsewhere(local_ray, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from test_hf import build_tiny_model
    from trustmh.executors.ray_executor import RayExecutor
    # The Ray instance was started in pytest's directory, so its workers run there; the driver is elsewhere.
    build_tiny_model(tmp_path / "models" / "tiny")
    monkeypatch.chdir(tmp_path)
    # One item, one shard: each worker that takes a shard imports torch and loads the model (~10 s of CPU).
    spec = run_spec(models=["hf/models/tiny"], tasks="privacy.awareness_tier1", limit=1)
    _, res, calls = run_quiet(spec, tmp_path / "run", executor=RayExecutor(units_per_shard=1))
    t = res.models["hf/models/tiny"].tasks["privacy.awareness_tier1"]
    assert calls["hf/models/tiny"] == 1 and t.n_samples == 1 and t.n_errors == 0
    # The driver recorded the model's identity (its workers loaded it), so a re-score needs no model folder.
    from trustmh.models import model_identity
    assert res.models["hf/models/tiny"].identity["fingerprint"] == model_identity("hf/models/tiny")["fingerprint"]
    (tmp_path / "models").rename(tmp_path / "gone")
    _, again, _ = run_quiet(spec, tmp_path / "run", generate=False)
    assert again.models["hf/models/tiny"].tasks["privacy.awareness_tier1"].value == t.value


def test_included_task_and_model_reach_ray_workers(local_ray, cli, tmp_path):
    """`--include`d code reaches the workers of a cluster the command joins: the command runs in a process
    of its own (its tasks stay out of this one) and joins this file's instance, as a user joins a cluster
    with --ray-address (a second instance would cost ~6 s of CPU in Ray's own processes)."""
    from test_plugins import INCLUDED, ok, task_result
    f = tmp_path / "mine.py"
    f.write_text(INCLUDED)
    run = tmp_path / "run"
    address = ray.get_runtime_context().gcs_address
    ok(cli("run", "--include", f, "--model", "terse/x", "--tasks", "mine", "--out", run, "--bootstrap", "100",
           "--executor", "ray", "--ray-address", address, "--shard-size", "1", cwd=tmp_path))
    assert task_result(run, "terse/x", "mine.short")["value"] == 1.0
    assert ray.is_initialized()  # the command left the instance it joined running


def test_an_unreachable_ray_address_fails_at_one_bounded_connect_before_ray_is_asked(monkeypatch):
    """ray.init against an address where nothing listens waits for minutes; the executor instead tries
    one TCP connect with a finite timeout when it is made, and fails there, before Ray is ever called."""
    import socket
    from trustmh.errors import UserError
    from trustmh.executors import make_executor
    from trustmh.executors import ray_executor
    connects, inits = [], []
    real_connect = socket.create_connection

    def counted_connect(address, timeout=None, *args, **kwargs):
        connects.append((address, timeout))
        return real_connect(address, timeout, *args, **kwargs)
    monkeypatch.setattr(ray_executor.socket, "create_connection", counted_connect)
    monkeypatch.setattr(ray, "init", lambda *a, **kw: inits.append(kw))
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(UserError, match="cannot reach a Ray cluster"):
            make_executor("ray", ray_address=address)
    with pytest.raises(UserError, match="host:port"):
        make_executor("ray", ray_address="not an address")
    # one connect per address, each bounded, none for the malformed one; Ray itself never asked
    assert [where for where, _ in connects] == [("127.0.0.1", port)] * 2 and inits == []
    assert all(timeout is not None and 0 < timeout <= 3.0 for _, timeout in connects)


def with_item_id(sample, item_id):
    import dataclasses
    return dataclasses.replace(sample, item=dataclasses.replace(sample.item, id=item_id))


def _twins(spec, task="ethics.reasoning"):
    """The prepared samples of `task` with one item's sample repeated under another item id: two items
    whose generations send one body (a data set that repeats an item's text)."""
    from trustmh.engine import prepare
    from trustmh.tasks import RunContext
    prepared, _ = prepare(spec, RunContext(seed=spec.seed, judge=spec.judge, options=spec.options))
    p = next(p for p in prepared if p.task.id == task)
    first = p.samples[0]
    twin = with_item_id(first, first.item.id + "-again")
    p.samples.append(twin)
    p.all_ids = set(p.all_ids) | {twin.item.id}
    return prepared, p, first, twin


def test_items_that_send_one_body_run_in_one_shard():
    """A remote model's reply depends on the body alone, so a local run sends a repeated body once; shards
    run apart, so the items that send it must share a shard or it is paid once per shard."""
    from trustmh.executors.ray_executor import plan
    spec = run_spec(models=MODELS, tasks="ethics.reasoning", limit=4)
    prepared, p, first, twin = _twins(spec)
    shards = plan(spec, prepared, 1, cpus=2)
    holding = [{d["item"]["id"] for d in sh.samples.get(p.task.id, ())} for sh in shards if sh.model == MODELS[0]]
    assert [ids for ids in holding if first.item.id in ids] == [{first.item.id, twin.item.id}]
    assert sum(len(ids) for ids in holding) == len(p.samples)  # every sample once, the rest one item a shard
    assert len(holding) == len(p.samples) - 1


def test_a_shard_returns_the_bodies_it_answered_and_the_run_store_keeps_them(tmp_path):
    """run_shard (as a Ray worker runs it, here in this process) returns the bodies its calls answered;
    merge_shard keeps them in the run store, and a later shard seeded with them pays nothing for a body
    the run has answered, on another item."""
    from trustmh.engine import Limits, Store
    from trustmh.executors.ray_executor import merge_shard, run_shard
    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=MODELS[:1], base_url=srv.openai_base_url, tasks="ethics.reasoning", limit=2)
        prepared, p, first, twin = _twins(spec)
        ids = {p.task.id: sorted(p.all_ids)}
        limits = dict(Limits().__dict__)
        result = run_shard(spec.to_json(), MODELS[0], {p.task.id: [first.to_json(), twin.to_json()]}, ids, [], limits)
        assert srv.n_completed == 1 and result[3]  # one body, one call, and its body row returned
        store = Store(tmp_path / "run.sqlite")
        merge_shard(store, result)
        merge_shard(store, result)  # a shard Ray runs again adds nothing
        assert store.body_rows() == result[3]
        third = with_item_id(first, first.item.id + "-third")
        seed = store.call_rows()
        again = run_shard(spec.to_json(), MODELS[0], {p.task.id: [third.to_json()]}, ids | {p.task.id: ids[p.task.id] +
                          [third.item.id]}, seed, limits, (), store.body_rows(r[0] for r in seed))
        assert srv.n_completed == 1 and again[2].get(MODELS[0], 0) == 0  # answered by the stored body
        store.close()
