"""Replay files naming things that do not exist are errors of the file, at its line (issue 14)."""

from __future__ import annotations

import asyncio

import pytest

from conftest import run_quiet, run_spec, write_replay
from trustmh.errors import DataError
from trustmh.models.replay import ReplayModel
from trustmh.tasks import TASKS
from trustmh.types import Request


def test_unknown_task_id_is_an_error_at_its_line(tmp_path):
    path = write_replay(tmp_path / "r.jsonl", [
        {"task": "privacy.awareness_tier1", "item_id": "x", "response": "a"},
        {"task": "privacy.awarness_tier1", "item_id": "y", "response": "b"},  # the typo
    ])
    model = ReplayModel("replay/r", str(path))
    with pytest.raises(DataError) as info:
        model.check_ids({}, TASKS)
    msg = str(info.value)
    assert msg.startswith(f"{path}:2: unknown task id 'privacy.awarness_tier1'") and "\n" not in msg
    assert "did you mean privacy.awareness_tier1?" in msg


def test_records_of_registered_tasks_not_selected_and_of_selected_extra_tasks_are_fine(tmp_path):
    path = write_replay(tmp_path / "r.jsonl", [{"task": "ethics.reasoning", "item_id": "x", "response": "a"},
                                               {"task": "validate-judge", "item_id": "c1", "response": "b"}])
    model = ReplayModel("replay/r", str(path))
    # ethics.reasoning is registered but not selected (its item ids are not checked); validate-judge is
    # selected, not registered, and its item exists: both records pass and are answered as recorded.
    assert model.check_ids({"validate-judge": {"c1"}}, TASKS) is None
    answers = [asyncio.run(model.generate(Request(messages=[], params={}, task=task, item_id=item)))
               for task, item in (("ethics.reasoning", "x"), ("validate-judge", "c1"))]
    assert [(r.text, r.error_kind) for r in answers] == [("a", None), ("b", None)]
    # Each of the two reasons is what lets its record pass: without it the same file is refused.
    with pytest.raises(DataError, match=r"r\.jsonl:2: unknown task id 'validate-judge'"):
        model.check_ids({}, TASKS)
    with pytest.raises(DataError, match=r"r\.jsonl:1: unknown task id 'ethics.reasoning'"):
        model.check_ids({"validate-judge": {"c1"}}, ())
    with pytest.raises(DataError, match=r"r\.jsonl:2: unknown item id 'c1' for task validate-judge"):
        model.check_ids({"validate-judge": {"c2"}}, TASKS)


def test_a_run_refuses_a_replay_file_with_an_unknown_task(tmp_path):
    path = write_replay(tmp_path / "r.jsonl", [{"task": "crisis.identifcation", "item_id": "0", "response": "a"}])
    spec = run_spec(models=[f"replay/{path}"], tasks="privacy.awareness_tier1", suite="sample")
    with pytest.raises(DataError, match=r"r\.jsonl:1: unknown task id 'crisis.identifcation' \(did you mean crisis"):
        run_quiet(spec, tmp_path / "run")


def test_a_replay_response_with_a_lone_surrogate_is_stored_cleaned(tmp_path):
    """json.loads accepts a lone \\ud800 escape; SQLite and samples.jsonl cannot hold it."""
    import json
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"task": "privacy.awareness_tier1", "item_id": "0", "response": "Answer: 2 \ud800"}) + "\n")
    spec = run_spec(models=[f"replay/{path}"], tasks="privacy.awareness_tier1", suite="sample", limit=1)
    run_dir, res, _ = run_quiet(spec, tmp_path / "run")
    row = json.loads((run_dir / "samples.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert row["response"] == "Answer: 2 \ufffd" and res.models[spec.models[0]].tasks["privacy.awareness_tier1"].n_errors == 0


def test_a_run_meeting_unstorable_replies_loses_none(tmp_path):
    """Every third reply carries a lone surrogate, a 2^63 token count and an object as finish_reason: one
    such reply used to crash the group commit and lose its neighbours; now every reply is stored."""
    from trustmh.engine import Limits
    from trustmh.engine._store import Store
    from trustmh.testing.fake_server import Fault, FakeLLMServer
    faults = lambda n, body: Fault("bad_types") if n % 3 == 0 else None  # noqa: E731
    from conftest import make_synthetic_data, synthetic_reply
    data = make_synthetic_data(tmp_path / "data", 12, 0)
    with FakeLLMServer(reply=synthetic_reply, faults=faults) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="privacy.awareness_tier1",
                        suite="data", data_dir=str(data))
        run_dir, res, calls = run_quiet(spec, tmp_path / "run", limits=Limits(max_connections=8, backoff_base=0.01))
        assert srv.n_requests == calls["openai/fake"] == 12  # nothing retried or paid twice
    t = res.models["openai/fake"].tasks["privacy.awareness_tier1"]
    assert t.n_samples == 12 and t.n_errors == 0
    store = Store(run_dir / "store.sqlite")
    texts = [r[0] for r in store.db.execute("SELECT text FROM calls WHERE ok = 1")]
    assert len(texts) == 12 and sum("\ufffd" in x for x in texts) == 4
