"""Task registry. Importing this package imports every pillar module in it, which registers its tasks."""

import importlib
import pkgutil

from .base import (PILLARS, TASKS, DataSource, Judged, Method, MethodTemplate, MetricSpec, Rubric, RunContext, Task, Verdicts,
                   register, resolve_tasks)

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base" and not _mod.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["PILLARS", "TASKS", "DataSource", "Judged", "Method", "MethodTemplate", "MetricSpec", "Rubric", "RunContext", "Task", "Verdicts",
           "register", "resolve_tasks"]
