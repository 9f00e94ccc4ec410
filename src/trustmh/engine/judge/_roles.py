"""The run's judges: who answers each rubric role (the roles are judges/roles.py's registry), and the LLM
judge as a panel of several.

A run has one LLM judge (`spec.judge`, `spec.judge_base_url`) or a panel: the same first judge and the
others in `spec.panel_judges` (a list of {"judge", "base_url"}), stored only when there are some, so
that a one-judge run keeps its run id and its results.json byte for byte. Every judgement of
role "llm" is asked of every judge of the panel (collect.py), each through its own endpoint, stored and
linked under that endpoint; scoring combines their values (score.py, agreement.combine_values)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...judges.roles import JUDGE_ROLES, LLM
from ...tasks import RunContext
from .._identity import model_ref

if TYPE_CHECKING:
    from .._store import Store
    from .._endpoint import Endpoint
    from ..spec import RunSpec



def llm_judges(spec: RunSpec) -> list[tuple[str, str | None]]:
    """(judge spec, base URL) of every LLM judge of the run, the first one `spec.judge`; [] with `rules`."""
    return LLM.judges(spec, spec.options)


def set_judges(spec: RunSpec, judges: list[tuple[str, str | None]]) -> None:
    """Make `judges` the run's LLM judges (one, or a panel): the first is spec.judge, the others
    spec.panel_judges (empty for a single judge, and then left out of the stored spec)."""
    from ..spec import check_judges
    check_judges(judges)
    (spec.judge, spec.judge_base_url), rest = judges[0], judges[1:]
    spec.panel_judges = [{"judge": j, "base_url": u} for j, u in rest]


def panel_endpoints(spec: RunSpec, store: Store | None = None) -> list[tuple[str, str]]:
    """(judge spec, endpoint id) of each judge of a panel; [] for a run with one judge or none."""
    judges = llm_judges(spec)
    if len(judges) < 2:
        return []
    return [(j, model_ref(j, url, store).endpoint) for j, url in judges]


def judge_ids(spec: RunSpec, ctx: RunContext, store: Store | None = None) -> dict[str, str]:
    """Endpoint id per judge role the run has, without building any client (what scoring reads links by).
    A role with several judges (a panel of "llm") is named by its first; `panel_endpoints` names them all."""
    out = {}
    for name, role in JUDGE_ROLES.items():
        judges = role.judges(spec, ctx.options)
        if judges:
            model, url = judges[0]
            out[name] = role.endpoint(model) if role.endpoint else model_ref(model, url, store).endpoint
    return out


def judge_backends(spec: RunSpec, ctx: RunContext, roles: set[str], limits, make_model) -> dict[str, list]:
    """The backend of each judge of each role in `roles` that the run has (one per judge of a panel):
    built by the role (a local classifier) or by `make_model` like a tested model."""
    out = {}
    for name in roles:
        role = JUDGE_ROLES.get(name)
        judges = role.judges(spec, ctx.options) if role is not None else []
        if judges:
            out[name] = [role.backend(model) if role.backend else
                         make_model(model, base_url=url, timeout=limits.timeout, seed=spec.seed, purpose=role.purpose,
                                    transport=spec.transport, max_connections=limits.max_connections)
                         for model, url in judges]
    return out


def identified_judges(spec: RunSpec, ctx: RunContext, backends: dict[str, list]) -> list[tuple[str, object]]:
    """(model spec, backend) of every judge whose files identify it (an API or hf/ model: the engine records
    an hf/ judge's fingerprint as it does a tested model's); a role's own backend is not one."""
    return [(model, backend) for name, bs in backends.items() if not JUDGE_ROLES[name].backend
            for (model, _url), backend in zip(JUDGE_ROLES[name].judges(spec, ctx.options), bs)]


@dataclass
class Judges:
    """The endpoints answering each rubric role in this run ("llm": one per judge of the panel,
    "classifier", "proxy"); a role that is absent is answered offline in phase 2 (the rules judge) or not
    at all."""

    endpoints: dict[str, list[Endpoint]]

    def all(self) -> list[Endpoint]:
        return [ep for eps in self.endpoints.values() for ep in eps]
