"""The evaluation engine, a pipeline of stages, one public module each, in the order a run passes them:

    spec      what a run is: RunSpec, checked and completed on creation (`resolve`: the CLI and the API alike)
    prepare   data -> Items -> Samples, recorded in the store
    collect   phase 1: every model's generations at once, into the store
    judge     the judge stage (a package): judges by role, the judge pools, a panel's scoring
    score     phase 2: a pure read of the store -> samples.jsonl and results.json
    run       the stages above in one run directory (`run`), and a finished run's spec read back

Phase 1 is the only part that spends money; phase 2 can be re-run any number of times (`trustmh score`)
from the store alone. The machinery behind the stages lives in private modules (`_store`, `_endpoint`,
`_limiter`, `_budget`, `_prices`, `_slices`, ...), and what another package needs of it is named here. The
dry run (`plan`) reads the stages without running them. The engine prints nothing; pass an `events`
callback to follow it (the CLI renders them as progress bars)."""

from __future__ import annotations

# the stages
from .spec import Limits, RunSpec, data_source
from .prepare import Prepared, prepare
from .collect import collect
from .score import finalize
from .run import context, load_spec, run
# what the stages send, what they report, where they keep it
from ._requests import DEFAULT_PARAMS, JUDGE_PARAMS, generation_request, judge_request
from ._events import (Event, EventSink, Notice, PhaseDone, PhaseProgress, PhaseStarted, RunTotals, TaskProgress,
                      ignore)
from ._endpoint import AuthFailure, CallWriter, Endpoint, EndpointDown
from ._store import Store
from ._identity import model_ref
# spending: prices, the --max-cost cap, the dry run's plan
from ._prices import DEFAULT_COMPLETION_TOKENS, check_priced, load_prices, plan_costs, total_cost
from ._budget import Budget, BudgetStop
from ._plan import CHARS_PER_TOKEN, PLAN_ITEMS, plan, stop_message
from ._conversation import called_users

__all__ = ["RunSpec", "Limits", "data_source", "Prepared", "prepare", "collect", "finalize", "run", "context",
           "load_spec",
           "generation_request", "judge_request", "DEFAULT_PARAMS", "JUDGE_PARAMS",
           "Event", "EventSink", "PhaseStarted", "PhaseProgress", "PhaseDone", "TaskProgress", "Notice", "RunTotals",
           "ignore", "AuthFailure", "EndpointDown", "Endpoint", "CallWriter", "Store", "model_ref",
           "load_prices", "check_priced", "plan_costs", "total_cost", "DEFAULT_COMPLETION_TOKENS", "Budget",
           "BudgetStop", "plan", "stop_message", "PLAN_ITEMS", "CHARS_PER_TOKEN", "called_users"]
