"""Reliability pillar: knowledge (USMLE-Mental), emotion recognition (EmoBench EU), diagnosis (SWMH),
emotional support (ESConv) and psychological intervention (CPsyCounE).

Item ids (what replay files use): knowledge and diagnosis the 0-based record index; emotion recognition
'<language>:<qid>' (en:17); support '<dialogue index>:<turn index>' in the ESConv test file (under
--protocol paper, which reads the whole corpus, '<split>/<dialogue index>:<turn index>', train/0:3);
intervention '<topic>/<n>:<utterance index>' (Career/1:4).

Knowledge and emotion recognition are multiple choice; diagnosis is a 5-way label with macro-F1; support
and intervention are free replies rated by an LLM judge (the rules judge leaves those ratings unscored:
no heuristic can honestly rate empathy or professionalism). D4 is not read: it is released only under a
data usage agreement and its file format is not known to this project."""

from __future__ import annotations

import json
import random
import re
import string
from typing import Any, Callable

import numpy as np

from ..data.loaders import read_csv, read_json, read_jsonl
from ..errors import DataError, UserError
from ..judges.parsing import (after_last_answer_tag, extract_json_object, extract_label, extract_letter,
                              strip_markdown)
from ..metrics import (Means, Resamples, Table, cluster_mean, cluster_mean_many, confusion_many, f1_per_class,
                       group_mask, macro_of, mean)
from ..types import Item, Sample, Score
from ._shared import (SUPPORT_CRITERIA, LabelledTask, class_f1, classification_metrics, classification_metrics_many,
                      judge_scores, unknown_label_reason)
from .base import (NO_ANSWER, DataSource, Judged, MethodTemplate, MetricSpec, Rubric, RunContext, Task, Verdicts,
                   answer_metrics, answered, judge_failure, judge_text, no_answer, register, render)

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
NO_RULES = "rating {what} needs an LLM judge (--judge openai/... or anthropic/...)"


def _group_accuracy(out: dict[str, Any], means: Means, groups: np.ndarray | None, key: str) -> None:
    """accuracy[key=value] for every value of a label column."""
    if groups is None or not len(groups):
        return
    for name in sorted({g for u in set(groups) for g in u.split("|") if g}):
        out[f"accuracy[{key}={name}]"] = means("correct", group_mask(groups, name))


# --------------------------------------------------------------------------------------------------
# Knowledge: USMLE-Mental

def option_from_text(reply: str, options: dict[str, str]) -> str | None:
    """The option whose text the reply gives as its answer: the whole answer, or the only option text
    named in it (an option text contained in a longer named one does not count separately)."""
    answer = strip_markdown(after_last_answer_tag(reply)).strip().strip(".").lower()
    if not answer:
        return None
    for letter, text in options.items():
        if answer == text.strip().strip(".").lower():
            return letter
    # Very short option texts ("i", "ii", "5") are only taken as the whole answer, never found in prose.
    named = {letter: text.strip().lower() for letter, text in options.items() if len(text.strip()) >= 4
             and re.search(rf"(?<!\w){re.escape(text.strip().lower())}(?!\w)", answer)}
    named = {k: t for k, t in named.items() if not any(t != o and t in o for o in named.values())}
    return next(iter(named)) if len(named) == 1 else None


@register
class Knowledge(Task):
    id = "reliability.knowledge"
    evidence = "D"
    pillar = "reliability"
    title = "Mental-health knowledge: USMLE-style multiple choice (USMLE-Mental)"
    dataset = "usmle-mental"
    files = ("usmle-mental/USMLE-mental.jsonl",)
    metric = MetricSpec("accuracy", True, 0.0, 1.0, "share of questions answered with the gold option")
    primary_value = "correct"
    gen_params = {"max_tokens": 512}

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        path = data.path(self.files[0])
        items = []
        for i, (line, rec) in enumerate(read_jsonl(path)):
            options = rec.get("options")
            if not isinstance(options, dict) or not options or not all(
                    isinstance(k, str) and len(k) == 1 and isinstance(v, str) for k, v in options.items()):
                raise DataError(path, "'options' must map single letters to option texts", line)
            if not isinstance(rec.get("question"), str):
                raise DataError(path, "'question' must be a text", line)
            conditions = rec.get("meta_info2") or []
            if isinstance(conditions, str):
                conditions = [conditions]
            gold = rec.get("answer")
            items.append(Item(str(i), {"question": rec["question"], "options": dict(sorted(options.items()))},
                              target=gold if isinstance(gold, str) else None,
                              meta={"step": str(rec.get("meta_info1") or ""),
                                    "conditions": [str(c) for c in conditions]}))
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "user", "content": render("reliability_knowledge.j2", **item.input)}]

    def choices(self, item: Item) -> tuple[str, ...]:
        return tuple(item.input["options"])

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        options = sample.item.input["options"]
        gold = sample.item.target
        choice = extract_letter(reply, options) or option_from_text(reply, options)
        sc = Score(parsed=choice)
        if gold not in options:
            sc.unscored["correct"] = f"gold answer {gold!r} is not one of the options"
        elif choice is None:
            # Unparsable, refused or off the options: wrong, as the other TrustMH code counts it.
            other = extract_letter(reply, LETTERS[:10])  # A-J: the most options any question has
            no_answer(sc, f"answer {other} is not one of the options {min(options)}-{max(options)}"
                      if other else "no option letter or option text found in reply", correct=0.0)
        else:
            answered(sc, correct=float(choice == gold))
        return sc

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        return {"step": sample.item.meta.get("step", ""),
                "condition": "|".join(sorted(sample.item.meta.get("conditions", [])))}

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        return self._rates(table, Means(table))

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        return self._rates(table, Means(table, resamples))

    def _rates(self, table: Table, means: Means) -> dict[str, Any]:
        out = answer_metrics({"accuracy": means("correct")}, table, {"accuracy": "correct"}, means)
        _group_accuracy(out, means, table.labels.get("step"), "step")
        _group_accuracy(out, means, table.labels.get("condition"), "condition")
        return out


# --------------------------------------------------------------------------------------------------
# Emotion recognition: EmoBench EU

_EMO_KEYS = {"emotion": ("answer_q1", "q1", "emotion", "emotion_answer"),
             "cause": ("answer_q2", "q2", "cause", "cause_answer")}


def parse_emotion_cause(reply: str) -> tuple[str | None, str | None]:
    """Emotion and cause letters from a JSON object ({"answer_q1": "B", "answer_q2": "C"}), 'Q1: B' /
    'Emotion: B' lines, or a compact 'Answer: B/C' (also 'B, C')."""
    out: dict[str, str | None] = {"emotion": None, "cause": None}
    obj = extract_json_object(reply)
    if obj is not None:
        for part, keys in _EMO_KEYS.items():
            for k in keys:
                v = obj.get(k)
                if isinstance(v, str):
                    m = re.match(r"\s*\(?([A-Za-z])(?![A-Za-z])", v)  # "B", "(b)", "B) Hurt"
                    out[part] = m.group(1).upper() if m else None
                    break
    clean = strip_markdown(reply)
    for part, pat in (("emotion", r"(?:q(?:uestion)?\s*1|emotion)"), ("cause", r"(?:q(?:uestion)?\s*2|cause)")):
        if out[part] is None:
            hits = re.findall(rf"(?im)^\s*{pat}\s*[:.)\-]\s*\(?([A-Z])\)?(?![A-Za-z])", clean)
            out[part] = hits[-1].upper() if hits else None
    if out["emotion"] is None and out["cause"] is None:
        m = re.search(r"(?i)answer\s*[:\-]\s*\(?([A-Z])\)?\s*[/,;&]\s*(?:and\s+)?\(?([A-Z])\)?(?![A-Za-z])", clean)
        if m:
            out = {"emotion": m.group(1).upper(), "cause": m.group(2).upper()}
    return out["emotion"], out["cause"]


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
    from ..data.extract import local_string, yaml_value
    from ..data.methods import MethodError
    fmt = local_string(EB_UTILS, ctx.methods_root, "get_response_format", "res_format")
    if fmt.fields or fmt.segments is None:
        raise MethodError(f"{fmt.source}: expected a plain string constant")
    text = fmt.render({})
    if sorted({n for _, n, _, _ in string.Formatter().parse(text) if n}) != ["conditions", "statement"]:
        raise MethodError(f"{fmt.source}: placeholders are not {{statement}} and {{conditions}}")
    return yaml_value(EB_PROMPTS, ctx.methods_root, "sys", lang) + text.format(
        statement=yaml_value(EB_RESPONSE, ctx.methods_root, "base", lang),
        conditions=yaml_value(EB_RESPONSE, ctx.methods_root, "EU", lang))


@register
class EmotionRecognition(Task):
    id = "reliability.emotion_recognition"
    evidence = "C"
    pillar = "reliability"
    title = "Emotion recognition: emotion and its cause (EmoBench EU)"
    dataset = "emobench"
    files = ("emobench/EU.jsonl",)
    metric = MetricSpec("accuracy", True, 0.0, 1.0, "share of items where both emotion and cause are right")
    primary_value = "correct"
    metric_columns = {"emotion_accuracy": "emotion_correct", "cause_accuracy": "cause_correct"}
    gen_params = {"max_tokens": 256}
    LANGS = ("en", "zh", "all")
    paper_protocol = True
    method_templates = (MethodTemplate("EB-sys", EB_PROMPTS, "sys.<lang>"),
                        MethodTemplate("EB-EU", EB_PROMPTS, "EU.<lang>"),
                        MethodTemplate("EB-resp", EB_RESPONSE, "base.<lang>,EU.<lang>"),
                        MethodTemplate("EB-resfmt", EB_UTILS, "get_response_format.res_format"),
                        MethodTemplate("EB-set", EB_MODEL, "LLM.load_model:ChatOpenAI()"))

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        lang = str(ctx.options.get("lang", "en"))
        if lang not in self.LANGS:
            raise UserError(f"--lang must be one of {', '.join(self.LANGS)}, not '{lang}'")
        path = data.path(self.files[0])
        items, seen = [], set()
        for line, rec in read_jsonl(path):
            language = str(rec.get("language", ""))
            if lang != "all" and language != lang:
                continue
            for k in ("scenario", "subject", "emotion_choices", "cause_choices"):
                if k not in rec:
                    raise DataError(path, f"missing field '{k}'", line)
            if not all(isinstance(c, list) and c and all(isinstance(x, str) for x in c)
                       for c in (rec["emotion_choices"], rec["cause_choices"])):
                raise DataError(path, "emotion_choices and cause_choices must be lists of texts", line)
            item_id = f"{language}:{rec.get('qid')}"
            if item_id in seen:
                raise DataError(path, f"duplicate qid {rec.get('qid')!r} for language {language!r}", line)
            seen.add(item_id)
            target = {}
            for part in ("emotion", "cause"):
                choices, label = rec[f"{part}_choices"], rec.get(f"{part}_label")
                target[part] = LETTERS[choices.index(label)] if label in choices else None
            items.append(Item(item_id, {k: rec[k] for k in ("scenario", "subject", "emotion_choices", "cause_choices")},
                              target=target, meta={"category": str(rec.get("coarse_category", "")),
                                                   "lang": language}))
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        x = item.input
        if ctx.protocol == "paper":
            # generate_responses: EU.<lang>.format with the choices as rank_choices renders them ("A) text"
            # per line), after init_prompt's system message. EB-qwen's "/no_think" prefix is keyed on the
            # tested model's name, which a request here does not know: it is not sent (README).
            from ..data.extract import yaml_value
            lang = item.meta["lang"]
            ranked = {k: "\n".join(f"{LETTERS[i]}) {c}" for i, c in enumerate(x[f"{k}_choices"]))
                      for k in ("emotion", "cause")}
            user = yaml_value(EB_PROMPTS, ctx.methods_root, "EU", lang).format(
                scenario=x["scenario"], subject=x["subject"], emo_choices=ranked["emotion"],
                cause_choices=ranked["cause"])
            return [{"role": "system", "content": eb_system(lang, ctx)}, {"role": "user", "content": user}]
        return [{"role": "user", "content": render(
            "reliability_emotion.j2", scenario=x["scenario"], subject=x["subject"],
            emotions=list(zip(LETTERS, x["emotion_choices"])), causes=list(zip(LETTERS, x["cause_choices"])))}]

    def choices(self, item: Item) -> tuple[str, ...]:
        # Every (emotion, cause) pair in the 'Answer: B/C' form the parser accepts, for the baselines.
        return tuple(f"{e}/{c}" for e in LETTERS[:len(item.input["emotion_choices"])]
                     for c in LETTERS[:len(item.input["cause_choices"])])

    def paper_gen_params(self, ctx: RunContext) -> dict[str, Any]:
        """load_model builds ChatOpenAI with temperature 0.6 for both API model types and nothing else
        (no max_tokens for API models)."""
        from ..data.extract import call_keywords
        from ..data.methods import MethodError
        sets = [{k: v for k, v in call_keywords(EB_MODEL, ctx.methods_root, "LLM.load_model", "ChatOpenAI", n).items()
                 if k not in ("model", "api_key", "base_url")} for n in (0, 1)]
        if sets[0] != sets[1] or set(sets[0]) != {"temperature"} or not isinstance(sets[0]["temperature"], float):
            raise MethodError(f"{EB_MODEL}#LLM.load_model: unexpected ChatOpenAI settings {sets}")
        return sets[0]

    def _paper_score(self, sample: Sample, reply: str) -> Score:
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

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        if ctx.protocol == "paper":
            return self._paper_score(sample, reply)
        x, gold = sample.item.input, sample.item.target
        emotion, cause = parse_emotion_cause(reply)
        sc = Score(parsed={"emotion": emotion, "cause": cause})
        got, missing = {}, []
        for part, letter, n in (("emotion", emotion, len(x["emotion_choices"])),
                                ("cause", cause, len(x["cause_choices"]))):
            if gold.get(part) is None:
                sc.unscored[f"{part}_correct"] = f"gold {part} label is not among the {part} choices"
                continue
            if letter is None:
                missing.append(f"no {part} letter found in reply")
            elif LETTERS.index(letter) >= n:
                missing.append(f"{part} answer {letter} is not one of the options A-{LETTERS[n - 1]}")
            # A part without a usable letter is wrong, as EmoBench scores it.
            got[part] = float(letter is not None and LETTERS.index(letter) < n and letter == gold[part])
            sc.values[f"{part}_correct"] = got[part]
        if sc.unscored:
            sc.unscored["correct"] = "; ".join(sc.unscored.values())
        elif missing:
            no_answer(sc, "; ".join(missing), correct=0.0)
        else:
            answered(sc, correct=float(got["emotion"] and got["cause"]))
        return sc

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        return {"category": sample.item.meta.get("category", ""), "lang": sample.item.meta.get("lang", "")}

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        return self._rates(table, Means(table), ctx)

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        return self._rates(table, Means(table, resamples), ctx)

    def _rates(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        out = {"accuracy": means("correct"), "emotion_accuracy": means("emotion_correct"),
               "cause_accuracy": means("cause_correct")}
        answer_metrics(out, table, {"accuracy": "correct"}, means)
        _group_accuracy(out, means, table.labels.get("category"), "category")
        if ctx.options.get("lang") == "all":
            _group_accuracy(out, means, table.labels.get("lang"), "lang")
        return out


# --------------------------------------------------------------------------------------------------
# Diagnosis: SWMH

SWMH_LABELS = ("depression", "SuicideWatch", "Anxiety", "bipolar", "offmychest")
SWMH_VOCAB = {"depression": "depression", "suicidewatch": "SuicideWatch", "suicide watch": "SuicideWatch",
              "anxiety": "Anxiety", "bipolar": "bipolar", "bipolar disorder": "bipolar",
              "offmychest": "offmychest", "off my chest": "offmychest"}


def swmh_label(raw: str) -> str | None:
    """The released labels are subreddit names with a 'self.' prefix (self.depression); accept both."""
    name = raw.strip().removeprefix("self.")
    return next((lab for lab in SWMH_LABELS if lab.lower() == name.lower()), None)


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


@register
class Diagnosis(LabelledTask):
    label_set = SWMH_LABELS
    id = "reliability.diagnosis"
    evidence = "B"
    pillar = "reliability"
    title = "Psychological diagnosis from a Reddit post (SWMH test split)"
    dataset = "swmh"
    files = ("swmh/test.csv",)
    metric = MetricSpec("macro_f1", True, 0.0, 1.0, "macro-F1 over the five SWMH classes")
    primary_value = "correct"
    gen_params = {"max_tokens": 256}
    paper_protocol = True
    method_templates = (MethodTemplate("D-cls", SW_PROMPTS, "build_classification_prompt.prompt"),
                        MethodTemplate("D-set", SW_CLASSIFY, "run_classification:create()"))

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        path = data.path(self.files[0])
        items = []
        for i, (_line, row) in enumerate(read_csv(path, ["text", "label"])):
            raw = (row["label"] or "").strip()
            if ctx.protocol != "paper":
                items.append(Item(str(i), {"post": row["text"] or ""}, target=swmh_label(raw) or raw))
            elif (row["text"] or "").strip() and raw:  # load_dataset drops rows with an empty text or label
                # The gold label goes through the same normaliser as a prediction (an unknown one is offmychest).
                gold, _ = paper_swmh_label(raw)
                items.append(Item(str(i), {"post": row["text"], "dataset_id": path.stem}, target=PAPER_SWMH[gold]))
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        if ctx.protocol == "paper":
            from ..data.extract import local_string, message_roles
            from ..data.methods import MethodError
            template = local_string(SW_PROMPTS, ctx.methods_root, "build_classification_prompt", "prompt")
            roles = message_roles(SW_CLASSIFY, ctx.methods_root, "run_classification")
            if set(template.fields) != {"dataset_id", "text"} or roles != ["user"]:
                raise MethodError(f"{template.source}: unexpected fields {template.fields} or roles {roles}")
            # The inputs list is the one stripped post, joined by newlines; dataset_id is the file's stem.
            text = item.input["post"].strip()
            return [{"role": "user", "content": template.render({"text": text, "dataset_id": item.input["dataset_id"]})}]
        return [{"role": "user", "content": render("reliability_diagnosis.j2", post=item.input["post"])}]

    def paper_gen_params(self, ctx: RunContext) -> dict[str, Any]:
        """run_classification sends its `temperature` parameter, whose default main.py never overrides;
        no max_tokens."""
        from ..data.extract import argument_defaults, call_keywords
        from ..data.methods import MethodError
        kw = {k: v for k, v in call_keywords(SW_CLASSIFY, ctx.methods_root, "run_classification", "create").items()
              if k not in ("model", "messages")}
        defaults = argument_defaults(SW_CLASSIFY, ctx.methods_root, "run_classification")
        out = {k: defaults.get(v) if isinstance(v, str) else v for k, v in kw.items()}
        if set(out) != {"temperature"} or not isinstance(out["temperature"], (int, float)):
            raise MethodError(f"{SW_CLASSIFY}#run_classification: unexpected settings {kw} / defaults {defaults}")
        return out

    def choices(self, item: Item) -> tuple[str, ...]:
        return ("SuicideWatch", "depression", "Anxiety", "bipolar", "offmychest")

    def perturb(self, item: Item, edit: Callable[[str], str]) -> Item:
        return Item(item.id, {**item.input, "post": edit(item.input["post"])}, item.target, dict(item.meta))

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        gold = sample.item.target
        if ctx.protocol == "paper":
            raw = paper_swmh_prediction(reply)
            label, known = paper_swmh_label(raw)
            sc = Score(parsed=PAPER_SWMH[label])
            if known:
                return answered(sc, correct=float(sc.parsed == gold))
            sc.notes.append("no known label; read as offmychest as the paper's code does")
            return no_answer(sc, f"label {str(raw)[:80]!r} is not an SWMH label", correct=float(sc.parsed == gold))
        pred = extract_label(reply, SWMH_VOCAB)
        sc = Score(parsed=pred)
        if gold not in SWMH_LABELS:
            sc.unscored["correct"] = f"gold label {gold!r} is not an SWMH label"
        elif not sample.item.input["post"].strip():
            sc.unscored["correct"] = "post is empty"
        elif pred is None:
            reason = unknown_label_reason(reply, "no single SWMH label found in reply")
            if ctx.upstream_compat:
                sc.parsed = "offmychest"
                sc.notes.append("no label found; read as offmychest as the paper's code does")
            no_answer(sc, reason, correct=float(sc.parsed == gold))
        else:
            answered(sc, correct=float(pred == gold))
        return sc

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        out = super().labels(sample, score)
        # The prediction with a non-answer as a miss, whatever the paper's reading made of it (offmychest).
        out["pred_strict"] = NO_ANSWER if out["pred"] and score.no_answer else out["pred"]
        return out

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        out = classification_metrics(table, SWMH_LABELS)
        if ctx.protocol == "paper" and "gold" in table.labels:
            # Companion of the paper's offmychest reading: a reply without a known label counted as wrong.
            ok = table.labels["gold"] != ""
            f1 = class_f1(table.labels["gold"][ok], table.labels["pred_strict"][ok], SWMH_LABELS)
            out["macro_f1_unparsed_as_wrong"] = float(np.nanmean(f1)) if (~np.isnan(f1)).any() else float("nan")
        return out

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        out = classification_metrics_many(table, SWMH_LABELS, resamples)
        if ctx.protocol == "paper" and "gold" in table.labels:
            ok = table.labels["gold"] != ""
            cm = confusion_many(table.labels["gold"][ok], table.labels["pred_strict"][ok], (*SWMH_LABELS, NO_ANSWER),
                                resamples.rows(ok))
            out["macro_f1_unparsed_as_wrong"] = macro_of(f1_per_class(cm)[:, :len(SWMH_LABELS)])
        return out


# --------------------------------------------------------------------------------------------------
# Emotional support: ESConv

CONTEXT_TURNS = 6
TURNS_PER_DIALOGUE = 2


def pick_turns(candidates: list[int], seed: int, dialogue: int, k: int = TURNS_PER_DIALOGUE) -> list[int]:
    """At most k supporter turns of one dialogue, the same for a given (seed, dialogue) on every machine."""
    rng = random.Random(f"{seed}:{dialogue}")
    return sorted(rng.sample(candidates, min(k, len(candidates))))


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
    from ..data.extract import argparse_defaults
    from ..data.methods import MethodError
    d = argparse_defaults(ES_MAIN, ctx.methods_root)
    keys = ("context_window", "per_dialog_limit", "temperature", "max_tokens")
    if not all(isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool) for k in keys):
        raise MethodError(f"{ES_MAIN}: expected numeric defaults for {keys}, found {d}")
    return {k: d[k] for k in keys}


def _es_turns(context: list[dict[str, str]], ctx: RunContext) -> list[str]:
    """ES-turn: each context turn as format_turn renders it (its speaker prefix, then the content)."""
    from ..data.extract import conditional_local, returned_string
    from ..data.methods import MethodError
    template = returned_string(ES_PROMPTS, ctx.methods_root, "format_turn")
    test, if_seeker, otherwise = conditional_local(ES_PROMPTS, ctx.methods_root, "format_turn", "prefix")
    content = "turn.get('content', '').strip()"
    if test != "turn.get('speaker') == 'seeker'" or set(template.fields) != {"prefix", content}:
        raise MethodError(f"{template.source}: unexpected fields {template.fields} or prefix test {test!r}")
    return [template.render({"prefix": if_seeker if t["speaker"] == "seeker" else otherwise, content: t["text"].strip()})
            for t in context]


@register
class Support(Task):
    id = "reliability.support"
    evidence = "B"
    pillar = "reliability"
    title = "Emotional support: next supporter turn, judged against the real one (ESConv test)"
    dataset = "esconv"
    files = ("esconv/test.json",)
    metric = MetricSpec("overall", True, 0.0, 5.0, "mean of the four judge criteria (0-5 each)")
    primary_value = "overall"
    metric_columns = {c: c for c in SUPPORT_CRITERIA}
    rubrics = (Rubric("judge", ("reliability_support_judge.j2",)),)
    gen_params = {"max_tokens": 256}
    paper_protocol = True
    method_templates = (MethodTemplate("ES-turn", ES_PROMPTS, "format_turn:return[0]"),
                        MethodTemplate("ES-gen", ES_PROMPTS, "build_generation_prompt.prompt"),
                        MethodTemplate("ES-judge", ES_SETTINGS, "JUDGE_PROMPT_TEMPLATES,JUDGE_METRICS"),
                        MethodTemplate("ES-set", ES_JUDGE, "call_gpt4_for_evaluation:create()"),
                        MethodTemplate("ES-gen-set", ES_CLASSIFY, "run_generation:create()"),
                        MethodTemplate("ES-args", ES_MAIN, "parse_args:add_argument(default=)"))

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        if ctx.protocol == "paper":
            return self._paper_load(data, ctx)
        path = data.path(self.files[0])
        items = []
        for d, dialog, rec in self._dialogues(path):
            # A supporter turn that answers a seeker turn; the turns before it are the context.
            candidates = [t for t in range(1, len(dialog))
                          if dialog[t]["speaker"] == "sys" and dialog[t - 1]["speaker"] == "usr"]
            for t in pick_turns(candidates, ctx.seed, d):
                items.append(self._item(f"{d}:{t}", dialog, rec, d, t, CONTEXT_TURNS))
        return items

    @staticmethod
    def _dialogues(path) -> list[tuple[int, list[dict], dict]]:
        out = []
        for d, (line, rec) in enumerate(read_jsonl(path)):
            dialog = rec.get("dialog")
            if not isinstance(dialog, list) or not all(
                    isinstance(t, dict) and t.get("speaker") in ("usr", "sys") and isinstance(t.get("text"), str)
                    for t in dialog):
                raise DataError(path, "'dialog' must be a list of {text, speaker: usr|sys} turns", line)
            out.append((d, dialog, rec))
        return out

    @staticmethod
    def _item(item_id: str, dialog: list[dict], rec: dict, d: Any, t: int, window: int) -> Item:
        speakers = {"usr": "seeker", "sys": "supporter"}
        context = [{"speaker": speakers[x["speaker"]], "text": x["text"]} for x in dialog[max(0, t - window):t]]
        return Item(item_id, {"context": context}, target=dialog[t]["text"],
                    meta={"dialogue": d, "turn": t, "strategy": dialog[t].get("strategy", ""),
                          "problem_type": rec.get("problem_type", "")})

    def _paper_load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        """build_samples_from_dataset: every dialogue of the corpus in order; its supporter turns (not the
        first turn) whose window of the previous `context_window` turns ends with a seeker turn; the
        first `per_dialog_limit` of them. Not random."""
        from ..data.methods import MethodError
        missing = [f for f in ES_SPLITS if not data.has(f)]
        if missing:  # missing_files() cannot see the protocol: stop here, as prepare() reports a MethodError
            raise MethodError(f"the paper's reliability.support reads the whole ESConv corpus; missing "
                            f"{', '.join(missing)} (`trustmh data pull esconv`)")
        self.files = ES_SPLITS  # the runner records the checksums of the files actually read
        args = _es_defaults(ctx)
        window, limit = int(args["context_window"]), int(args["per_dialog_limit"])
        items = []
        for rel in ES_SPLITS:
            split = rel.removeprefix("esconv/").removesuffix(".json")
            for d, dialog, rec in self._dialogues(data.path(rel)):
                chosen = [t for t in range(1, len(dialog)) if dialog[t]["speaker"] == "sys"
                          and dialog[max(0, t - window):t][-1]["speaker"] == "usr"][:limit]
                items += [self._item(f"{split}/{d}:{t}", dialog, rec, f"{split}/{d}", t, window) for t in chosen]
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        if ctx.protocol == "paper":
            from ..data.extract import local_string, message_roles
            from ..data.methods import MethodError
            template = local_string(ES_PROMPTS, ctx.methods_root, "build_generation_prompt", "prompt")
            roles = message_roles(ES_CLASSIFY, ctx.methods_root, "run_generation")
            if template.fields != ["context"] or len(roles) != 1:
                raise MethodError(f"{template.source}: unexpected fields {template.fields} or roles {roles}")
            turns = _es_turns(item.input["context"], ctx)
            return [{"role": roles[0], "content": template.render({"context": "\n".join(turns) if turns else ""})}]
        return [{"role": "user", "content": render("reliability_support.j2", context=item.input["context"])}]

    def paper_gen_params(self, ctx: RunContext) -> dict[str, Any]:
        """run_generation sends temperature and max_tokens, which main.py passes from its CLI defaults."""
        from ..data.extract import call_keywords
        from ..data.methods import MethodError
        kw = call_keywords(ES_CLASSIFY, ctx.methods_root, "run_generation", "create")
        if {k: v for k, v in kw.items() if k not in ("model", "messages")} != \
                {"temperature": "temperature", "max_tokens": "max_tokens"}:
            raise MethodError(f"{ES_CLASSIFY}#run_generation: unexpected settings {kw}")
        args = _es_defaults(ctx)
        return {"temperature": args["temperature"], "max_tokens": args["max_tokens"]}

    def perturb(self, item: Item, edit: Callable[[str], str]) -> Item:
        context = [{**t, "text": edit(t["text"]) if t["speaker"] == "seeker" else t["text"]}
                   for t in item.input["context"]]
        return Item(item.id, {**item.input, "context": context}, item.target, dict(item.meta))

    def cluster(self, sample: Sample) -> str:
        return str(sample.item.meta["dialogue"])

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return PAPER_SUPPORT_RUBRICS if ctx.protocol == "paper" else self.rubrics

    def judgements(self, sample: Sample, reply: str, ctx: RunContext) -> dict[str, list[dict[str, str]]]:
        if ctx.protocol != "paper":
            return super().judgements(sample, reply, ctx)
        from ..data.extract import message_roles, module_constant
        from ..data.methods import MethodError
        metrics = module_constant(ES_SETTINGS, ctx.methods_root, "JUDGE_METRICS")
        templates = module_constant(ES_SETTINGS, ctx.methods_root, "JUDGE_PROMPT_TEMPLATES")
        roles = message_roles(ES_JUDGE, ctx.methods_root, "call_gpt4_for_evaluation")
        if [m.lower() for m in metrics] != list(SUPPORT_CRITERIA) or not all(m in templates for m in metrics) \
                or len(roles) != 1:
            raise MethodError(f"{ES_SETTINGS}: JUDGE_METRICS {metrics} are not the four criteria trustmh reads, "
                              f"or the judge sends roles {roles}")
        # convert_esconv_to_evaluation_format: the formatted context turns joined by newlines, then split
        # back at the last seeker line; the reference and the reply stripped, as the original stored them.
        context, user_input = es_context_split("\n".join(_es_turns(sample.item.input["context"], ctx)))
        values = {"Context": context, "User_input": user_input, "GT_Response": sample.item.target.strip(),
                  "Pred_Response": reply.strip()}
        return {m.lower(): [{"role": roles[0], "content": templates[m].format(**values)}] for m in metrics}

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        if ctx.protocol != "paper":
            return None
        from ..data.extract import call_keywords
        from ..data.methods import MethodError
        kw = call_keywords(ES_JUDGE, ctx.methods_root, "call_gpt4_for_evaluation", "create")
        params = {k: v for k, v in kw.items() if k not in ("model", "messages")}
        if any(isinstance(v, str) for v in params.values()):  # an expression: not a setting trustmh can read
            raise MethodError(f"{ES_JUDGE}#call_gpt4_for_evaluation: settings not literal: {params}")
        return params

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "user", "content": render("reliability_support_judge.j2", context=sample.item.input["context"],
                                                   reference=sample.item.target, reply=reply)}]

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged | Verdicts:
        reason = NO_RULES.format(what="fluency, professionalism, empathy and helpfulness")
        if ctx.protocol == "paper":
            return Verdicts({c: Judged(reason=reason) for c in SUPPORT_CRITERIA})
        return Judged(reason=reason)

    def score(self, sample: Sample, reply: str, judged: Verdicts | None, ctx: RunContext) -> Score:
        if ctx.protocol != "paper":
            return judge_scores({c: 5 for c in SUPPORT_CRITERIA}, judged, "overall", normalise=False)
        # The paper: each criterion its own call; a verdict without a score is dropped from that
        # criterion's mean (and counted), the others stand.
        sc = Score()
        for c in SUPPORT_CRITERIA:
            text = judge_text(sc, (judged or {}).get(c), [c])
            if text is None:
                continue
            v = es_judge_score(text)
            if v is None:
                judge_failure(sc, f"{c}: no score 0-5 in the judge reply", [c])
            else:
                sc.values[c] = v
        sc.parsed = {c: sc.values.get(c) for c in SUPPORT_CRITERIA}
        if all(c in sc.values for c in SUPPORT_CRITERIA):
            sc.values["overall"] = float(np.mean([sc.values[c] for c in SUPPORT_CRITERIA]))
        else:
            sc.unscored.setdefault("overall", "not all four criteria scored")
        return sc

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        out = {c: mean(table.col(c)) for c in SUPPORT_CRITERIA}
        if ctx.protocol == "paper":
            # Each criterion's mean over its own scored samples, as the original reports them; the paper's
            # single number is not in its code: the mean of the four is the natural reading (a guess).
            out["overall"] = float(np.mean([out[c] for c in SUPPORT_CRITERIA]))
            out["overall_all_four"] = mean(table.col("overall"))
        else:
            out["overall"] = mean(table.col("overall"))
        return out

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        out = {c: resamples.mean(table.col(c)) for c in SUPPORT_CRITERIA}
        if ctx.protocol == "paper":
            out["overall"] = np.mean([out[c] for c in SUPPORT_CRITERIA], axis=0)
            out["overall_all_four"] = resamples.mean(table.col("overall"))
        else:
            out["overall"] = resamples.mean(table.col("overall"))
        return out

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray:
        if ctx.protocol == "paper":
            return np.mean([resamples.mean(table.col(c)) for c in SUPPORT_CRITERIA], axis=0)
        return resamples.mean(table.col("overall"))


# --------------------------------------------------------------------------------------------------
# Psychological intervention: CPsyCounE

INTERVENTION_CRITERIA = {"comprehensiveness": 2, "professionalism": 3, "authenticity": 3, "safety": 1}
CLIENT, COUNSELLOR = "求助者", "支持者"
_SPEAKER = re.compile(rf"^\s*({CLIENT}|{COUNSELLOR})\s*[:：]\s*", re.DOTALL)


# CPsyCoun's notebook (PAPER_PROTOCOL.md §0.3 CP-gen, CP-judge; §2 reliability.intervention), read at run
# time under --protocol paper.
CP_NOTEBOOK = "CAS-SIAT-XinHai+CPsyCoun/Code/Turn_Based_Dialogue_Evaluation.ipynb"
PAPER_INTERVENTION_RUBRIC = Rubric("judge", role="llm", method=CP_NOTEBOOK)
_NUMBER_LIST = re.compile(r"\[\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*,"
                          r"\s*(-?\d+(?:\.\d+)?)\s*\]")


def cp_scores(text: str) -> dict[str, float] | None:
    """The notebook returns the judge's raw text (its parse is not written; cell 6 assumes four numbers).
    trustmh's rule: the last bracketed list of four numbers, each within its criterion's range; else None."""
    hits = _NUMBER_LIST.findall(text or "")
    if not hits:
        return None
    values = dict(zip(INTERVENTION_CRITERIA, map(float, hits[-1])))
    return values if all(0 <= v <= INTERVENTION_CRITERIA[c] for c, v in values.items()) else None


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


@register
class Intervention(Task):
    id = "reliability.intervention"
    evidence = "C"
    pillar = "reliability"
    title = "Psychological intervention: counsellor reply at every client turn (CPsyCounE, Chinese)"
    dataset = "cpsycoune"
    files: tuple[str, ...] = ()  # every cpsycoune/<topic>/<n>.json found; set by load() for the checksums
    metric = MetricSpec("overall", True, 0.0, 1.0,
                        "mean of the four judge criteria, each divided by its maximum; per dialogue, then "
                        "over dialogues")
    primary_value = "overall"
    metric_columns = {c: c for c in INTERVENTION_CRITERIA}
    rubrics = (Rubric("judge", ("reliability_intervention_judge.j2",)),)
    gen_params = {"max_tokens": 512}
    PATTERN = "cpsycoune/<topic>/<n>.json"
    paper_protocol = True
    method_templates = (MethodTemplate("CP-gen", CP_NOTEBOOK, "model_reply.user_message"),
                        MethodTemplate("CP-judge", CP_NOTEBOOK, "evaluate_reply.system_message"),
                        MethodTemplate("CP-judge-set", CP_NOTEBOOK, "evaluate_reply:ChatCompletion.create()"))

    def _dialogue_files(self, data: DataSource) -> list[str]:
        root = data.path("cpsycoune")
        if not root.is_dir():
            return []
        found = [p.relative_to(data.root).as_posix() for p in root.glob("*/*.json") if p.is_file()]
        # Numeric order inside a topic (2.json before 10.json) keeps item order natural.
        return sorted(found, key=lambda f: (f.split("/")[1], int(re.sub(r"\D", "", f.split("/")[2]) or 0), f))

    def missing_files(self, data: DataSource) -> list[str]:
        return [] if self._dialogue_files(data) else [self.PATTERN]

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        files = self._dialogue_files(data)
        self.files = tuple(files)
        items = []
        for rel in files:
            path = data.path(rel)
            turns = read_json(path)
            if not isinstance(turns, list) or not all(isinstance(u, str) for u in turns):
                raise DataError(path, "expected a JSON list of utterances")
            dialogue = rel.removeprefix("cpsycoune/").removesuffix(".json")
            if ctx.protocol == "paper":
                # Files in trustmh's sorted order (the notebook's os.listdir order is the file system's);
                # order changes no per-dialogue mean.
                items += [Item(f"{dialogue}:{i}", {"history_text": h}, meta={"dialogue": dialogue,
                                                                               "topic": dialogue.split("/")[0]})
                          for i, h in cp_turn_histories(turns)]
                continue
            history = []
            for i, u in enumerate(turns):
                m = _SPEAKER.match(u)
                if not m:
                    raise DataError(path, f"utterance {i} does not start with {CLIENT}： or {COUNSELLOR}：")
                speaker = "client" if m.group(1) == CLIENT else "counsellor"
                history.append({"speaker": speaker, "text": u[m.end():].strip()})
                if speaker == "client":
                    dialogue = rel.removeprefix("cpsycoune/").removesuffix(".json")
                    items.append(Item(f"{dialogue}:{i}", {"history": list(history)},
                                      meta={"dialogue": dialogue, "topic": dialogue.split("/")[0]}))
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        if ctx.protocol == "paper":
            from ..data.extract import notebook_local_string, notebook_message_roles
            from ..data.methods import MethodError
            template = notebook_local_string(CP_NOTEBOOK, ctx.methods_root, "model_reply", "user_message")
            roles = notebook_message_roles(CP_NOTEBOOK, ctx.methods_root, "model_reply")
            if template.fields != ["history"] or roles != [("user", "user_message")]:
                raise MethodError(f"{template.source}: unexpected fields {template.fields} or messages {roles}")
            return [{"role": "user", "content": template.render({"history": item.input["history_text"]})}]
        return [{"role": "user", "content": render("reliability_intervention.j2", history=item.input["history"],
                                                   client=CLIENT, counsellor=COUNSELLOR)}]

    def cluster(self, sample: Sample) -> str:
        return sample.item.meta["dialogue"]

    def paper_gen_params(self, ctx: RunContext) -> dict[str, Any]:
        """model_reply is a stub that leaves the model call to the user: no setting is known, none is sent."""
        return {}

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return (PAPER_INTERVENTION_RUBRIC,) if ctx.protocol == "paper" else self.rubrics

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        if ctx.protocol != "paper":
            return None
        from ..data.extract import notebook_call_keywords
        from ..data.methods import MethodError
        kw = notebook_call_keywords(CP_NOTEBOOK, ctx.methods_root, "evaluate_reply", "create")
        params = {k: v for k, v in kw.items() if k not in ("model", "messages")}
        if set(params) != {"temperature"} or not isinstance(params["temperature"], float):
            raise MethodError(f"{CP_NOTEBOOK}#evaluate_reply: unexpected settings {kw}")
        return params  # the notebook's gpt-4-turbo is not forced: the judge is the run's --judge

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        if ctx.protocol == "paper":
            from ..data.extract import notebook_local_string, notebook_message_roles
            from ..data.methods import MethodError
            template = notebook_local_string(CP_NOTEBOOK, ctx.methods_root, "evaluate_reply", "system_message")
            roles = notebook_message_roles(CP_NOTEBOOK, ctx.methods_root, "evaluate_reply")
            if template.fields != ["history"] or roles != [("system", "system_message"), ("user", "reply")]:
                raise MethodError(f"{template.source}: unexpected fields {template.fields} or messages {roles}")
            return [{"role": "system", "content": template.render({"history": sample.item.input["history_text"]})},
                    {"role": "user", "content": reply}]
        return [{"role": "user", "content": render("reliability_intervention_judge.j2",
                                                   history=sample.item.input["history"], reply=reply,
                                                   client=CLIENT, counsellor=COUNSELLOR)}]

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged:
        return Judged(reason=NO_RULES.format(what="comprehensiveness, professionalism, authenticity and safety"))

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        if ctx.protocol != "paper":
            return judge_scores(INTERVENTION_CRITERIA, judged, "overall", normalise=True)
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

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        if ctx.protocol == "paper":
            # write_evaluation_results: per dialogue, each criterion's mean over its turns rounded to 2
            # decimals; then (unknown in the original) the plain mean over dialogues. `overall` is trustmh's
            # combination (each criterion divided by its maximum), the paper's single number being unknown.
            out = {c: _rounded_dialogue_mean(table.col(c), table.clusters) for c in INTERVENTION_CRITERIA}
            out["overall"] = float(np.mean([out[c] / m for c, m in INTERVENTION_CRITERIA.items()]))
            return out
        out = {"overall": cluster_mean(table.col("overall"), table.clusters)}
        out.update({c: cluster_mean(table.col(c), table.clusters) for c in INTERVENTION_CRITERIA})
        return out

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray] | None:
        if ctx.protocol == "paper":  # the paper's rounded per-dialogue means: computed per resample
            return None
        return {c: cluster_mean_many(table.col(c), resamples) for c in ("overall", *INTERVENTION_CRITERIA)}


def _rounded_dialogue_mean(values: np.ndarray, clusters: np.ndarray) -> float:
    """Mean over dialogues of each dialogue's mean rounded to 2 decimals (as the notebook writes it)."""
    ok = ~np.isnan(values)
    if not ok.any():
        return float("nan")
    names = clusters[ok].astype(str)
    means = [round(float(np.mean(values[ok][names == d])), 2) for d in np.unique(names)]
    return float(np.mean(means))
