"""Replay files naming things that do not exist are errors of the file, at its line (issue 14)."""

from __future__ import annotations

import pytest

from conftest import run_quiet, run_spec, write_replay
from trustmh.errors import DataError
from trustmh.models.replay import ReplayModel


def test_unknown_task_id_is_an_error_at_its_line(tmp_path):
    path = write_replay(tmp_path / "r.jsonl", [
        {"task": "privacy.awareness_tier1", "item_id": "x", "response": "a"},
        {"task": "privacy.awarness_tier1", "item_id": "y", "response": "b"},  # the typo
    ])
    model = ReplayModel("replay/r", str(path))
    with pytest.raises(DataError) as info:
        model.check_ids({})
    msg = str(info.value)
    assert msg.startswith(f"{path}:2: unknown task id 'privacy.awarness_tier1'") and "\n" not in msg
    assert "did you mean privacy.awareness_tier1?" in msg


def test_records_of_registered_tasks_not_selected_and_of_selected_extra_tasks_are_fine(tmp_path):
    path = write_replay(tmp_path / "r.jsonl", [{"task": "ethics.reasoning", "item_id": "x", "response": "a"},
                                               {"task": "validate-judge", "item_id": "c1", "response": "b"}])
    ReplayModel("replay/r", str(path)).check_ids({"validate-judge": {"c1"}})


def test_a_run_refuses_a_replay_file_with_an_unknown_task(tmp_path):
    path = write_replay(tmp_path / "r.jsonl", [{"task": "crisis.identifcation", "item_id": "0", "response": "a"}])
    spec = run_spec(models=[f"replay/{path}"], tasks="privacy.awareness_tier1", suite="sample")
    with pytest.raises(DataError, match=r"r\.jsonl:1: unknown task id 'crisis.identifcation' \(did you mean crisis"):
        run_quiet(spec, tmp_path / "run")
