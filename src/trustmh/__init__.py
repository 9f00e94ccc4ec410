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
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy: `import trustmh` must stay light (no SDKs, numpy or torch until something runs).
    if name in ("run", "RunSpec", "Limits"):
        from . import engine
        return getattr(engine, name)
    if name in ("Task", "register", "MetricSpec", "RunContext", "Judged", "DataSource"):
        from . import tasks
        return getattr(tasks, name)
    raise AttributeError(name)
