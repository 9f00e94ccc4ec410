"""The paper's methods of reliability.emotion_recognition (EmoBench's own code, PAPER_PROTOCOL.md §0.3 EB-*)
and reliability.intervention (CPsyCoun's notebook, CP-*): readers of replies and settings, and the two
Methods the tasks in reliability.py declare for `--protocol paper`. The authors' files are read at run time."""

from __future__ import annotations

import json
import re
import string
from dataclasses import replace
from typing import Any

import numpy as np

from ...data.extract import call_keywords, local_string, prefix_assignment
from ...data.extract_formats import notebook_call_keywords, notebook_local_string, notebook_message_roles, yaml_value
from ...data.methods import MethodError
from ...scoring.metrics import Means, Resamples, Table
from ...types import Item, Sample, Score
from .common import (CLIENT, INTERVENTION_CRITERIA, LETTERS, EmotionMethod, InterventionMethod, group_accuracy,
                     over, read_utterances)
from ..base import DataSource, Judged, MethodTemplate, Rubric, RunContext, answered, judge_failure, judge_text, no_answer

# EmoBench's own code (PAPER_PROTOCOL.md §0.3 EB-*; §2 reliability.emotion_recognition), read at run time
# under --protocol paper.
EB = "Sahandfer+EmoBench/src"
EB_PROMPTS, EB_RESPONSE = f"{EB}/configs/prompts.yaml", f"{EB}/configs/response.yaml"
EB_UTILS, EB_MODEL = f"{EB}/utils.py", f"{EB}/model.py"
_EB_FENCE = re.compile(r"```json\s*([\s\S]*?)```")


def eb_parse(reply: str | None) -> Any:
    """parse_json_response in EmoBench's utils.py: with a ```json fence, the text of the first closed one
    (an unclosed fence fails); otherwise the whole reply; then json.loads. None when that fails."""
    if reply is None:
        return None
    if "```json" in reply:
        m = _EB_FENCE.search(reply)
        if m is None:
            return None
        reply = m.group(1)
    try:
        return json.loads(reply)
    except (ValueError, RecursionError):
        return None


def eb_system(lang: str, ctx: RunContext) -> str:
    """init_prompt without CoT (main.py's default): sys.<lang> + get_response_format's res_format
    (a str.format template) with statement = base.<lang> and conditions = EU.<lang>."""
    fmt = local_string(EB_UTILS, ctx.methods_root, "get_response_format", "res_format")
    if fmt.fields or fmt.segments is None:
        raise MethodError(f"{fmt.source}: expected a plain string constant")
    text = fmt.render({})
    if sorted({n for _, n, _, _ in string.Formatter().parse(text) if n}) != ["conditions", "statement"]:
        raise MethodError(f"{fmt.source}: placeholders are not {{statement}} and {{conditions}}")
    return yaml_value(EB_PROMPTS, ctx.methods_root, "sys", lang) + text.format(
        statement=yaml_value(EB_RESPONSE, ctx.methods_root, "base", lang),
        conditions=yaml_value(EB_RESPONSE, ctx.methods_root, "EU", lang))


class EmotionRecognitionPaper(EmotionMethod):
    """reliability.emotion_recognition under --protocol paper: both languages unless --lang says one
    (EmoBench's main.py runs both), EmoBench's prompts, settings and scoring, and its per-language
    accuracy of each coarse category."""
    exact_params = True
    default_lang = "all"
    method_templates = (MethodTemplate("EB-sys", EB_PROMPTS, "sys.<lang>"),
                        MethodTemplate("EB-EU", EB_PROMPTS, "EU.<lang>"),
                        MethodTemplate("EB-resp", EB_RESPONSE, "base.<lang>,EU.<lang>"),
                        MethodTemplate("EB-resfmt", EB_UTILS, "get_response_format.res_format"),
                        MethodTemplate("EB-set", EB_MODEL, "LLM.load_model:ChatOpenAI()"),
                        MethodTemplate("EB-qwen", EB_MODEL, "LLM.init_prompt.sys_prompt"))

    def samples(self, item: Item, ctx: RunContext) -> list[Sample]:
        """EB-qwen: init_prompt (CoT off, as main.py runs it) puts a text in front of the system prompt when
        "qwen" is in the tested model's name; the request for each model applies it (Sample.model_prefix),
        so a Qwen model gets what EmoBench would send it."""
        _, text = prefix_assignment(EB_MODEL, ctx.methods_root, "LLM.init_prompt", "sys_prompt")
        return [replace(s, model_prefix=("qwen", text)) for s in super().samples(item, ctx)]

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        # generate_responses: EU.<lang>.format with the choices as rank_choices renders them ("A) text"
        # per line), after init_prompt's system message (EB-qwen's prefix is added per model: samples()).
        x = item.input
        lang = item.meta["lang"]
        ranked = {k: "\n".join(f"{LETTERS[i]}) {c}" for i, c in enumerate(x[f"{k}_choices"]))
                  for k in ("emotion", "cause")}
        user = yaml_value(EB_PROMPTS, ctx.methods_root, "EU", lang).format(
            scenario=x["scenario"], subject=x["subject"], emo_choices=ranked["emotion"],
            cause_choices=ranked["cause"])
        return [{"role": "system", "content": eb_system(lang, ctx)}, {"role": "user", "content": user}]

    def params(self, ctx: RunContext) -> dict[str, Any]:
        """load_model builds ChatOpenAI with temperature 0.6 for both API model types and nothing else
        (no max_tokens for API models)."""
        sets = [{k: v for k, v in call_keywords(EB_MODEL, ctx.methods_root, "LLM.load_model", "ChatOpenAI", n).items()
                 if k not in ("model", "api_key", "base_url")} for n in (0, 1)]
        if sets[0] != sets[1] or set(sets[0]) != {"temperature"} or not isinstance(sets[0]["temperature"], float):
            raise MethodError(f"{EB_MODEL}#LLM.load_model: unexpected ChatOpenAI settings {sets}")
        return sets[0]

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        """generate_responses + evaluate_results: the answers are response.get("answer_q1"/"answer_q2", "")
        of the parsed JSON ("" for both when it does not parse: one try, no retry), compared for exact
        equality with the gold letters; correct iff both are."""
        gold = sample.item.target
        obj = eb_parse(reply)
        if not isinstance(obj, dict):  # a JSON list or number crashes the original run; counted wrong here
            sc = Score(parsed={"emotion": "", "cause": ""})
            return no_answer(sc, "reply is not a JSON object (EmoBench: empty answers, wrong)",
                             correct=0.0, emotion_correct=0.0, cause_correct=0.0)
        got = {"emotion": obj.get("answer_q1", ""), "cause": obj.get("answer_q2", "")}
        sc = Score(parsed=got)
        values = {f"{p}_correct": float(got[p] == gold[p]) for p in ("emotion", "cause")}
        values["correct"] = float(values["emotion_correct"] and values["cause_correct"])
        if not all(isinstance(v, str) and v for v in got.values()):
            return no_answer(sc, "answer_q1 or answer_q2 missing or not a text", **values)
        return answered(sc, **values)

    def mean_metrics(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        out = super().mean_metrics(table, means, ctx)
        # evaluate_results: per language, the accuracy of each coarse category.
        group_accuracy(out, means, table.labels.get("lang_category"), "lang_category")
        return out


# CPsyCoun's notebook (PAPER_PROTOCOL.md §0.3 CP-gen, CP-judge; §2 reliability.intervention), read at run
# time under --protocol paper.
CP_NOTEBOOK = "CAS-SIAT-XinHai+CPsyCoun/Code/Turn_Based_Dialogue_Evaluation.ipynb"
PAPER_INTERVENTION_RUBRIC = Rubric("judge", role="llm", method=CP_NOTEBOOK)
_NUMBER_LIST = re.compile(r"\[\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*,"
                          r"\s*(-?\d+(?:\.\d+)?)\s*\]")


def cp_scores(text: str, criteria: dict[str, int] = INTERVENTION_CRITERIA) -> dict[str, float] | None:
    """The notebook returns the judge's raw text (its parse is not written; cell 6 assumes four numbers).
    trustmh's rule: the last bracketed list of four numbers, each within its criterion's range (`criteria`:
    name -> maximum, in order); else None."""
    hits = _NUMBER_LIST.findall(text or "")
    if not hits:
        return None
    values = dict(zip(criteria, map(float, hits[-1])))
    return values if all(0 <= v <= criteria[c] for c, v in values.items()) else None


def cp_turn_histories(utterances: list[str]) -> list[tuple[int, str]]:
    """construct_turn_based_dialogues (cell 3): an utterance containing the client prefix is appended as it
    is and closes a sample; any other is appended after one space. (utterance index, history) per sample."""
    out, history = [], ""
    for i, u in enumerate(utterances):
        if f"{CLIENT}：" in u:
            history += u
            out.append((i, history))
        else:
            history += f" {u}"
    return out


def paper_cpsycoune_items(data: DataSource, files: list[str]) -> list[Item]:
    """The intervention samples as the notebook's cell 3 builds them, in trustmh's sorted file order (the
    notebook's os.listdir order is the file system's; order changes no per-dialogue mean)."""
    items = []
    for rel in files:
        turns = read_utterances(data.path(rel))
        dialogue = rel.removeprefix("cpsycoune/").removesuffix(".json")
        items += [Item(f"{dialogue}:{i}", {"history_text": h}, meta={"dialogue": dialogue,
                                                                       "topic": dialogue.split("/")[0]})
                  for i, h in cp_turn_histories(turns)]
    return items


def _cp_template(ctx: RunContext, function: str, variable: str, roles: list[tuple[str, str]]) -> Any:
    """The notebook's `variable` in `function`, checked to take only {history} and to be sent in the
    messages `roles` (role, variable) as the notebook sends them."""
    template = notebook_local_string(CP_NOTEBOOK, ctx.methods_root, function, variable)
    sent = notebook_message_roles(CP_NOTEBOOK, ctx.methods_root, function)
    if template.fields != ["history"] or sent != roles:
        raise MethodError(f"{template.source}: unexpected fields {template.fields} or messages {sent}")
    return template


class InterventionPaper(InterventionMethod):
    """reliability.intervention under --protocol paper: the notebook's turn histories, prompts and judge
    settings, and cell 6's per-dialogue averages."""
    exact_params = True  # the paper's settings exactly: none (params)
    method_templates = (MethodTemplate("CP-gen", CP_NOTEBOOK, "model_reply.user_message"),
                        MethodTemplate("CP-judge", CP_NOTEBOOK, "evaluate_reply.system_message"),
                        MethodTemplate("CP-judge-set", CP_NOTEBOOK, "evaluate_reply:ChatCompletion.create()"))

    def read(self, data: DataSource, files: list[str]) -> list[Item]:
        return paper_cpsycoune_items(data, files)

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        template = _cp_template(ctx, "model_reply", "user_message", [("user", "user_message")])
        return [{"role": "user", "content": template.render({"history": item.input["history_text"]})}]

    def params(self, ctx: RunContext) -> dict[str, Any]:
        """model_reply is a stub that leaves the model call to the user: no setting is known, none is sent."""
        return {}

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return (PAPER_INTERVENTION_RUBRIC,)

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any]:
        kw = notebook_call_keywords(CP_NOTEBOOK, ctx.methods_root, "evaluate_reply", "create")
        params = {k: v for k, v in kw.items() if k not in ("model", "messages")}
        if set(params) != {"temperature"} or not isinstance(params["temperature"], float):
            raise MethodError(f"{CP_NOTEBOOK}#evaluate_reply: unexpected settings {kw}")
        return params  # the notebook's gpt-4-turbo is not forced: the judge is the run's --judge

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        template = _cp_template(ctx, "evaluate_reply", "system_message", [("system", "system_message"),
                                                                           ("user", "reply")])
        return [{"role": "system", "content": template.render({"history": sample.item.input["history_text"]})},
                {"role": "user", "content": reply}]

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        cols = [*INTERVENTION_CRITERIA, "overall"]
        sc = Score()
        text = judge_text(sc, judged, cols)
        if text is None:
            return sc
        values = cp_scores(text)
        if values is None:
            return judge_failure(sc, "no [c, p, a, s] list of four in-range numbers in the judge reply "
                                     "(trustmh's parse: the notebook has none)", cols)
        sc.parsed = values
        sc.values.update(values, overall=float(np.mean([values[c] / m for c, m in INTERVENTION_CRITERIA.items()])))
        return sc

    def mean_metrics(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        return over(means, cp_dialogue_averages)


def cp_dialogue_averages(table: Table, r: Resamples) -> dict[str, np.ndarray]:
    """write_evaluation_results (cell 6): per dialogue, each criterion's mean over its turns rounded to 2
    decimals, `round(sum(col) / len(col), 2)` over the turns the judge scored, as `<c>[dialogue=<d>]`
    (NaN in a resample that does not draw the dialogue). Then, the notebook stopping there, trustmh's
    `<c>`: the plain mean of those over the distinct dialogues drawn, and `overall`: the criteria's mean,
    each divided by its maximum. One body for the point value (r = whole(table)) and the bootstrap."""
    k = r.weights.shape[1]
    names = np.empty(k, dtype=object)
    names[r.inverse] = table.clusters.astype(str)  # each cluster's label (all its rows hold the same)
    out: dict[str, np.ndarray] = {}
    for c in INTERVENTION_CRITERIA:
        col = table.col(c)
        per_dialogue = np.full(k, np.nan)
        for j in range(k):
            turns = [float(v) for v in col[r.inverse == j] if not np.isnan(v)]
            if turns:
                per_dialogue[j] = round(sum(turns) / len(turns), 2)
        drawn = (r.weights > 0) & ~np.isnan(per_dialogue)
        for j in np.flatnonzero(~np.isnan(per_dialogue)):
            out[f"{c}[dialogue={names[j]}]"] = np.where(drawn[:, j], per_dialogue[j], np.nan)
        n = drawn.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[c] = np.where(n > 0, drawn @ np.nan_to_num(per_dialogue) / np.maximum(n, 1), np.nan)
    out["overall"] = np.mean([out[c] / m for c, m in INTERVENTION_CRITERIA.items()], axis=0)
    return out
