"""The requests a run sends: what a tested model is asked for a sample, what a judge is asked about a
reply, and which of those settings a model's backend could not send (a note results.json carries)."""

from __future__ import annotations

from typing import Any

from ..models import unsendable_params
from ..types import Request, Sample
from .spec import RunSpec

DEFAULT_PARAMS = {"temperature": 0.0, "max_tokens": 1024}
JUDGE_PARAMS = {"temperature": 0.0, "max_tokens": 512}


def generation_request(sample: Sample, spec: RunSpec, model: str = "") -> Request:
    """What `model` (its spec, e.g. "openai/Qwen3-8B") is sent for `sample`: the task's messages, after the
    run's --system-prompt when it has one (the deployed assistant's own, first, as a deployment sends it)."""
    system = spec.system_prompt
    if sample.exact_params:  # the paper's settings, exactly as its code sends them
        params = dict(sample.params)
        if spec.max_tokens is not None:
            params["max_tokens"] = spec.max_tokens
        return Request(_with_system(system, _for_model(sample, model)), params, sample.request_task or sample.task,
                       sample.item.id, sample.variant, "generate", sample.choices)
    params = dict(DEFAULT_PARAMS)
    params["temperature"] = spec.temperature
    params.update(sample.params)
    if spec.max_tokens is not None:
        params["max_tokens"] = spec.max_tokens
    params["seed"] = spec.seed
    return Request(_with_system(system, sample.messages), params, sample.request_task or sample.task, sample.item.id, sample.variant,
                   "generate", sample.choices)


def _with_system(system: str | None, messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The run's system prompt first; a task's own system message (trustmh's protocol, a plugin's task) follows
    it in the same message, as many chat templates take one system message only."""
    if not system:
        return messages
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{system}\n\n{messages[0]['content']}"}, *messages[1:]]
    return [{"role": "system", "content": system}, *messages]


def own_system_message(task_id: str, samples: list[Sample], ctx) -> str | None:
    """Why a task cannot take the run's --system-prompt, or None: under the paper's protocol a request that
    carries a system message of its own (EmoBench's) would no longer be the paper's request with the run's
    added to it, so the task is not run. Under trustmh's protocol the run's comes first, the task's after."""
    if not ctx.options.get("system_prompt") or ctx.protocol != "paper":
        return None
    if any(s.item.meta.get("conversation") for s in samples):
        return None  # a conversation's messages are the simulated person's; the model's system prompt is replaced
    if any(m.get("role") == "system" for s in samples for m in s.messages):
        return (f"--system-prompt refused: under --protocol paper {task_id}'s request carries a system message "
                f"of its own, and adding the run's to it would change the paper's request (run it without "
                f"--system-prompt, or under --protocol trustmh)")
    return None


def _for_model(sample: Sample, model: str) -> list[dict[str, str]]:
    if sample.model_prefix is None or sample.model_prefix[0] not in model.lower():
        return sample.messages
    first, *rest = sample.messages
    return [{**first, "content": sample.model_prefix[1] + first["content"]}, *rest]


def judge_request(sample: Sample, messages: list[dict[str, str]], spec: RunSpec, rubric: str = "judge",
                  exact_params: dict[str, Any] | None = None, attempt: int = 1) -> Request:
    """A judge call. A sample's first rubric keeps the plain "judge" purpose (so judgements stored before
    rubrics had names still answer); every other rubric is a distinct request even with equal messages, and
    so is every re-ask of a verdict that did not parse (`attempt` 2, 3...: same messages, another key).
    `exact_params` (the paper's settings) are sent as they are, with nothing added."""
    params = dict(exact_params) if exact_params is not None else dict(JUDGE_PARAMS, seed=spec.seed)
    purpose = ("judge" if rubric == "judge" else f"judge:{rubric}") + (f"#{attempt}" if attempt > 1 else "")
    return Request(messages, params, sample.request_task or sample.task, sample.item.id, sample.variant, purpose,
                   None)


def param_notes(spec: RunSpec) -> list[str]:
    """One line per model or judge whose backend could not send some of the run's generation settings:
    results.json records temperature 0, and a reader must learn that it did not apply."""
    notes = []
    judges = [] if spec.judge == "rules" else [("judge", spec.judge)]
    for role, model_spec in [("model", m) for m in spec.models] + judges:
        unsent = unsendable_params(model_spec)
        if unsent:
            notes.append(f"{role} {model_spec}: {' and '.join(unsent)} not sent (the installed provider SDK and "
                         f"API version no longer accept sampling parameters); its replies were sampled at the "
                         f"provider's defaults, so reruns may differ")
    return notes
