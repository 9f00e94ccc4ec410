"""trustmh: measure how far a large language model can be trusted in mental-health use.

Public API (everything else is private and may change); docs/python.md shows it at work, docs/api.md documents it:
    run, RunSpec, Limits               - run or resume an evaluation programmatically (writes report.html too)
    Task, register, MetricSpec, RunContext, DataSource, Item, Sample - declare a task and its data
    Method                             - one protocol's way of running a task (Task.methods)
    render, render_judge               - prompts from templates (render_judge: a judge rubric that shows a
                                         reply, fenced)
    Rubric, Judged, Verdicts           - the judgements a task asks of a judge, and their verdicts
    Score, answered, no_answer, NO_ANSWER, judge_text, judge_failure - score one reply (a non-answer counts
                                         against the model; a judge failure is counted apart)
    Table, mean, count, answer_metrics, Means, MeanMetrics, Resamples - a task's metrics, once for the
                                         scalar and the batched bootstrap path
    Model, register_model, Request, Response, ModelError - define a model provider
    UserError, DataError               - raised for bad input / bad data (one line, no traceback on the CLI)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import DataError, UserError
from .types import Item, ModelError, Request, Response, Sample, Score

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors; never run
    from .api import run
    from .engine import Limits, RunSpec
    from .judges.rubric import Judged, Rubric, Verdicts
    from .scoring.metrics import Means, Resamples, Table, count, mean
    from .models import Model, register_model
    from .tasks.base import (NO_ANSWER, DataSource, MeanMetrics, Method, MetricSpec, RunContext, Task, answer_metrics,
                             answered, judge_failure, judge_text, no_answer, register, render, render_judge)

# Where each lazily loaded name lives: `import trustmh` stays light (no SDKs, numpy or jinja2 until used).
# tests/test_package_api.py checks that the TYPE_CHECKING imports above say the same.
_LAZY = {
    "run": "api", "RunSpec": "engine", "Limits": "engine",
    "Rubric": "judges.rubric", "Judged": "judges.rubric", "Verdicts": "judges.rubric",
    "Table": "scoring.metrics", "mean": "scoring.metrics", "count": "scoring.metrics", "Means": "scoring.metrics",
    "Resamples": "scoring.metrics",
    "Model": "models", "register_model": "models",
    **dict.fromkeys(["Task", "register", "MetricSpec", "RunContext", "DataSource", "render", "render_judge",
                     "answered", "no_answer", "NO_ANSWER", "answer_metrics", "judge_text", "judge_failure",
                     "MeanMetrics", "Method"], "tasks.base"),
}

__all__ = sorted([*_LAZY, "DataError", "UserError", "Item", "ModelError", "Request", "Response", "Sample", "Score"])


def _version() -> str:
    # The installed distribution's metadata is the one source of the version (pyproject.toml sets it); a
    # source tree used without installing (PYTHONPATH=src) has none, and says so rather than guess.
    from importlib import metadata
    try:
        return metadata.version("trustmh")
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = _version()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        # (tasks.base is imported through its package, which registers the built-in tasks first.)
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'trustmh' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
