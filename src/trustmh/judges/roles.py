"""Who answers a rubric: judge roles as registered objects.

A `Rubric` names a role ("llm", "proxy", "classifier", or one a plugin registers); the role says which
models of the run play it (the spec field it reads), how the engine builds each one's backend, what the
dry run and the price table call it, and whether its calls are paid. The engine asks the registry and
never names a role itself, so a new kind of judge is one `register_judge_role` call in one file (a plugin
may make one, as with `register_model`): its rubrics are then asked of its models through the same
endpoints, pools, store, resume and dry run as the run's `--judge`.

A role reads the run's spec and options by attribute (nothing of the engine is imported here), and a
role whose models the run does not name is absent: its rubrics are then answered offline in phase 2 (the
rules judge) or not at all, as each task says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

Judges = list[tuple[str, "str | None"]]  # (model spec, base URL) of each judge playing a role, in order


@dataclass(frozen=True)
class JudgeRole:
    name: str  # what a Rubric names as its `role`
    label: str  # how the dry run, the price table and the report name who plays it
    judges: Callable[[Any, Mapping[str, Any]], Judges]  # (run spec, run options) -> its judges; [] = absent
    purpose: str = "judge"  # what the model backend is told it is for (`make_model(purpose=...)`)
    paid: bool = True  # its calls cost money: the dry run prices them, --max-cost counts them
    # A backend of its own (a local classifier): (model spec) -> the backend, and its endpoint id; None: an
    # API or hf/ model built by make_model, identified (and fingerprinted) like a tested model.
    backend: Callable[[str], Any] | None = None
    endpoint: Callable[[str], str] | None = None
    messages: bool = True  # asked with the judge messages a task renders (an LLM), not the bare reply


JUDGE_ROLES: dict[str, JudgeRole] = {}


def register_judge_role(role: JudgeRole) -> JudgeRole:
    """Make `role` a role rubrics may name. Registering a name twice is refused (one role, one meaning)."""
    if not role.name or role.name == "rules" or not role.name.isidentifier():
        raise ValueError(f"a judge role needs a plain name other than 'rules', not {role.name!r}")
    if role.name in JUDGE_ROLES and JUDGE_ROLES[role.name] != role:
        raise ValueError(f"judge role {role.name!r} is registered already")
    JUDGE_ROLES[role.name] = role
    return role


def judges_of(role: str, spec: Any, options: Mapping[str, Any] | None = None) -> Judges:
    """The judges playing `role` in the run of `spec` ([] for a role the run does not have)."""
    found = JUDGE_ROLES.get(role)
    return found.judges(spec, spec.options if options is None else options) if found is not None else []


def _llm(spec: Any, options: Mapping[str, Any]) -> Judges:
    """`--judge` (spec.judge, spec.judge_base_url) and the rest of a panel (spec.panel_judges)."""
    if spec.judge == "rules":
        return []
    return [(spec.judge, spec.judge_base_url), *((j["judge"], j.get("base_url")) for j in spec.panel_judges)]


def _proxy(spec: Any, options: Mapping[str, Any]) -> Judges:
    """`--proxy-judge` (spec.proxy_judge): the other model a paper's method names for one judgement."""
    return [(spec.proxy_judge, spec.proxy_judge_base_url)] if spec.proxy_judge else []


def _classifier(spec: Any, options: Mapping[str, Any]) -> Judges:
    """`--refusal-classifier hf/<path>[:label]`: a local sequence classifier answering with a label."""
    chosen = options.get("refusal_classifier")
    return [(chosen, None)] if chosen else []


def _classifier_backend(model: str) -> Any:
    from .hf_classifier import ClassifierModel, parse_spec
    return ClassifierModel(parse_spec(model))


def _classifier_endpoint(model: str) -> str:
    from .hf_classifier import parse_spec
    return f"classifier/hf/{parse_spec(model).model}"


LLM = register_judge_role(JudgeRole("llm", "judge", _llm))
PROXY = register_judge_role(JudgeRole("proxy", "proxy judge", _proxy, purpose="proxy"))
CLASSIFIER = register_judge_role(JudgeRole("classifier", "refusal classifier", _classifier, paid=False,
                                           backend=_classifier_backend, endpoint=_classifier_endpoint,
                                           messages=False))
