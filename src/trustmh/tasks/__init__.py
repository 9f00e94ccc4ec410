"""Task registry. Importing this package imports every pillar package by name, which registers its tasks
(in this order, which is the order tasks are listed and run in)."""

from .base import (HOOKS, PILLARS, TASKS, Counted, DataSource, DegenerateCheck, Judged, Method, MethodTemplate, MetricSpec, Rubric,
                   RunContext, Task, Verdicts, register, resolve_tasks, writes)

from . import crisis, ethics, fairness, privacy, reliability, robustness, safety, sycophancy  # noqa: F401,E402

__all__ = ["HOOKS", "PILLARS", "TASKS", "Counted", "DataSource", "DegenerateCheck", "Judged", "Method", "MethodTemplate", "MetricSpec",
           "Rubric", "RunContext", "Task", "Verdicts", "register", "resolve_tasks", "writes"]
