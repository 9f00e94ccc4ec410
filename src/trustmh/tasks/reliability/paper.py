"""The paper's methods of reliability.diagnosis and reliability.support (PAPER_PROTOCOL.md §0.3 D-cls, ES-*;
§2): the predecessor's readers of replies and settings, and the two Methods the tasks in reliability.py
declare for `--protocol paper`. The authors' files are read at run time. Emotion recognition and
intervention have theirs in paper_emotion_intervention.py."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...data.extract import (argparse_defaults, argument_defaults, call_keywords, conditional_local, local_string,
                             message_roles, module_constant, returned_string)
from ...data.loaders import read_csv
from ...data.methods import MethodError
from ...scoring.metrics import (Means, Resamples, Table, confusion_many, count, f1_per_class, macro_of, point,
                                whole)
from ...types import Item, Sample, Score
from ...data.punkt import find as find_punkt
from ..esconv_reference import reference_metrics, tokenizer_used, sample_values as reference_sample_values
from ..esconv_reference import tokenize as reference_tokenize, values_ahead as reference_values_ahead
from ..paper_rules import criterion_stats, paper_classification
from .common import NO_RULES, DiagnosisMethod, SupportMethod, esconv_dialogues, esconv_item, over
from ..labelled import SUPPORT_CRITERIA, classification_metrics, classification_metrics_many
from ..base import (NO_ANSWER, DataSource, Judged, MeanMetrics, MethodTemplate, Rubric, RunContext, Verdicts,
                    answered, no_answer, verdict_values)

# The paper's predecessor code for SWMH (PAPER_PROTOCOL.md §0.3 D-cls; §2 reliability.diagnosis), read at
# run time under --protocol paper.
SWMH_SRC = "Ziteng-Wang17780623062+Python-Work/Robustness/SWMH/src"
SW_PROMPTS, SW_CLASSIFY = f"{SWMH_SRC}/prompts.py", f"{SWMH_SRC}/classification.py"
# The predecessor's label names -> trustmh's (the subreddit names).
PAPER_SWMH = {"depression": "depression", "suicidal": "SuicideWatch", "anxiety": "Anxiety", "bipolar": "bipolar",
              "offmychest": "offmychest"}
_PAPER_VARIANTS = {"suicide": "suicidal", "suicidal_ideation": "suicidal", "suicidewatch": "suicidal",
                   "depressed": "depression", "depressive": "depression", "anxious": "anxiety",
                   "bipolar_disorder": "bipolar"}
_FENCED_OBJECT = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def paper_swmh_label(label: Any) -> tuple[str, bool]:
    """_normalize_label in the predecessor's classification.py: (its label, whether it was recognised).
    Stripped, 'self.' removed, lower-cased, variants mapped; anything else (an empty or missing label
    included) becomes offmychest, a real class: the original's flaw, kept."""
    if label is None:
        return "offmychest", False
    cleaned = str(label).strip().removeprefix("self.").lower()
    cleaned = _PAPER_VARIANTS.get(cleaned, cleaned)
    return ("offmychest", False) if cleaned not in PAPER_SWMH else (cleaned, True)


def paper_swmh_prediction(reply: str) -> Any:
    """_parse_prediction_content: the first fenced {...} block, then the whole stripped reply, that parses
    as a JSON object gives the prediction's "label"; otherwise the whole stripped reply is the label."""
    cleaned = (reply or "").strip()
    for candidate in [m.group(1) for m in _FENCED_OBJECT.finditer(cleaned)] + [cleaned]:
        try:
            parsed = json.loads(candidate)
        except (ValueError, RecursionError):  # upstream catches JSONDecodeError; we survive deep JSON too
            continue
        if isinstance(parsed, dict):
            return parsed.get("label")
    return cleaned


class DiagnosisPaper(DiagnosisMethod):
    """reliability.diagnosis under --protocol paper: the predecessor's prompt, settings and reading of the
    reply (a label it does not know is offmychest), and its scorer's numbers beside trustmh's."""
    exact_params = True
    method_templates = (MethodTemplate("D-cls", SW_PROMPTS, "build_classification_prompt.prompt"),
                        MethodTemplate("D-set", SW_CLASSIFY, "run_classification:create()"))

    def params(self, ctx: RunContext) -> dict[str, Any]:
        """run_classification sends its `temperature` parameter, whose default main.py never overrides;
        no max_tokens."""
        kw = {k: v for k, v in call_keywords(SW_CLASSIFY, ctx.methods_root, "run_classification", "create").items()
              if k not in ("model", "messages")}
        defaults = argument_defaults(SW_CLASSIFY, ctx.methods_root, "run_classification")
        out = {k: defaults.get(v) if isinstance(v, str) else v for k, v in kw.items()}
        if set(out) != {"temperature"} or not isinstance(out["temperature"], (int, float)):
            raise MethodError(f"{SW_CLASSIFY}#run_classification: unexpected settings {kw} / defaults {defaults}")
        return out

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        """load_dataset drops rows with an empty text or label; the gold label goes through the same
        normaliser as a prediction (an unknown one is offmychest)."""
        path = data.path(self.task.files[0])
        items = []
        for i, (_line, row) in enumerate(read_csv(path, ["text", "label"])):
            raw = (row["label"] or "").strip()
            if (row["text"] or "").strip() and raw:
                gold, _ = paper_swmh_label(raw)
                items.append(Item(str(i), {"post": row["text"], "dataset_id": path.stem}, target=PAPER_SWMH[gold]))
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        template = local_string(SW_PROMPTS, ctx.methods_root, "build_classification_prompt", "prompt")
        roles = message_roles(SW_CLASSIFY, ctx.methods_root, "run_classification")
        if set(template.fields) != {"dataset_id", "text"} or roles != ["user"]:
            raise MethodError(f"{template.source}: unexpected fields {template.fields} or roles {roles}")
        # The inputs list is the one stripped post, joined by newlines; dataset_id is the file's stem.
        text = item.input["post"].strip()
        return [{"role": "user", "content": template.render({"text": text, "dataset_id": item.input["dataset_id"]})}]

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        gold = sample.item.target
        raw = paper_swmh_prediction(reply)
        label, known = paper_swmh_label(raw)
        sc = Score(parsed=PAPER_SWMH[label])
        if known:
            return answered(sc, correct=float(sc.parsed == gold))
        sc.notes.append("no known label; read as offmychest as the paper's code does")
        return no_answer(sc, f"label {str(raw)[:80]!r} is not an SWMH label", correct=float(sc.parsed == gold))

    # Not mean_metrics alone: the scorer's numbers are one body over Resamples, the point values that body
    # over the whole table.
    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        return classification_metrics(table, self.task.label_set) | point(self._scorer_numbers(table, whole(table)))

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        return classification_metrics_many(table, self.task.label_set, resamples) | self._scorer_numbers(table, resamples)

    def _scorer_numbers(self, table: Table, r: Resamples) -> dict[str, np.ndarray]:
        """score_classification's numbers (paper_classification) and, as a companion of the paper's
        offmychest reading, macro-F1 with a reply without a known label counted as wrong; over Resamples
        (one body for the point value and the bootstrap)."""
        labels = self.task.label_set
        out = paper_classification(table, r, labels)
        if "gold" in table.labels:
            ok = table.labels["gold"] != ""
            cm = confusion_many(table.labels["gold"][ok], table.labels["pred_strict"][ok], (*labels, NO_ANSWER),
                                r.rows(ok))
            out["macro_f1_unparsed_as_wrong"] = macro_of(f1_per_class(cm)[:, :len(labels)])
        return out


# The paper's predecessor code for ESConv (PAPER_PROTOCOL.md §0.3 ES-turn, ES-gen, ES-judge, ES-set), read
# at run time under --protocol paper.
ESCONV = "Ziteng-Wang17780623062+Python-Work/Robustness/ESConv"
ES_PROMPTS, ES_SETTINGS = f"{ESCONV}/src/prompts.py", f"{ESCONV}/src/settings.py"
ES_JUDGE, ES_CLASSIFY, ES_MAIN = f"{ESCONV}/src/judge.py", f"{ESCONV}/src/classification.py", f"{ESCONV}/main.py"
# The whole corpus, as the original's data/ESConv.json holds it: the HF split's three files, in this order.
ES_SPLITS = ("esconv/train.json", "esconv/valid.json", "esconv/test.json")
# One judge call per criterion (JUDGE_METRICS), each versioned by the file holding its template.
PAPER_SUPPORT_RUBRICS = tuple(Rubric(c, role="llm", method=ES_SETTINGS) for c in SUPPORT_CRITERIA)
_ES_SCORE = re.compile(r"\b([0-5](?:\.\d+)?)\b")


def es_judge_score(text: str) -> float | None:
    """extract_score in the original's judge.py: the first standalone number 0-5 (decimals allowed) in
    the stripped reply; a first match above 5 ("5.5") gives nothing, it does not look further."""
    m = _ES_SCORE.search(text.strip())
    if m is None:
        return None
    v = float(m.group(1))
    return v if 0 <= v <= 5 else None


def paper_support_rubrics(ctx: RunContext) -> tuple[Rubric, ...]:
    """The four criteria, each re-asked while its reply holds no score, up to call_gpt4_for_evaluation's
    max_retries default (3) calls, as the original's loop does."""
    return _support_rubrics_in(str(ctx.methods_root))


def _max_retries(local: str, root: str, func: str) -> int:
    """The `max_retries` default of one of the original's functions: how many calls its loop makes in all."""
    attempts = argument_defaults(local, Path(root), func).get("max_retries")
    if not isinstance(attempts, int) or isinstance(attempts, bool) or not 1 <= attempts <= 10:
        raise MethodError(f"{local}#{func}: max_retries {attempts!r} is not a small count")
    return attempts


@functools.lru_cache(maxsize=4)  # asked for every sample; a failure is not cached
def _support_rubrics_in(root: str) -> tuple[Rubric, ...]:
    attempts = _max_retries(ES_JUDGE, root, "call_gpt4_for_evaluation")
    return tuple(Rubric(r.name, role=r.role, method=r.method, attempts=attempts,
                        parses=lambda text: es_judge_score(text) is not None) for r in PAPER_SUPPORT_RUBRICS)


@functools.lru_cache(maxsize=4)
def es_generation_attempts(root: str) -> int:
    """run_generation's calls per sample while the stripped reply is empty: its max_retries default (3),
    which main.py's run_pipeline does not pass."""
    if "max_retries" in call_keywords(ES_MAIN, Path(root), "run_pipeline", "run_generation"):
        raise MethodError(f"{ES_MAIN}#run_pipeline: passes max_retries to run_generation")
    return _max_retries(ES_CLASSIFY, root, "run_generation")


def _not_empty(reply: str) -> bool:
    return bool(reply.strip())


def es_context_split(conversation: str, marker: str = "Seeker:") -> tuple[str, str]:
    """extract_context_and_user_input in the original's judge.py: the last line that starts with the
    seeker marker is the user input (the marker removed wherever it occurs in that line, then stripped);
    the lines before it, joined and stripped, are the context. Without such a line: (everything, "")."""
    lines = conversation.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(marker):
            return "\n".join(lines[:i]).strip(), lines[i].replace(marker, "").strip()
    return conversation, ""


def _es_defaults(ctx: RunContext) -> dict[str, Any]:
    """main.py's argparse defaults: context window, per-dialogue limit, temperature, max_tokens."""
    return dict(_es_defaults_in(str(ctx.methods_root)))


@functools.lru_cache(maxsize=4)
def _es_defaults_in(root: str) -> dict[str, Any]:
    # Read once per methods dir: every sample's settings come from here, and reading them walks the whole
    # of main.py (about 14 ms a sample otherwise). A failure is not cached.
    d = argparse_defaults(ES_MAIN, Path(root))
    keys = ("context_window", "per_dialog_limit", "temperature", "max_tokens")
    if not all(isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool) for k in keys):
        raise MethodError(f"{ES_MAIN}: expected numeric defaults for {keys}, found {d}")
    return {k: d[k] for k in keys}


def es_turns(context: list[dict[str, str]], ctx: RunContext) -> list[str]:
    """ES-turn: each context turn as format_turn renders it (its speaker prefix, then the content)."""
    template = returned_string(ES_PROMPTS, ctx.methods_root, "format_turn")
    test, if_seeker, otherwise = conditional_local(ES_PROMPTS, ctx.methods_root, "format_turn", "prefix")
    content = "turn.get('content', '').strip()"
    if test != "turn.get('speaker') == 'seeker'" or set(template.fields) != {"prefix", content}:
        raise MethodError(f"{template.source}: unexpected fields {template.fields} or prefix test {test!r}")
    return [template.render({"prefix": if_seeker if t["speaker"] == "seeker" else otherwise, content: t["text"].strip()})
            for t in context]


def es_generation_messages(turns: list[str], ctx: RunContext) -> list[dict[str, str]]:
    """ES-gen: the formatted context turns joined by newlines, then the supporter cue, as one message."""
    template = local_string(ES_PROMPTS, ctx.methods_root, "build_generation_prompt", "prompt")
    roles = message_roles(ES_CLASSIFY, ctx.methods_root, "run_generation")
    if template.fields != ["context"] or len(roles) != 1:
        raise MethodError(f"{template.source}: unexpected fields {template.fields} or roles {roles}")
    return [{"role": roles[0], "content": template.render({"context": "\n".join(turns) if turns else ""})}]


def es_judge_messages(turns: list[str], reference: str, reply: str, ctx: RunContext) -> dict[str, list[dict[str, str]]]:
    """ES-judge, one call per JUDGE_METRICS criterion (lower-cased name -> messages). As
    convert_esconv_to_evaluation_format does: the formatted context turns joined by newlines, then split
    back at the last seeker line; the reference and the reply stripped, as the original stored them."""
    metrics = module_constant(ES_SETTINGS, ctx.methods_root, "JUDGE_METRICS")
    templates = module_constant(ES_SETTINGS, ctx.methods_root, "JUDGE_PROMPT_TEMPLATES")
    roles = message_roles(ES_JUDGE, ctx.methods_root, "call_gpt4_for_evaluation")
    if [m.lower() for m in metrics] != list(SUPPORT_CRITERIA) or not all(m in templates for m in metrics) \
            or len(roles) != 1:
        raise MethodError(f"{ES_SETTINGS}: JUDGE_METRICS {metrics} are not the four criteria trustmh reads, "
                          f"or the judge sends roles {roles}")
    context, user_input = es_context_split("\n".join(turns))
    values = {"Context": context, "User_input": user_input, "GT_Response": reference.strip(),
              "Pred_Response": reply.strip()}
    return {m.lower(): [{"role": roles[0], "content": templates[m].format(**values)}] for m in metrics}


class SupportPaper(MeanMetrics, SupportMethod):
    """reliability.support under --protocol paper: the whole corpus's first turns of each dialogue, the
    predecessor's prompt, settings and re-asks, one judge call per criterion, and the reference metrics."""
    exact_params = True
    method_templates = (MethodTemplate("ES-turn", ES_PROMPTS, "format_turn:return[0]"),
                        MethodTemplate("ES-gen", ES_PROMPTS, "build_generation_prompt.prompt"),
                        MethodTemplate("ES-judge", ES_SETTINGS, "JUDGE_PROMPT_TEMPLATES,JUDGE_METRICS"),
                        MethodTemplate("ES-set", ES_JUDGE, "call_gpt4_for_evaluation:create()"),
                        MethodTemplate("ES-gen-set", ES_CLASSIFY, "run_generation:create()"),
                        MethodTemplate("ES-args", ES_MAIN, "parse_args:add_argument(default=)"))

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        """build_samples_from_dataset: every dialogue of the corpus in order; its supporter turns (not the
        first turn) whose window of the previous `context_window` turns ends with a seeker turn; the
        first `per_dialog_limit` of them. Not random."""
        missing = [f for f in ES_SPLITS if not data.has(f)]
        if missing:  # missing_files() cannot see the protocol: stop here, as prepare() reports a MethodError
            raise MethodError(f"the paper's reliability.support reads the whole ESConv corpus; missing "
                              f"{', '.join(missing)} (`trustmh data pull esconv`)")
        self.task.files = ES_SPLITS  # the runner records the checksums of the files actually read
        args = _es_defaults(ctx)
        window, limit = int(args["context_window"]), int(args["per_dialog_limit"])
        items = []
        for rel in ES_SPLITS:
            split = rel.removeprefix("esconv/").removesuffix(".json")
            for d, dialog, rec in esconv_dialogues(data.path(rel)):
                chosen = [t for t in range(1, len(dialog)) if dialog[t]["speaker"] == "sys"
                          and dialog[max(0, t - window):t][-1]["speaker"] == "usr"][:limit]
                items += [esconv_item(f"{split}/{d}:{t}", dialog, rec, f"{split}/{d}", t, window) for t in chosen]
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        return es_generation_messages(es_turns(item.input["context"], ctx), ctx)

    def params(self, ctx: RunContext) -> dict[str, Any]:
        """run_generation sends temperature and max_tokens, which main.py passes from its CLI defaults."""
        kw = call_keywords(ES_CLASSIFY, ctx.methods_root, "run_generation", "create")
        if {k: v for k, v in kw.items() if k not in ("model", "messages")} != \
                {"temperature": "temperature", "max_tokens": "max_tokens"}:
            raise MethodError(f"{ES_CLASSIFY}#run_generation: unexpected settings {kw}")
        es_generation_attempts(str(ctx.methods_root))  # read here, where a bad file stops the task (reask cannot)
        args = _es_defaults(ctx)
        return {"temperature": args["temperature"], "max_tokens": args["max_tokens"]}

    def reask(self, ctx: RunContext) -> tuple[int, Callable[[str], bool]] | None:
        """run_generation asks again while the stripped reply is empty, `max_retries` calls in all; the reply
        it keeps is the stripped one, as the judge and scoring see it (`Pred_Response`)."""
        try:
            return es_generation_attempts(str(ctx.methods_root)), _not_empty
        except MethodError:  # the task does not run: building its samples said why
            return None

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return paper_support_rubrics(ctx)

    def judgements(self, sample: Sample, reply: str, ctx: RunContext) -> dict[str, list[dict[str, str]]]:
        return es_judge_messages(es_turns(sample.item.input["context"], ctx), sample.item.target, reply, ctx)

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any]:
        kw = call_keywords(ES_JUDGE, ctx.methods_root, "call_gpt4_for_evaluation", "create")
        params = {k: v for k, v in kw.items() if k not in ("model", "messages")}
        if any(isinstance(v, str) for v in params.values()):  # an expression: not a setting trustmh can read
            raise MethodError(f"{ES_JUDGE}#call_gpt4_for_evaluation: settings not literal: {params}")
        return params

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Verdicts:
        reason = NO_RULES.format(what="fluency, professionalism, empathy and helpfulness")
        return Verdicts({c: Judged(reason=reason) for c in SUPPORT_CRITERIA})

    def metric_description(self, ctx: RunContext) -> str:
        return (f"{self.task.metric.description}; reference metrics (ref_*, ESConv src/metrics.py) tokenised by "
                f"{tokenizer_used(self.punkt(ctx))}")

    def punkt(self, ctx: RunContext) -> str | None:
        """The folder of the Punkt English model the reference metrics split sentences with (data/punkt.py),
        looked up once a run; None: none is installed."""
        key = ctx.data_root
        found = self.__dict__.setdefault("_punkt", {})
        if key not in found:
            folder = find_punkt(ctx.data_root)
            found[key] = None if folder is None else str(folder)
        return found[key]

    def score(self, sample: Sample, reply: str, judged: Verdicts | None, ctx: RunContext) -> Score:
        # The paper: each criterion its own call; a verdict without a score is dropped from that
        # criterion's mean (and counted), the others stand.
        sc = Score()
        sc.values.update(verdict_values(sc, judged, SUPPORT_CRITERIA, es_judge_score,
                                        "no score 0-5 in the judge reply"))
        sc.parsed = {c: sc.values.get(c) for c in SUPPORT_CRITERIA}
        if all(c in sc.values for c in SUPPORT_CRITERIA):
            sc.values["overall"] = float(np.mean([sc.values[c] for c in SUPPORT_CRITERIA]))
        else:
            sc.unscored.setdefault("overall", "not all four criteria scored")
        # The reference metrics against the ground-truth turn (its response.strip()).
        values, tokens = reference_sample_values(reply.strip(), sample.item.target, self.punkt(ctx))
        sc.values.update(values)
        sc.parsed["ref_tokens"] = tokens
        return sc

    def warm_up(self, ctx: RunContext) -> None:
        # nltk's import (~0.25 s, the whole package) and the Punkt model's files, which the first reply's
        # reference metrics would otherwise wait for on the event loop
        reference_tokenize("", self.punkt(ctx))

    def ahead(self, sample: Sample, reply: str, ctx: RunContext) -> None:
        # The reference metrics (~0.6 ms a reply, nltk's tokeniser mostly) need the reply alone; the four
        # criteria's verdicts come last, and the whole benchmark's 13,000 ESConv replies scored after
        # them were most of a run's tail.
        reference_values_ahead(reply.strip(), sample.item.target, self.punkt(ctx))

    def mean_metrics(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        # Each criterion's mean over its own scored samples, as the original reports them; the paper's
        # single number is not in its code: the mean of the four is the natural reading (a guess).
        out = {c: means(c) for c in SUPPORT_CRITERIA}
        out["overall"] = self._overall(means)
        out["overall_all_four"] = means("overall")
        out.update(over(means, lambda t, r: criterion_stats(t, r, SUPPORT_CRITERIA)))
        if "ref_hyp_len" in table.columns:
            out.update(over(means, reference_metrics))
        return out

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray:
        return self._overall(Means(table, resamples))

    def metric_n(self, table: Table, metric: str) -> int:
        """min, max and std of a criterion rest on the samples that criterion scored."""
        name, _, criterion = metric.rstrip("]").partition("[")
        if name in ("min", "max", "std") and criterion in SUPPORT_CRITERIA:
            return count(table.col(criterion))
        return super().metric_n(table, metric)

    @staticmethod
    def _overall(means: Means) -> Any:
        return np.mean([means(c) for c in SUPPORT_CRITERIA], axis=0)
