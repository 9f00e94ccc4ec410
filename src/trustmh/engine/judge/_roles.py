"""The run's judges: who answers each rubric role, and the LLM judge as a panel of several.

A run has one LLM judge (`spec.judge`, `spec.judge_base_url`) or a panel: the same first judge and the
others in `spec.panel_judges` (a list of {"judge", "base_url"}), stored only when there are some, so
that a one-judge run keeps its run id and its results.json byte for byte. Every judgement of
role "llm" is asked of every judge of the panel (collect.py), each through its own endpoint, stored and
linked under that endpoint; scoring combines their values (score.py, agreement.combine_values)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...tasks import RunContext
from .._identity import model_ref

if TYPE_CHECKING:
    from .._store import Store
    from .._endpoint import Endpoint
    from ..spec import RunSpec



def llm_judges(spec: RunSpec) -> list[tuple[str, str | None]]:
    """(judge spec, base URL) of every LLM judge of the run, the first one `spec.judge`; [] with `rules`."""
    if spec.judge == "rules":
        return []
    return [(spec.judge, spec.judge_base_url),
            *((j["judge"], j.get("base_url")) for j in spec.panel_judges)]


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
    """Endpoint id per judge role, without building any client (what scoring reads links by). For a panel,
    role "llm" is its first judge; `panel_endpoints` names them all."""
    out = {}
    if spec.judge != "rules":
        out["llm"] = model_ref(spec.judge, spec.judge_base_url, store).endpoint
    if spec.proxy_judge:
        out["proxy"] = model_ref(spec.proxy_judge, spec.proxy_judge_base_url, store).endpoint
    classifier = ctx.options.get("refusal_classifier")
    if classifier:
        from ...judges.hf_classifier import parse_spec
        out["classifier"] = f"classifier/hf/{parse_spec(classifier).model}"
    return out


@dataclass
class Judges:
    """The endpoints answering each rubric role in this run ("llm": one per judge of the panel,
    "classifier", "proxy"); a role that is absent is answered offline in phase 2 (the rules judge) or not
    at all."""

    endpoints: dict[str, list[Endpoint]]

    def all(self) -> list[Endpoint]:
        return [ep for eps in self.endpoints.values() for ep in eps]
