"""The run's judges: who answers each rubric role, and the LLM judge as a panel of several.

A run has one LLM judge (`spec.judge`, `spec.judge_base_url`) or a panel: the same first judge and the
others in `spec.options["panel_judges"]` (a list of {"judge", "base_url"}), set only when there are
others, so that a one-judge run keeps its run id and its results.json byte for byte. Every judgement of
role "llm" is asked of every judge of the panel (collect.py), each through its own endpoint, stored and
linked under that endpoint; scoring combines their values (score.py, agreement.combine_values)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UserError
from ..tasks import RunContext
from .identity import model_ref

if TYPE_CHECKING:
    from .store import Store
    from .endpoint import Endpoint
    from .spec import RunSpec

MAX_JUDGES = 12  # a panel of judges, not a grid of models


def llm_judges(spec: RunSpec) -> list[tuple[str, str | None]]:
    """(judge spec, base URL) of every LLM judge of the run, the first one `spec.judge`; [] with `rules`."""
    if spec.judge == "rules":
        return []
    return [(spec.judge, spec.judge_base_url),
            *((j["judge"], j.get("base_url")) for j in spec.options.get("panel_judges") or ())]


def set_judges(spec: RunSpec, judges: list[tuple[str, str | None]]) -> None:
    """Make `judges` the run's LLM judges (one, or a panel): the first is spec.judge, the others go to
    options["panel_judges"], which is left out altogether for a single judge."""
    if not judges:
        raise UserError("a run needs a judge (a model spec, or rules)")
    if len(judges) > MAX_JUDGES:
        raise UserError(f"{len(judges)} judges; a panel has at most {MAX_JUDGES}")
    names = [j for j, _ in judges]
    if len(judges) > 1 and "rules" in names:
        raise UserError("--judge rules cannot be part of a panel: a panel's judges are models (name them all, "
                        "or give --judge rules alone)")
    dup = next((j for i, j in enumerate(names) if j in names[:i]), None)
    if dup is not None:
        raise UserError(f"--judge {dup} is given twice; a panel names each judge once")
    from .spec import check_url
    for _, url in judges:
        check_url("--judge-base-url", url)
    (spec.judge, spec.judge_base_url), rest = judges[0], judges[1:]
    if rest:
        spec.options["panel_judges"] = [{"judge": j, "base_url": u} for j, u in rest]
    else:
        spec.options.pop("panel_judges", None)


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
    if spec.options.get("proxy_judge"):
        out["proxy"] = model_ref(spec.options["proxy_judge"], spec.options.get("proxy_judge_base_url"), store).endpoint
    classifier = ctx.options.get("refusal_classifier")
    if classifier:
        from ..judges.hf_classifier import parse_spec
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
