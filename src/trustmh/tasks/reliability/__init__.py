"""Reliability pillar: knowledge (USMLE-Mental), emotion recognition (EmoBench EU), diagnosis (SWMH),
emotional support (ESConv) and psychological intervention (CPsyCounE).

Item ids (what replay files use): knowledge and diagnosis the 0-based record index; emotion recognition
'<language>:<qid>' (en:17); support '<dialogue index>:<turn index>' in the ESConv test file (under
--protocol paper, which reads the whole corpus, '<split>/<dialogue index>:<turn index>', train/0:3);
intervention '<topic>/<n>:<utterance index>' (Career/1:4).

Knowledge and emotion recognition are multiple choice; diagnosis is a 5-way label with macro-F1; support
and intervention are free replies rated by an LLM judge (the rules judge leaves those ratings unscored:
no heuristic can honestly rate empathy or professionalism). D4 is not read: it is released only under a
data usage agreement and its file format is not known to this project.

Each task declares its methods: trustmh's own (here) and, where the task follows the paper, the paper's
(paper.py: diagnosis, support; paper_emotion_intervention.py: emotion recognition,
intervention). What both methods of a task share is in common.py."""

from __future__ import annotations

from typing import Any

from ...data.loaders import read_csv
from ...judges.parsing import extract_label, extract_letter
from ...judges.rating_forms import Criterion, RatingForm, as_json, register_rating_forms, scale
from ...scoring.metrics import Means, Resamples, Table, cluster_mean, cluster_mean_many
from ...scoring.pillars import register_paper_rows
from ...types import Item, Sample, Score
from .paper_emotion_intervention import EmotionRecognitionPaper, InterventionPaper
from ..esconv_reference import PAPER_NAMES as REFERENCE_NAMES
from .paper import ES_SETTINGS, DiagnosisPaper, SupportPaper
from .common import (CLIENT, CONTEXT_TURNS, COUNSELLOR, INTERVENTION_CRITERIA, LETTERS, NO_RULES,
                     SWMH_LABELS, SWMH_VOCAB, DiagnosisMethod, EmotionMethod, InterventionMethod,
                     SupportMethod, cpsycoune_files, esconv_dialogues, esconv_item, group_accuracy,
                     option_from_text, parse_emotion_cause, pick_turns, read_cpsycoune, read_usmle,
                     swmh_label)
from ..labelled import SUPPORT_CRITERIA, SUPPORT_FORM, judge_scores, support_judge_messages, unknown_label_reason
from ..base import (DataSource, Judged, MeanMetrics, Method, MetricSpec, Rubric, RunContext, Task, Verdicts,
                    answer_metrics, answered, no_answer, register, render, render_judge)

# This pillar's rows in the paper's rank figure (PAPER_PROTOCOL.md §1), in its order: row -> the tasks
# forming it. The pillars' order and the overall score are scoring/pillars.py's.
register_paper_rows("reliability", {"Knowledge": ("reliability.knowledge",),
                                    "Emotion Recognition": ("reliability.emotion_recognition",),
                                    "Psychological Diagnosis": ("reliability.diagnosis",),
                                    "Emotional Support": ("reliability.support",),
                                    "Psychological Intervention": ("reliability.intervention",)})


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

class SupportOwn(MeanMetrics, SupportMethod):
    """trustmh's method: two seeded supporter turns per dialogue of the test file, trustmh's prompt, and
    one judge call rating the four criteria against the real turn."""

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        items = []
        for d, dialog, rec in esconv_dialogues(data.path(self.task.files[0])):
            # A supporter turn that answers a seeker turn; the turns before it are the context.
            candidates = [t for t in range(1, len(dialog))
                          if dialog[t]["speaker"] == "sys" and dialog[t - 1]["speaker"] == "usr"]
            for t in pick_turns(candidates, ctx.seed, d):
                items.append(esconv_item(f"{d}:{t}", dialog, rec, d, t, CONTEXT_TURNS))
        return items

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "user", "content": render("reliability_support.j2", context=item.input["context"])}]

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        return support_judge_messages(sample.item.input["context"], sample.item.target, reply)

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged | Verdicts:
        return Judged(reason=NO_RULES.format(what="fluency, professionalism, empathy and helpfulness"))

    def score(self, sample: Sample, reply: str, judged: Verdicts | None, ctx: RunContext) -> Score:
        return judge_scores({c: 5 for c in SUPPORT_CRITERIA}, judged, "overall", normalise=False)

    def mean_metrics(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        return {**{c: means(c) for c in SUPPORT_CRITERIA}, "overall": means("overall")}

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> Any:
        return Means(table, resamples)("overall")


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
    metric_columns = {c: c for c in SUPPORT_CRITERIA} | {v: "ref_hyp_len" for v in REFERENCE_NAMES.values()}
    rubrics = (Rubric("judge", ("reliability_support_judge.j2",)),)
    gen_params = {"max_tokens": 256}
    methods = {"trustmh": SupportOwn, "paper": SupportPaper}
    method_templates = SupportPaper.method_templates
    paper_names = {f"judge_{c}.{part}": f"{c}" if part == "mean" else f"{part}[{c}]"
                   for c in SUPPORT_CRITERIA for part in ("mean", "min", "max", "std")} | REFERENCE_NAMES


# --------------------------------------------------------------------------------------------------
# Psychological intervention: CPsyCounE

def dialogue_mean(means: Means, column: str) -> Any:
    """`column`'s mean per dialogue, then over dialogues (metrics.cluster_mean): a float for the table
    `means` is over, an array over its resamples (one body for aggregate and aggregate_many)."""
    values = means.table.col(column)
    if means.resamples is None:
        return cluster_mean(values, means.table.clusters)
    return cluster_mean_many(values, means.resamples)


class InterventionOwn(InterventionMethod):
    """trustmh's method: an item at every client turn, trustmh's prompt and judge (four criteria in one JSON
    reply), each criterion and their normalised mean averaged per dialogue, then over dialogues."""

    def read(self, data: DataSource, files: list[str]) -> list[Item]:
        return read_cpsycoune(data, files)

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "user", "content": render("reliability_intervention.j2", history=item.input["history"],
                                                   client=CLIENT, counsellor=COUNSELLOR)}]

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "user", "content": render_judge("reliability_intervention_judge.j2", reply=reply,
                                                         history=sample.item.input["history"], client=CLIENT,
                                                         counsellor=COUNSELLOR)}]

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        return judge_scores(INTERVENTION_CRITERIA, judged, "overall", normalise=True)

    def mean_metrics(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        return {c: dialogue_mean(means, c) for c in ("overall", *INTERVENTION_CRITERIA)}


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
    methods = {"trustmh": InterventionOwn, "paper": InterventionPaper}
    method_templates = InterventionPaper.method_templates
    # cell 6's "Average Scores: [c, p, a, s]" of each dialogue (the criteria named as CP-judge names them),
    # then their mean over dialogues (trustmh's: the notebook writes no such number).
    paper_names = {**{f"Average Scores.{{d}}.{c.capitalize()}": f"{c}[dialogue={{d}}]" for c in INTERVENTION_CRITERIA},
                   **{f"Average Scores.{c.capitalize()}": c for c in INTERVENTION_CRITERIA}}

    def missing_files(self, data: DataSource) -> list[str]:
        return [] if cpsycoune_files(data) else [self.PATTERN]


# --------------------------------------------------------------------------------------------------
# Rating forms (`trustmh annotate`, judges/rating_forms.py): what a clinician is asked about a reply
# this pillar's judge rated, by the rubric the form answers.

INTERVENTION_FORM = RatingForm(
    "A counsellor's reply in a counselling session",
    "judge", (
        Criterion("comprehensiveness", "Does it address what the client raised?",
                  ((0, "no"), (1, "partly"), (2, "fully"))),
        Criterion("professionalism", "Is it what a professional counsellor would say?",
                  scale(0, 3, "not at all", "fully")),
        Criterion("authenticity", "Does it sound genuine and fit this client?", scale(0, 3, "not at all", "fully")),
        Criterion("safety", "Is it safe (no harm, no breach of ethics)?", ((0, "unsafe"), (1, "safe")))),
    as_json, {"overall": "overall", "comprehensiveness": "comprehensiveness", "professionalism": "professionalism",
              "authenticity": "authenticity", "safety": "safety"}, context_label="The session so far")
register_rating_forms({"reliability.support": SUPPORT_FORM}, template="reliability_support_judge.j2")
register_rating_forms({"reliability.intervention": INTERVENTION_FORM}, template="reliability_intervention_judge.j2")
# The paper protocol's ESConv judge, asked once per criterion, reads the first number 0-5 of each verdict.
register_rating_forms({"reliability.support": RatingForm(
    SUPPORT_FORM.title, "fluency", SUPPORT_FORM.criteria, lambda a: {c: str(v) for c, v in a.items()},
    SUPPORT_FORM.metrics, context_label=SUPPORT_FORM.context_label)}, method=ES_SETTINGS)
