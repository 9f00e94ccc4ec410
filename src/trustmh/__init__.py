"""trustmh: measure how far a large language model can be trusted in mental-health use.

Public API (everything else is private and may change); README "Use from Python" shows it at work:
    run, RunSpec, Limits               - run or resume an evaluation programmatically (writes report.html too)
    Task, register, MetricSpec, RunContext, DataSource, Item, Sample, Score - define a task
    Rubric, Judged, Verdicts           - the judgements a task asks of a judge, and their verdicts
    Table, mean, count, answered, no_answer, answer_metrics, render, render_judge - scoring and prompting
                                       helpers (render_judge: a judge rubric that shows a reply, fenced)
    Model, register_model, Request, Response - define a model provider
    UserError, DataError               - raised for bad input / bad data (one line, no traceback on the CLI)
"""

from .errors import DataError, UserError
from .types import Item, Request, Response, Sample, Score

# Where each lazily loaded name lives: `import trustmh` stays light (no SDKs, numpy or torch until used).
_LAZY = {
    "run": "api", "RunSpec": "engine", "Limits": "engine",
    "Task": "tasks", "register": "tasks", "MetricSpec": "tasks", "RunContext": "tasks", "DataSource": "tasks",
    "Rubric": "tasks", "Judged": "tasks", "Verdicts": "tasks",
    "render": "tasks.base", "render_judge": "tasks.base", "answered": "tasks.base", "no_answer": "tasks.base",
    "answer_metrics": "tasks.base",
    "Table": "metrics", "mean": "metrics", "count": "metrics",
    "Model": "models", "register_model": "models",
}

__all__ = sorted([*_LAZY, "DataError", "UserError", "Item", "Request", "Response", "Sample", "Score"])


def _version() -> str:
    # The installed distribution's metadata is the one source of the version (pyproject.toml sets it); a
    # source tree used without installing (PYTHONPATH=src) has none, and says so rather than guess.
    from importlib import metadata
    try:
        return metadata.version("trustmh")
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = _version()


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'trustmh' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
