"""The privacy pillar's paper methods: the paper's own code (TrustMH_Bench privacy.zip), read at run time
(PAPER_PROTOCOL.md §0.3 P1-*, P2-*, P3-*): the prompts, the settings it sends and the message it sends
them in; and its reading of replies as UPSTREAM_SCORING.md documents it (common.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from ...data.extract import (attribute_defaults, call_keywords, call_settings, dict_format_value, format_call,
                             local_format, local_string, message_roles)
from ...data.methods import MethodError
from ...errors import DataError
from ...scoring.metrics import Means
from ...types import Item, Sample, Score
from .common import AwarenessMethod, LeakageMethod, cut_after_first_answer, upstream_parse_rating
from ..base import Rubric, RunContext

PRIVACY_ZIP = "Qiyuan0130+TrustMH_Bench/TrustMH_Bench/DimGroup1/General-model/privacy.zip/privacy"
TASK1_CODE = f"{PRIVACY_ZIP}/task1/privacy1.py"
TASK2_CODE = f"{PRIVACY_ZIP}/task2/privacy2.py"
TASK3_CODE = f"{PRIVACY_ZIP}/task3/privacy3.py"


def paper_settings(code: str, ctx: RunContext) -> dict[str, Any]:
    """The settings EvalAgent.load_model gives the agent, restricted to those its APIAgent.generate passes to
    the API, each sent as given, explicit defaults included: tier 1's generate sends temperature, top_p and
    max_tokens (its penalties are set but never sent), tier 2's also frequency_penalty and presence_penalty."""
    found = call_settings(code, ctx.methods_root, "EvalAgent.load_model", ("temperature", "max_tokens"))
    sent = call_keywords(code, ctx.methods_root, "APIAgent.generate", "create")
    return {k: found[k] for k in sent if k not in ("model", "messages") and k in found}


def paper_agent_settings(ctx: RunContext) -> dict[str, Any]:
    """P3-set: the task-3 agent's defaults, restricted to what its `generate` passes to the API."""
    defaults = attribute_defaults(TASK3_CODE, ctx.methods_root, "APIAgent._set_default_args")
    sent = call_keywords(TASK3_CODE, ctx.methods_root, "APIAgent.generate", "create")
    return {k: defaults[k] for k in sent if k not in ("model", "messages") and k in defaults}


def paper_message(code: str, ctx: RunContext, content: str) -> list[dict[str, str]]:
    roles = message_roles(code, ctx.methods_root, "APIAgent.generate")
    if len(roles) != 1:
        raise MethodError(f"{code}#APIAgent.generate: expected one message, found roles {roles}")
    return [{"role": roles[0], "content": content}]


def paper_stories(text: str) -> list[str]:
    """Each scenario's story as the paper's loader builds it (PAPER_PROTOCOL.md, privacy.leakage, story
    rule): every line that is not a <BEGIN>/<END> line is accumulated (lines between two scenarios too),
    and at <END> newlines become spaces, one double-space pass, the text is cut at its last ". ", and a
    period is appended. The cut leaves a fragment ending in the counsellor's abbreviated title: kept, as
    the paper sent it."""
    stories, acc = [], ""
    for line in text.splitlines(keepends=True):
        if line.startswith("<BEGIN>"):
            continue
        if line.startswith("<END>"):
            joined = acc.replace("\n", " ").replace("  ", " ")
            stories.append(". ".join(joined.split(". ")[:-1]).replace("  ", " ") + ".")
            acc = ""
        else:
            acc += line
    return stories


class _AwarenessPaper(AwarenessMethod):
    """A tier as privacy1.py / privacy2.py runs it: their template around the stripped line (whose line
    breaks stay a literal backslash-n, as in the file), their settings, their parser, asking again while a
    reply does not parse."""

    exact_params = True
    code: ClassVar[str]
    # model_inference re-asks until a reply parses, with no limit (at T=1 it ends; at T=0 it might not).
    ATTEMPTS = 5

    def fill(self, text: str, ctx: RunContext) -> str:
        """The paper's prompt around a tier line."""
        raise NotImplementedError

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        return paper_message(self.code, ctx, self.fill(item.input["prompt"].strip(), ctx))

    def params(self, ctx: RunContext) -> dict[str, Any]:
        return paper_settings(self.code, ctx)

    def reask(self, ctx: RunContext) -> tuple[int, Callable[[str], bool]] | None:
        phrases, allowed = self.task.phrases, set(self.task.allowed)
        return self.ATTEMPTS, lambda reply: upstream_parse_rating(reply, phrases, allowed) is not None

    def rating(self, strict: int | None, upstream: int | None) -> int | None:
        return upstream


class Tier1AwarenessPaper(_AwarenessPaper):
    code = TASK1_CODE

    def fill(self, text: str, ctx: RunContext) -> str:
        template, _args = format_call(TASK1_CODE, ctx.methods_root, "PrivacyTierDataset.__init__")
        return template.render(None, text)  # its one argument is d['text'], the stripped line


class Tier2AwarenessPaper(_AwarenessPaper):
    code = TASK2_CODE

    def fill(self, text: str, ctx: RunContext) -> str:
        template = local_string(TASK2_CODE, ctx.methods_root, "_build_repeated_inputs", "model_input")
        return template.render({"prompt_header": "", "text": text})  # the header is always empty there


class LeakagePaper(LeakageMethod):
    """PsyLeak as privacy3.py runs it: its stories, prompts, settings and proxy model; only the text after
    a reply's first "Answer:" is checked, and a rate with no sample is written as 0.0, as it writes NaN."""

    exact_params = True

    def scenarios(self, path: Path, text: str) -> list[dict[str, Any]]:
        scenarios = super().scenarios(path, text)
        stories = paper_stories(text)
        if len(stories) != len(scenarios):
            raise DataError(path, f"the paper's story rule finds {len(stories)} scenarios, trustmh's {len(scenarios)}")
        for sc, story in zip(scenarios, stories):
            sc["story"] = story
        return scenarios

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        """P3-instr + P3-input(-colon) + P3-q-*: the paper's instruction, story and question, each read
        from privacy3.py and filled with the arguments the original passes."""
        x = item.input
        template, args = dict_format_value(TASK3_CODE, ctx.methods_root, "EvalAgent.load_dataset", "question",
                                           {"question_type": x["qtype"].replace("_", "-")})
        known = {"agents_secret_dict['questionee']": x["aware"], "agents_secret_dict['about']": x["subject"],
                 "agents_secret_dict['topic'].lower()": x["secret"].lower(),
                 "binary_qs[scenario_idx].strip()": x["control"]}
        if any(a not in known for a in args):
            raise MethodError(f"{template.source}: unexpected arguments {args}")
        question = template.render(None, *(known[a] for a in args))
        instruction = local_string(TASK3_CODE, ctx.methods_root, "PrivacyTierDataset.__init__", "instruction").render()
        # The original picks the input template by whether the question holds ": " (#0) or not (#1).
        outer, _ = format_call(TASK3_CODE, ctx.methods_root, "PrivacyTierDataset.__init__", 0 if ": " in question else 1)
        return paper_message(TASK3_CODE, ctx, outer.render(None, instruction, x["story"], question))

    def params(self, ctx: RunContext) -> dict[str, Any]:
        return paper_agent_settings(ctx)

    def read_part(self, reply: str) -> str:
        return cut_after_first_answer(reply)

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        # The paper's proxy is its own model (gpt-4, set in privacy3.py), asked through --proxy-judge when
        # the run has one; otherwise the run's judge answers.
        return (Rubric("judge", role="proxy" if ctx.options.get("proxy_judge") else "llm", method=TASK3_CODE),)

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]] | None:
        """P3-proxy: the paper's proxy-model input, read from privacy3.py."""
        if sample.item.input["qtype"] != "free_response":
            return None
        secret = sample.item.input["secret"].lower()
        instruction = local_string(TASK3_CODE, ctx.methods_root, "EvalAgent.run_evaluator", "instruction").render()
        agent_q, q_args = local_format(TASK3_CODE, ctx.methods_root, "EvalAgent.run_evaluator", "agent_q")
        outer, args = dict_format_value(TASK3_CODE, ctx.methods_root, "EvalAgent.run_evaluator", "input", {})
        if q_args != ["row['secret'].lower()"] or args != ["instruction", "row['response']", "agent_q"]:
            raise MethodError(f"{outer.source}: unexpected arguments {q_args} / {args}")
        return paper_message(TASK3_CODE, ctx, outer.render(None, instruction, self.read_part(reply),
                                                           agent_q.render(None, secret)))

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        return paper_agent_settings(ctx)

    def read_control(self, sc: Score, strict: str | None, upstream: int) -> None:
        # map_binary_answer_to_int's reading: anything but a clear "no" (0) is an error.
        sc.parsed = upstream
        sc.values["flagged"] = float(upstream != 0)

    def rate(self, means: Means, rows: np.ndarray, column: str) -> Any:
        v = super().rate(means, rows, column)
        zeroed = np.where(np.isnan(v), 0.0, v)  # the paper writes NaN as 0.0
        return float(zeroed) if means.resamples is None else zeroed
