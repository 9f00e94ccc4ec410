"""Task registry. Importing this package imports every pillar package by name, which registers its tasks
(in this order, which is the order tasks are listed and run in) and its rows of the paper's rank figure.
`paper_pillars` and `paper_tasks` are scoring's readers of those rows, given from here so that whoever
imports them has every pillar loaded (a stored run read by `trustmh report` included)."""

from .base import (HOOKS, PILLARS, TASKS, Counted, DataSource, DegenerateCheck, Judged, Method, MethodTemplate, MetricSpec, Rubric,
                   RunContext, Task, Verdicts, register, resolve_tasks, writes)

from . import crisis, ethics, fairness, privacy, reliability, robustness, safety, sycophancy  # noqa: F401,E402
from ..scoring.pillars import paper_pillars, paper_tasks  # noqa: E402

__all__ = ["HOOKS", "PILLARS", "TASKS", "Counted", "DataSource", "DegenerateCheck", "Judged", "Method", "MethodTemplate", "MetricSpec",
           "Rubric", "RunContext", "Task", "Verdicts", "paper_pillars", "paper_tasks", "register", "resolve_tasks",
           "writes"]
