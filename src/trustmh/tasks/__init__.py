"""Task registry. Importing this package registers every task (one module per pillar)."""

from .base import PILLARS, TASKS, DataSource, Judged, MetricSpec, RunContext, Task, register, resolve_tasks
from . import ethics, privacy  # noqa: F401  (registration side effect)

__all__ = ["PILLARS", "TASKS", "DataSource", "Judged", "MetricSpec", "RunContext", "Task", "register",
           "resolve_tasks"]
