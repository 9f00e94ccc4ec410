"""The evaluation engine: spec -> samples -> phase 1 (collect replies and verdicts into the store) ->
phase 2 (score from the store) -> results.json and samples.jsonl.

The two phases are separate on purpose: phase 1 is the only one that spends money, and phase 2 can be
re-run any number of times (`trustmh score`) from the store alone. The engine prints nothing; pass an
`events` callback to follow it (the CLI renders them as progress bars). Each job has its module:
spec.py (what a run is), requests.py (what it sends), prepare.py (its samples), collect.py (phase 1),
score.py (phase 2), run.py (both, in a run directory); this package only names them."""

from __future__ import annotations

from .collect import collect
from .endpoint import AuthFailure, CallWriter, Endpoint, EndpointDown
from .events import (Event, EventSink, Notice, PhaseDone, PhaseProgress, PhaseStarted, RunTotals, TaskProgress,
                     ignore)
from .prepare import Prepared, prepare
from .requests import DEFAULT_PARAMS, JUDGE_PARAMS, generation_request, judge_request
from .run import context, load_spec, run
from .score import finalize
from .spec import Limits, RunSpec, data_source

__all__ = ["run", "RunSpec", "Limits", "load_spec", "context", "ignore", "Event", "EventSink", "PhaseStarted", "PhaseProgress",
           "PhaseDone", "TaskProgress", "Notice", "RunTotals", "AuthFailure", "EndpointDown", "Endpoint", "CallWriter", "Prepared",
           "prepare",
           "collect", "finalize", "data_source", "generation_request", "judge_request", "DEFAULT_PARAMS",
           "JUDGE_PARAMS"]
