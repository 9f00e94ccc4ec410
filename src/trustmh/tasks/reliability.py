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

import random
import re
from typing import Any, Callable

import numpy as np

from ..data.loaders import read_csv, read_json, read_jsonl
from ..errors import DataError, UserError
from ..judges.parsing import (after_last_answer_tag, extract_json_object, extract_label, extract_letter,
                              strip_markdown)
from ..metrics import Means, Resamples, Table, cluster_mean, group_mask, mean
from ..types import Item, Sample, Score
# The paper's side of diagnosis and support (the readers are re-exported: tests import them here).
from ._reliability_paper import (PAPER_SUPPORT_RUBRICS, PAPER_SWMH, DiagnosisPaper, SupportPaper,  # noqa: F401
                                 es_context_split, es_judge_score, paper_swmh_label, paper_swmh_prediction)
from ._shared import (SUPPORT_CRITERIA, LabelledTask, class_f1, classification_metrics, judge_scores,
                      unknown_label_reason)
from .base import (NO_ANSWER, DataSource, Judged, MetricSpec, Rubric, RunContext, Task, Verdicts,
                   answer_metrics, answered, no_answer, register, render)

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
        return [{"role": "user", "content": render(
            "reliability_emotion.j2", scenario=x["scenario"], subject=x["subject"],
            emotions=list(zip(LETTERS, x["emotion_choices"])), causes=list(zip(LETTERS, x["cause_choices"])))}]

    def choices(self, item: Item) -> tuple[str, ...]:
        # Every (emotion, cause) pair in the 'Answer: B/C' form the parser accepts, for the baselines.
        return tuple(f"{e}/{c}" for e in LETTERS[:len(item.input["emotion_choices"])]
                     for c in LETTERS[:len(item.input["cause_choices"])])

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
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


@register
class Diagnosis(DiagnosisPaper, LabelledTask):
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
            return self._paper_prompt(item, ctx)
        return [{"role": "user", "content": render("reliability_diagnosis.j2", post=item.input["post"])}]

    def choices(self, item: Item) -> tuple[str, ...]:
        return ("SuicideWatch", "depression", "Anxiety", "bipolar", "offmychest")

    def perturb(self, item: Item, edit: Callable[[str], str]) -> Item:
        return Item(item.id, {**item.input, "post": edit(item.input["post"])}, item.target, dict(item.meta))

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        gold = sample.item.target
        if ctx.protocol == "paper":
            return self._paper_score(sample, reply)
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


# --------------------------------------------------------------------------------------------------
# Emotional support: ESConv

CONTEXT_TURNS = 6
TURNS_PER_DIALOGUE = 2


def pick_turns(candidates: list[int], seed: int, dialogue: int, k: int = TURNS_PER_DIALOGUE) -> list[int]:
    """At most k supporter turns of one dialogue, the same for a given (seed, dialogue) on every machine."""
    rng = random.Random(f"{seed}:{dialogue}")
    return sorted(rng.sample(candidates, min(k, len(candidates))))


@register
class Support(SupportPaper, Task):
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

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        if ctx.protocol == "paper":
            return self._paper_prompt(item, ctx)
        return [{"role": "user", "content": render("reliability_support.j2", context=item.input["context"])}]

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
        return self._paper_judgements(sample, reply, ctx)

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        if ctx.protocol != "paper":
            return None
        return self._paper_judge_params(ctx)

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
        return self._paper_score(sample, judged)

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

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray:
        if ctx.protocol == "paper":
            return np.mean([resamples.mean(table.col(c)) for c in SUPPORT_CRITERIA], axis=0)
        return resamples.mean(table.col("overall"))


# --------------------------------------------------------------------------------------------------
# Psychological intervention: CPsyCounE

INTERVENTION_CRITERIA = {"comprehensiveness": 2, "professionalism": 3, "authenticity": 3, "safety": 1}
CLIENT, COUNSELLOR = "求助者", "支持者"
_SPEAKER = re.compile(rf"^\s*({CLIENT}|{COUNSELLOR})\s*[:：]\s*", re.DOTALL)


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
        return [{"role": "user", "content": render("reliability_intervention.j2", history=item.input["history"],
                                                   client=CLIENT, counsellor=COUNSELLOR)}]

    def cluster(self, sample: Sample) -> str:
        return sample.item.meta["dialogue"]

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "user", "content": render("reliability_intervention_judge.j2",
                                                   history=sample.item.input["history"], reply=reply,
                                                   client=CLIENT, counsellor=COUNSELLOR)}]

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged:
        return Judged(reason=NO_RULES.format(what="comprehensiveness, professionalism, authenticity and safety"))

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        return judge_scores(INTERVENTION_CRITERIA, judged, "overall", normalise=True)

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        out = {"overall": cluster_mean(table.col("overall"), table.clusters)}
        out.update({c: cluster_mean(table.col(c), table.clusters) for c in INTERVENTION_CRITERIA})
        return out

