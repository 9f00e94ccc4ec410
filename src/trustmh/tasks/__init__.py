"""Task registry. Each built-in pillar package registers its tasks when imported (and its rows of the
paper's rank figure), and is imported when first needed (`load_pillars`, in one order, the order tasks
are listed and run in): reading `TASKS` whole imports every pillar, looking up a task id its pillar, and
`resolve_tasks` only the pillars a selection names, so that a run's first requests wait for no other
(issue 46 item 5). `paper_pillars` and `paper_tasks`, scoring's readers of the rows, import every pillar
first, whether called from here or from scoring (which is given `load_pillars` to call: it imports no task)."""

from .base import (HOOKS, PILLAR_PACKAGES, PILLARS, TASKS, Counted, DataSource, DegenerateCheck, Judged, Method,
                   MethodTemplate, MetricSpec, Rubric, RunContext, Task, Verdicts, load_pillars, register,
                   resolve_tasks, writes)

from ..scoring import pillars as _pillars  # noqa: E402
from ..scoring.pillars import paper_pillars, paper_tasks  # noqa: E402

_pillars.load_rows = load_pillars

__all__ = ["HOOKS", "PILLARS", "PILLAR_PACKAGES", "TASKS", "Counted", "DataSource", "DegenerateCheck", "Judged",
           "Method", "MethodTemplate", "MetricSpec", "Rubric", "RunContext", "Task", "Verdicts", "load_pillars",
           "paper_pillars", "paper_tasks", "register", "resolve_tasks", "writes"]
