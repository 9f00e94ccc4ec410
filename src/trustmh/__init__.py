"""trustmh: measure how far a large language model can be trusted in mental-health use.

Public API (everything else is private and may change):
    run, RunSpec, Limits      - run or resume an evaluation programmatically
    Task, register, MetricSpec, RunContext, Judged, DataSource - define a task
    Item, Sample, Score       - pipeline records
    UserError                 - raised for bad input
"""

from .errors import UserError
from .types import Item, Sample, Score

__all__ = ["run", "RunSpec", "Limits", "Task", "register", "MetricSpec", "RunContext", "Judged", "DataSource",
           "Item", "Sample", "Score", "UserError"]


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
    # Lazy: `import trustmh` must stay light (no SDKs, numpy or torch until something runs).
    if name in ("run", "RunSpec", "Limits"):
        from . import engine
        return getattr(engine, name)
    if name in ("Task", "register", "MetricSpec", "RunContext", "Judged", "DataSource"):
        from . import tasks
        return getattr(tasks, name)
    raise AttributeError(name)
