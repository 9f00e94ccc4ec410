"""The report's list of judged replies that address the judge (judges/addressed.py, issue 23): per model
and task, how many and which (results.json keeps the first 50 of each task), so that a number resting on
replies that may have gamed their judge is never read without being seen."""

from __future__ import annotations

from typing import Any


def judge_addressed_rows(entries: list[Any]) -> list[dict[str, Any]]:
    """One row per (model, task) with flagged replies: label, task, count and the listed samples."""
    rows = []
    for e in entries:
        for tid, tr in sorted(e.result.tasks.items()):
            if getattr(tr, "n_judge_addressed", 0):
                rows.append({"model": e.label, "task": tid, "n": tr.n_judge_addressed, "n_samples": tr.n_samples,
                             "samples": list(tr.judge_addressed)})
    return rows
