"""`scoring_version` (results.json's per-task hash that `compare` checks) sees every file whose code scores
a task: its pillar package, the shared helpers of `trustmh.tasks` it imports and the modules of its methods
under both protocols, and nothing of an unrelated pillar. The edits are made by changing the bytes the
hash reads (`source_bytes`), so the tree itself is never touched."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from trustmh.tasks import versions as walker
from trustmh.tasks.versions import scoring_files, scoring_version
from trustmh.tasks import TASKS, Method
from trustmh.tasks.crisis.paper_metrics import identification_metrics
from trustmh.tasks.ethics.common import ReasoningMethod


def versions() -> dict[str, str]:
    return {tid: scoring_version(cls()) for tid, cls in TASKS.items()}


def edit(monkeypatch, path: Path, old: str, new: str) -> None:
    """Make the hash read `path` with `old` replaced by `new` (once; `old` must be there)."""
    real = walker.source_bytes
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1, f"{old!r} not in {path}"
    edited = text.replace(old, new, 1).encode()
    monkeypatch.setattr(walker, "source_bytes", lambda p: edited if Path(p) == path else real(p))


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {t for t in before if before[t] != after[t]}


def test_an_edit_to_a_method_module_s_score_changes_the_version(monkeypatch):
    """ethics.reasoning's score() lives on ReasoningMethod in tasks/ethics/common.py, not in the module that
    declares the task: an edit there changes its version, and no other pillar's."""
    before = versions()
    path = Path(inspect.getsourcefile(ReasoningMethod))
    body = inspect.getsource(ReasoningMethod.score)
    edit(monkeypatch, path, body, body.replace("return", "return  # edited", 1))
    assert changed(before, versions()) == {"ethics.reasoning"}


def test_an_edit_to_a_paper_metrics_module_changes_its_pillar_and_what_builds_on_it(monkeypatch):
    before = versions()
    path = Path(inspect.getsourcefile(identification_metrics))
    edit(monkeypatch, path, "def identification_metrics(", "def identification_metrics(  # edited\n        ")
    got = changed(before, versions())
    # the crisis pillar (crisis.conversation is declared in its package too), and robustness.crisis, whose
    # base task is crisis.identification
    assert got == {"crisis.identification", "crisis.severity", "crisis.escalation", "crisis.conversation",
                   "robustness.crisis"}


def test_an_unrelated_pillar_s_edit_leaves_the_version_unchanged(monkeypatch):
    before = versions()
    privacy = Path(inspect.getsourcefile(TASKS["privacy.leakage"]))
    edit(monkeypatch, privacy.parent / "paper.py", "def ", "def  ")
    got = changed(before, versions())
    assert got == {"privacy.awareness_tier1", "privacy.awareness_tier2a", "privacy.awareness_tier2b",
                   "privacy.leakage"}
    assert before["ethics.reasoning"] == versions()["ethics.reasoning"]


def test_a_shared_helper_changes_every_task_that_imports_it(monkeypatch):
    before = versions()
    labelled = Path(inspect.getsourcefile(TASKS["crisis.identification"])).parents[1] / "labelled.py"
    edit(monkeypatch, labelled, "def ", "def  ")
    got = changed(before, versions())
    users = {t for t, cls in TASKS.items() if labelled in scoring_files(cls())}
    assert got == users and {"crisis.identification", "reliability.diagnosis", "fairness.support"} <= got
    assert "ethics.reasoning" not in got and "privacy.leakage" not in got


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_every_class_a_task_s_methods_are_built_from_is_hashed(task_id):
    """The rule itself: the module of every class in the MRO of the task and of each of its methods (both
    protocols) is among the files hashed."""
    task = TASKS[task_id]()
    files = set(scoring_files(task))
    for cls in (type(task), *(task.methods.values() or [Method])):
        for k in cls.__mro__[:-1]:
            assert Path(inspect.getsourcefile(k)) in files, (task_id, k)
