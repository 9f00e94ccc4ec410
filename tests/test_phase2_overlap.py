"""Scoring keeps pace with collection: a task is scored while later tasks are still collecting, and the
results are those a `trustmh score` of the same run directory gives (it scores everything at the end)."""

import json

from conftest import make_synthetic_data, run_spec, synthetic_reply
from trustmh.engine import Limits, PhaseDone, PhaseProgress, run
from trustmh.testing.fake_server import FakeLLMServer


def outputs(run_dir):
    res = json.loads((run_dir / "results.json").read_text())
    res.pop("created")
    return res, (run_dir / "samples.jsonl").read_bytes()


def test_tasks_are_scored_while_others_collect_with_the_results_of_scoring_at_the_end(tmp_path):
    # ethics.reasoning (40 items, each judged) collects first, then privacy.awareness_tier1 (300 items).
    data = make_synthetic_data(tmp_path / "data", 300, 40)
    events = []
    with FakeLLMServer(reply=synthetic_reply, latency_s=0.01) as srv:
        spec = run_spec(models=["openai/fake"], judge="openai/judge", base_url=srv.openai_base_url,
                        judge_base_url=srv.openai_base_url, tasks="ethics.reasoning,privacy.awareness_tier1",
                        suite="data", data_dir=str(data), n_boot=300)
        run_dir, _, calls = run(spec, tmp_path / "run", limits=Limits(max_connections=4), events=events.append)
        overlapped = outputs(run_dir)
        # Re-scored from the store alone, every task after phase 1: no call, same results and samples.
        _, _, again = run(spec, run_dir, limits=Limits(max_connections=4), generate=False)
    assert calls == {"openai/fake": 340, "judge": 40} and again == {"openai/fake": 0, "judge": 0}
    kinds = [(type(e).__name__, e.phase) for e in events if isinstance(e, (PhaseProgress, PhaseDone))]
    generated = kinds.index(("PhaseDone", "generate"))
    # ethics' 40 samples were scored before generation ended (privacy's 300 were still being collected).
    early = [e for e in events[:generated] if isinstance(e, PhaseProgress) and e.phase == "score"]
    assert early and early[0].done == 40
    assert outputs(run_dir) == overlapped
    # The run built its samples as phase 1 reached them and stored them beside it: the store holds them
    # all, in the order an eager prepare builds them, and that is what the re-score read.
    from trustmh.engine import context, prepare
    from trustmh.engine.prepare import prepare_from_store
    from trustmh.engine._store import Store
    store = Store(run_dir / "store.sqlite")
    stored = prepare_from_store(spec, store)
    eager, _ = prepare(spec, context(spec))
    assert stored is not None
    assert [[s.to_json() for s in p.samples] for p in stored[0]] == [[s.to_json() for s in p.samples] for p in eager]
    store.close()
    res = overlapped[0]["models"]["openai/fake"]["tasks"]
    assert res["ethics.reasoning"]["n"] == 40 and res["privacy.awareness_tier1"]["n"] == 300


def test_samples_are_recorded_beside_phase_1_and_never_used_half_written(tmp_path):
    import asyncio

    from trustmh.engine import context, prepare
    from trustmh.engine.prepare import Recorder, prepare_from_store
    from trustmh.engine._store import Store
    spec = run_spec(models=["baseline/counselor"], tasks="privacy,ethics", suite="sample")
    prepared, checksums = prepare(spec, context(spec))
    n = sum(len(p.samples) for p in prepared)
    store = Store(tmp_path / "store.sqlite")
    recorder = Recorder(store, prepared, checksums, context(spec))

    recorder._step(0.0)  # one sample, as if phase 1 had ended (or the run been killed) at once
    # Part of the samples are in, and nothing says they are usable: a re-score reads the data instead.
    assert 0 < sum(store.sample_counts().values()) < n and store.get_meta("prepared") is None
    assert prepare_from_store(spec, store) is None
    asyncio.run(recorder.background())  # the rest, a slice at a time
    assert recorder.done
    recorder.finish()  # nothing left: writes nothing twice
    assert sum(store.sample_counts().values()) == n
    again, _ = prepare_from_store(spec, store)
    assert [[s.key for s in p.samples] for p in again] == [[s.key for s in p.samples] for p in prepared]


def test_a_lazy_prepare_builds_first_items_only_and_the_rest_in_order():
    from trustmh.engine import context, prepare
    spec = run_spec(models=["baseline/counselor"], tasks="robustness.support,ethics", suite="sample")
    ctx = context(spec)
    eager, _ = prepare(spec, ctx)
    lazy, _ = prepare(spec, ctx, lazy=True)
    for e, p in zip(eager, lazy):
        assert p.pending is not None and 0 < len(p.samples) < len(e.samples)  # the first item's only
        assert [s.key for b in p.batches(ctx) for s in b] == [s.key for s in e.samples]
        assert p.pending is None and [s.key for s in p.samples] == [s.key for s in e.samples]


def test_a_model_is_asked_for_the_judged_task_first_and_the_outputs_keep_run_order(tmp_path):
    # privacy.awareness_tier1 is listed (so prepared and written) first, but no judge reads it: the model is
    # asked for ethics' replies first (collect.judged_first), so the judge has work from the first reply.
    data = make_synthetic_data(tmp_path / "data", 30, 6)
    with FakeLLMServer(reply=synthetic_reply, latency_s=0.0) as srv:
        spec = run_spec(models=["openai/fake"], judge="openai/judge", base_url=srv.openai_base_url,
                        judge_base_url=srv.openai_base_url, tasks="privacy.awareness_tier1,ethics.reasoning",
                        suite="data", data_dir=str(data), n_boot=50)
        run_dir, res, calls = run(spec, tmp_path / "run", limits=Limits(max_connections=1))
        asked = ["ethics" if "case-" in r["messages"][-1]["content"] else "privacy"
                 for r in srv.requests if r["model"] == "fake"]
        first_judged = next(i for i, r in enumerate(srv.requests) if r["model"] == "judge")
    assert calls == {"openai/fake": 36, "judge": 6}
    assert asked == ["ethics"] * 6 + ["privacy"] * 30
    assert first_judged < 6 + 6  # the judge starts while ethics' replies come in, not after privacy's
    rows = [json.loads(x)["task"] for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert rows == ["privacy.awareness_tier1"] * 30 + ["ethics.reasoning"] * 6
    assert list(res.models["openai/fake"].tasks) == ["privacy.awareness_tier1", "ethics.reasoning"]
