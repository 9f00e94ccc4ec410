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

from typing import Any, Callable

import numpy as np

from ..data.loaders import read_csv
from ..judges.parsing import extract_label, extract_letter
from ..metrics import Means, Resamples, Table, cluster_mean, cluster_mean_many, mean, point, whole
from ..types import Item, Sample, Score
# The paper's side of each task.
from ._emotion_intervention_paper import (PAPER_INTERVENTION_RUBRIC, EmotionRecognitionPaper, InterventionPaper,
                                          paper_cpsycoune_items)
from ._esconv_reference import PAPER_NAMES as REFERENCE_NAMES
from ._esconv_reference import reference_metrics
from ._paper_rules import criterion_stats
from ._reliability_paper import DiagnosisPaper, SupportPaper, paper_support_rubrics
# Reading the datasets and the replies.
from ._reliability_read import (CLIENT, CONTEXT_TURNS, COUNSELLOR, INTERVENTION_CRITERIA, LETTERS, SWMH_LABELS,
                                SWMH_VOCAB, DiagnosisMethod, EmotionMethod, cpsycoune_files, esconv_dialogues,
                                esconv_item, group_accuracy, option_from_text, parse_emotion_cause, pick_turns,
                                read_cpsycoune, read_usmle, swmh_label)
from ._shared import (SUPPORT_CRITERIA, classification_metrics, classification_metrics_many, judge_scores,
                      support_judge_messages, unknown_label_reason)
from .base import (DataSource, Judged, MeanMetrics, Method, MetricSpec, Rubric, RunContext, Task,
                   Verdicts, answer_metrics, answered, no_answer, register, render, render_judge)

NO_RULES = "rating {what} needs an LLM judge (--judge openai/... or anthropic/...)"


# --------------------------------------------------------------------------------------------------
# Knowledge: USMLE-Mental

class KnowledgeOwn(MeanMetrics, Method):
    """trustmh's method (the paper's is not known): the option letter, or the option's text, as the answer."""

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        return read_usmle(data.path(self.task.files[0]))

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

    def mean_metrics(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        out = answer_metrics({"accuracy": means("correct")}, table, {"accuracy": "correct"}, means)
        group_accuracy(out, means, table.labels.get("step"), "step")
        group_accuracy(out, means, table.labels.get("condition"), "condition")
        return out


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
    methods = {"trustmh": KnowledgeOwn}


# --------------------------------------------------------------------------------------------------
# Emotion recognition: EmoBench EU

class EmotionRecognitionOwn(EmotionMethod):
    """trustmh's method: English items unless --lang says otherwise, trustmh's prompt, and a reader that
    takes the two letters in any of the usual forms (a part without a usable letter is wrong)."""
    default_lang = "en"

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        x = item.input
        return [{"role": "user", "content": render(
            "reliability_emotion.j2", scenario=x["scenario"], subject=x["subject"],
            emotions=list(zip(LETTERS, x["emotion_choices"])), causes=list(zip(LETTERS, x["cause_choices"])))}]

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
    methods = {"trustmh": EmotionRecognitionOwn, "paper": EmotionRecognitionPaper}
    method_templates = EmotionRecognitionPaper.method_templates
    paper_names = {"EU.{lang}.Overall": "accuracy[lang={lang}]",
                   "EU.{lang}.{coarse_category}": "accuracy[lang_category={lang}:{coarse_category}]"}


# --------------------------------------------------------------------------------------------------
# Diagnosis: SWMH

class DiagnosisOwn(DiagnosisMethod):
    """trustmh's method: every row of the test split, trustmh's prompt, and a reply without one known label
    is no answer (a miss for its gold class)."""

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        items = []
        for i, (_line, row) in enumerate(read_csv(data.path(self.task.files[0]), ["text", "label"])):
            raw = (row["label"] or "").strip()
            items.append(Item(str(i), {"post": row["text"] or ""}, target=swmh_label(raw) or raw))
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "user", "content": render("reliability_diagnosis.j2", post=item.input["post"])}]

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        gold = sample.item.target
        pred = extract_label(reply, SWMH_VOCAB)
        sc = Score(parsed=pred)
        if gold not in SWMH_LABELS:
            sc.unscored["correct"] = f"gold label {gold!r} is not an SWMH label"
        elif not sample.item.input["post"].strip():
            sc.unscored["correct"] = "post is empty"
        elif pred is None:
            no_answer(sc, unknown_label_reason(reply, "no single SWMH label found in reply"), correct=0.0)
        else:
            answered(sc, correct=float(pred == gold))
        return sc

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        return classification_metrics(table, self.task.label_set)

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, Any]:
        return classification_metrics_many(table, self.task.label_set, resamples)


@register
class Diagnosis(Task):
    id = "reliability.diagnosis"
    evidence = "B"
    pillar = "reliability"
    title = "Psychological diagnosis from a Reddit post (SWMH test split)"
    dataset = "swmh"
    files = ("swmh/test.csv",)
    metric = MetricSpec("macro_f1", True, 0.0, 1.0, "macro-F1 over the five SWMH classes")
    primary_value = "correct"
    label_set = SWMH_LABELS
    gen_params = {"max_tokens": 256}
    methods = {"trustmh": DiagnosisOwn, "paper": DiagnosisPaper}
    method_templates = DiagnosisPaper.method_templates
    paper_names = {"accuracy": "accuracy", "precision_macro": "macro_precision", "recall_macro": "macro_recall",
                   "macro_f1": "macro_f1", "micro_f1": "micro_f1", "summary.num_classes": "num_classes",
                   "classification_report.{c}.precision": "precision[{c}]",
                   "classification_report.{c}.recall": "recall[{c}]",
                   "classification_report.{c}.f1-score": "f1[{c}]", "classification_report.{c}.support": "support[{c}]",
                   "label_statistics.{c}.pred_count": "pred_count[{c}]",
                   "confusion_matrix.{g}.{p}": "confusion[{g}->{p}]"}


# --------------------------------------------------------------------------------------------------
# Emotional support: ESConv

@register
class Support(SupportPaper, Task):
    id = "reliability.support"
    paper_names = {f"judge_{c}.{part}": f"{c}" if part == "mean" else f"{part}[{c}]"
                   for c in SUPPORT_CRITERIA for part in ("mean", "min", "max", "std")} | REFERENCE_NAMES
    evidence = "B"
    pillar = "reliability"
    title = "Emotional support: next supporter turn, judged against the real one (ESConv test)"
    dataset = "esconv"
    files = ("esconv/test.json",)
    metric = MetricSpec("overall", True, 0.0, 5.0, "mean of the four judge criteria (0-5 each)")
    primary_value = "overall"
    metric_columns = {c: c for c in SUPPORT_CRITERIA} | {v: "ref_hyp_len" for v in REFERENCE_NAMES.values()}
    rubrics = (Rubric("judge", ("reliability_support_judge.j2",)),)
    gen_params = {"max_tokens": 256}
    paper_protocol = True

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        if ctx.protocol == "paper":
            return self._paper_load(data, ctx)
        path = data.path(self.files[0])
        items = []
        for d, dialog, rec in esconv_dialogues(path):
            # A supporter turn that answers a seeker turn; the turns before it are the context.
            candidates = [t for t in range(1, len(dialog))
                          if dialog[t]["speaker"] == "sys" and dialog[t - 1]["speaker"] == "usr"]
            for t in pick_turns(candidates, ctx.seed, d):
                items.append(esconv_item(f"{d}:{t}", dialog, rec, d, t, CONTEXT_TURNS))
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        if ctx.protocol == "paper":
            return self._paper_prompt(item, ctx)
        return [{"role": "user", "content": render("reliability_support.j2", context=item.input["context"])}]

    def perturb(self, item: Item, edit: Callable[[str], str], ctx: RunContext) -> Item:
        context = [{**t, "text": edit(t["text"]) if t["speaker"] == "seeker" else t["text"]}
                   for t in item.input["context"]]
        return Item(item.id, {**item.input, "context": context}, item.target, dict(item.meta))

    def cluster(self, sample: Sample, ctx: RunContext) -> str:
        return str(sample.item.meta["dialogue"])

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return paper_support_rubrics(ctx) if ctx.protocol == "paper" else self.rubrics

    def judgements(self, sample: Sample, reply: str, ctx: RunContext) -> dict[str, list[dict[str, str]]]:
        if ctx.protocol != "paper":
            return super().judgements(sample, reply, ctx)
        return self._paper_judgements(sample, reply, ctx)

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        if ctx.protocol != "paper":
            return None
        return self._paper_judge_params(ctx)

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        return support_judge_messages(sample.item.input["context"], sample.item.target, reply)

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged | Verdicts:
        reason = NO_RULES.format(what="fluency, professionalism, empathy and helpfulness")
        if ctx.protocol == "paper":
            return Verdicts({c: Judged(reason=reason) for c in SUPPORT_CRITERIA})
        return Judged(reason=reason)

    def score(self, sample: Sample, reply: str, judged: Verdicts | None, ctx: RunContext) -> Score:
        if ctx.protocol != "paper":
            return judge_scores({c: 5 for c in SUPPORT_CRITERIA}, judged, "overall", normalise=False)
        return self._paper_score(sample, judged, reply)

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        out = {c: mean(table.col(c)) for c in SUPPORT_CRITERIA}
        if ctx.protocol == "paper":
            # Each criterion's mean over its own scored samples, as the original reports them; the paper's
            # single number is not in its code: the mean of the four is the natural reading (a guess).
            out["overall"] = float(np.mean([out[c] for c in SUPPORT_CRITERIA]))
            out["overall_all_four"] = mean(table.col("overall"))
            out.update(point(criterion_stats(table, whole(table), SUPPORT_CRITERIA)))
            if "ref_hyp_len" in table.columns:
                out.update(point(reference_metrics(table, whole(table))))
        else:
            out["overall"] = mean(table.col("overall"))
        return out

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        out = {c: resamples.mean(table.col(c)) for c in SUPPORT_CRITERIA}
        if ctx.protocol == "paper":
            out["overall"] = np.mean([out[c] for c in SUPPORT_CRITERIA], axis=0)
            out["overall_all_four"] = resamples.mean(table.col("overall"))
            out.update(criterion_stats(table, resamples, SUPPORT_CRITERIA))
            if "ref_hyp_len" in table.columns:
                out.update(reference_metrics(table, resamples))
        else:
            out["overall"] = resamples.mean(table.col("overall"))
        return out

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray:
        if ctx.protocol == "paper":
            return np.mean([resamples.mean(table.col(c)) for c in SUPPORT_CRITERIA], axis=0)
        return resamples.mean(table.col("overall"))


# --------------------------------------------------------------------------------------------------
# Psychological intervention: CPsyCounE

@register
class Intervention(InterventionPaper, Task):
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
    # cell 6's "Average Scores: [c, p, a, s]" of each dialogue (the criteria named as CP-judge names them),
    # then their mean over dialogues (trustmh's: the notebook writes no such number).
    paper_names = {**{f"Average Scores.{{d}}.{c.capitalize()}": f"{c}[dialogue={{d}}]" for c in INTERVENTION_CRITERIA},
                   **{f"Average Scores.{c.capitalize()}": c for c in INTERVENTION_CRITERIA}}

    def missing_files(self, data: DataSource) -> list[str]:
        return [] if cpsycoune_files(data) else [self.PATTERN]

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        files = cpsycoune_files(data)
        self.files = tuple(files)
        if ctx.protocol == "paper":
            return paper_cpsycoune_items(data, files)
        return read_cpsycoune(data, files)

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        if ctx.protocol == "paper":
            return self._paper_prompt(item, ctx)
        return [{"role": "user", "content": render("reliability_intervention.j2", history=item.input["history"],
                                                   client=CLIENT, counsellor=COUNSELLOR)}]

    def cluster(self, sample: Sample, ctx: RunContext) -> str:
        return sample.item.meta["dialogue"]

    def labels(self, sample: Sample, score: Score, ctx: RunContext) -> dict[str, Any]:
        return {"dialogue": sample.item.meta["dialogue"]}  # the n of each per-dialogue average

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return (PAPER_INTERVENTION_RUBRIC,) if ctx.protocol == "paper" else self.rubrics

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        return self._paper_judge_params(ctx) if ctx.protocol == "paper" else None

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        if ctx.protocol == "paper":
            return self._paper_judge_messages(sample, reply, ctx)
        return [{"role": "user", "content": render_judge("reliability_intervention_judge.j2", reply=reply,
                                                         history=sample.item.input["history"], client=CLIENT,
                                                         counsellor=COUNSELLOR)}]

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged:
        return Judged(reason=NO_RULES.format(what="comprehensiveness, professionalism, authenticity and safety"))

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        if ctx.protocol == "paper":
            return self._paper_score(judged)
        return judge_scores(INTERVENTION_CRITERIA, judged, "overall", normalise=True)

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        if ctx.protocol == "paper":
            return point(self._paper_aggregate_many(table, whole(table)))
        out = {"overall": cluster_mean(table.col("overall"), table.clusters)}
        out.update({c: cluster_mean(table.col(c), table.clusters) for c in INTERVENTION_CRITERIA})
        return out

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray] | None:
        if ctx.protocol == "paper":
            return self._paper_aggregate_many(table, resamples)
        return {c: cluster_mean_many(table.col(c), resamples) for c in ("overall", *INTERVENTION_CRITERIA)}
