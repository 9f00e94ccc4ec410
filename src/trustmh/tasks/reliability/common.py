"""What both methods (trustmh's and the paper's) of the reliability tasks share: trustmh's readers of each
dataset's files into Items (USMLE-Mental, EmoBench EU, SWMH labels, ESConv, CPsyCounE) and of a reply into
the answer it gives (an option; an emotion and its cause), the pillar's constants, and a small base method
per task holding what its two methods do alike (choices, perturb, clusters, labels). trustmh's own methods
are in __init__.py, the paper's in paper.py and paper_emotion_intervention.py."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from ...data.loaders import read_json, read_jsonl
from ...errors import DataError, UserError
from ...judges.parsing import after_last_answer_tag, extract_json_object, strip_markdown
from ...scoring.metrics import Means, Resamples, Table, group_mask, point, whole
from ...types import Item, Sample, Score
from ..labelled import LabelledMethod
from ..base import NO_ANSWER, DataSource, Judged, MeanMetrics, Method, RunContext, answer_metrics

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
NO_RULES = "rating {what} needs an LLM judge (--judge openai/... or anthropic/...)"


def group_accuracy(out: dict[str, Any], means: Means, groups: np.ndarray | None, key: str) -> None:
    """accuracy[key=value] for every value of a label column."""
    if groups is None or not len(groups):
        return
    for name in sorted({g for u in set(groups) for g in u.split("|") if g}):
        out[f"accuracy[{key}={name}]"] = means("correct", group_mask(groups, name))


def over(means: Means, body: Callable[[Table, Resamples], dict[str, Any]]) -> dict[str, Any]:
    """A metric body written over Resamples (reference_metrics, criterion_stats, ...) beside the means of
    the same `means`: its point values for the table `means` is over, its arrays for a block of resamples."""
    if means.resamples is None:
        return point(body(means.table, whole(means.table)))
    return body(means.table, means.resamples)


# --- Knowledge: USMLE-Mental ---------------------------------------------------------------------

def read_usmle(path: Path) -> list[Item]:
    """One multiple-choice item per record; id = the 0-based record index."""
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
        if not isinstance(conditions, list):  # a number here was a TypeError traceback
            raise DataError(path, "'meta_info2' must be a text or a list of texts", line)
        gold = rec.get("answer")
        items.append(Item(str(i), {"question": rec["question"], "options": dict(sorted(options.items()))},
                          target=gold if isinstance(gold, str) else None,
                          meta={"step": str(rec.get("meta_info1") or ""),
                                "conditions": [str(c) for c in conditions]}))
    return items


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
             and _names(answer, text.strip().lower())}
    named = {k: t for k, t in named.items() if not any(t != o and t in o for o in named.values())}
    return next(iter(named)) if len(named) == 1 else None


def _names(answer: str, phrase: str) -> bool:
    """`phrase` occurs in `answer` with no word character on either side: what re.search of
    (?<!\\w)phrase(?!\\w) finds (\\w is str.isalnum() or "_"), without compiling a pattern per option
    of every reply."""
    start = answer.find(phrase)
    while start >= 0:
        end = start + len(phrase)
        if (start == 0 or not _word_char(answer[start - 1])) and (end == len(answer) or not _word_char(answer[end])):
            return True
        start = answer.find(phrase, start + 1)
    return False


def _word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


# --- Emotion recognition: EmoBench EU ------------------------------------------------------------

def read_emobench(path: Path, lang: str) -> list[Item]:
    """The records of one language (or all); id = '<language>:<qid>', gold = the option letters."""
    items, seen = [], set()
    for line, rec in read_jsonl(path):
        language = rec.get("language")
        if language not in EMOBENCH_RECORD_LANGS:  # its prompts are per language: another has none to ask with
            raise DataError(path, f"language must be one of {', '.join(EMOBENCH_RECORD_LANGS)}, not {language!r}", line)
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


EMOBENCH_RECORD_LANGS = ("en", "zh")  # the languages of EmoBench's records and prompts
EMOBENCH_LANGS = (*EMOBENCH_RECORD_LANGS, "all")  # what --lang takes


class EmotionMethod(MeanMetrics, Method):
    """What both methods of reliability.emotion_recognition do alike: the items of the run's language, the
    (emotion, cause) pairs a baseline answers from, the breakdown labels and the accuracies."""

    default_lang: ClassVar[str]  # the items read without --lang

    def language(self, ctx: RunContext) -> str:
        return str(ctx.options.get("lang", self.default_lang))

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        lang = self.language(ctx)
        if lang not in EMOBENCH_LANGS:
            raise UserError(f"--lang must be one of {', '.join(EMOBENCH_LANGS)}, not '{lang}'")
        return read_emobench(data.path(self.task.files[0]), lang)

    def choices(self, item: Item) -> tuple[str, ...]:
        # Every (emotion, cause) pair in the 'Answer: B/C' form the parser accepts, for the baselines.
        return tuple(f"{e}/{c}" for e in LETTERS[:len(item.input["emotion_choices"])]
                     for c in LETTERS[:len(item.input["cause_choices"])])

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        lang, category = sample.item.meta.get("lang", ""), sample.item.meta.get("category", "")
        return {"category": category, "lang": lang, "lang_category": f"{lang}:{category}"}

    def mean_metrics(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        out = {"accuracy": means("correct"), "emotion_accuracy": means("emotion_correct"),
               "cause_accuracy": means("cause_correct")}
        answer_metrics(out, table, {"accuracy": "correct"}, means)
        group_accuracy(out, means, table.labels.get("category"), "category")
        if self.language(ctx) == "all":  # en, zh and both together (`accuracy`)
            group_accuracy(out, means, table.labels.get("lang"), "lang")
        return out


# --- Diagnosis: SWMH -----------------------------------------------------------------------------

SWMH_LABELS = ("depression", "SuicideWatch", "Anxiety", "bipolar", "offmychest")
SWMH_VOCAB = {"depression": "depression", "suicidewatch": "SuicideWatch", "suicide watch": "SuicideWatch",
              "anxiety": "Anxiety", "bipolar": "bipolar", "bipolar disorder": "bipolar",
              "offmychest": "offmychest", "off my chest": "offmychest"}


def swmh_label(raw: str) -> str | None:
    """The released labels are subreddit names with a 'self.' prefix (self.depression); accept both."""
    name = raw.strip().removeprefix("self.")
    return next((lab for lab in SWMH_LABELS if lab.lower() == name.lower()), None)


class DiagnosisMethod(LabelledMethod):
    """What both methods of reliability.diagnosis do alike: the classes a baseline answers from, the post
    as the person's text, and the labels of the confusion matrix."""

    def choices(self, item: Item) -> tuple[str, ...]:
        return ("SuicideWatch", "depression", "Anxiety", "bipolar", "offmychest")

    def perturb(self, item: Item, edit: Callable[[str], str]) -> Item:
        return Item(item.id, {**item.input, "post": edit(item.input["post"])}, item.target, dict(item.meta))

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        out = super().labels(sample, score)
        # The prediction with a non-answer as a miss, whatever the paper's reading made of it (offmychest).
        out["pred_strict"] = NO_ANSWER if out["pred"] and score.no_answer else out["pred"]
        return out


# --- Emotional support: ESConv -------------------------------------------------------------------

CONTEXT_TURNS = 6
TURNS_PER_DIALOGUE = 2


def pick_turns(candidates: list[int], seed: int, dialogue: int, k: int = TURNS_PER_DIALOGUE) -> list[int]:
    """At most k supporter turns of one dialogue, the same for a given (seed, dialogue) on every machine."""
    rng = random.Random(f"{seed}:{dialogue}")
    return sorted(rng.sample(candidates, min(k, len(candidates))))


def esconv_dialogues(path) -> list[tuple[int, list[dict], dict]]:
    """(index, turns, record) for every dialogue of an ESConv file, its turns checked."""
    out = []
    for d, (line, rec) in enumerate(read_jsonl(path)):
        dialog = rec.get("dialog")
        if not isinstance(dialog, list) or not all(
                isinstance(t, dict) and t.get("speaker") in ("usr", "sys") and isinstance(t.get("text"), str)
                for t in dialog):
            raise DataError(path, "'dialog' must be a list of {text, speaker: usr|sys} turns", line)
        out.append((d, dialog, rec))
    return out


def esconv_item(item_id: str, dialog: list[dict], rec: dict, d: Any, t: int, window: int) -> Item:
    """Supporter turn t of a dialogue as an item: the `window` turns before it are the context."""
    speakers = {"usr": "seeker", "sys": "supporter"}
    context = [{"speaker": speakers[x["speaker"]], "text": x["text"]} for x in dialog[max(0, t - window):t]]
    return Item(item_id, {"context": context}, target=dialog[t]["text"],
                meta={"dialogue": d, "turn": t, "strategy": dialog[t].get("strategy", ""),
                      "problem_type": rec.get("problem_type", "")})


class SupportMethod(Method):
    """What both methods of reliability.support do alike: the seeker's turns as the person's text, the
    dialogue as the unit of resampling, and the reference-metric tokens of a reply as a label (NUL
    where none were scored: every row of trustmh's method, which scores no reference metrics)."""

    def perturb(self, item: Item, edit: Callable[[str], str]) -> Item:
        context = [{**t, "text": edit(t["text"]) if t["speaker"] == "seeker" else t["text"]}
                   for t in item.input["context"]]
        return Item(item.id, {**item.input, "context": context}, item.target, dict(item.meta))

    def cluster(self, sample: Sample) -> str:
        return str(sample.item.meta["dialogue"])

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        tokens = score.parsed.get("ref_tokens") if isinstance(score.parsed, dict) else None
        return {"ref_tokens": tokens if isinstance(tokens, str) else "\0"}  # "\0": no reply scored


# --- Psychological intervention: CPsyCounE -------------------------------------------------------

CLIENT, COUNSELLOR = "求助者", "支持者"
INTERVENTION_CRITERIA = {"comprehensiveness": 2, "professionalism": 3, "authenticity": 3, "safety": 1}  # -> maximum
_SPEAKER = re.compile(rf"^\s*({CLIENT}|{COUNSELLOR})\s*[:：]\s*", re.DOTALL)


def cpsycoune_files(data: DataSource) -> list[str]:
    """Every cpsycoune/<topic>/<n>.json in the data dir, in a natural order."""
    root = data.path("cpsycoune")
    if not root.is_dir():
        return []
    found = [p.relative_to(data.root).as_posix() for p in root.glob("*/*.json") if p.is_file()]
    # Numeric order inside a topic (2.json before 10.json) keeps item order natural.
    return sorted(found, key=lambda f: (f.split("/")[1], int(re.sub(r"\D", "", f.split("/")[2]) or 0), f))


def read_utterances(path) -> list[str]:
    """A CPsyCounE dialogue file: a JSON list of utterance strings."""
    turns = read_json(path)
    if not isinstance(turns, list) or not all(isinstance(u, str) for u in turns):
        raise DataError(path, "expected a JSON list of utterances")
    return turns


def read_cpsycoune(data: DataSource, files: list[str]) -> list[Item]:
    """An item at every client turn of every dialogue: the history up to it; id = '<topic>/<n>:<index>'."""
    items = []
    for rel in files:
        path = data.path(rel)
        turns = read_utterances(path)
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


class InterventionMethod(MeanMetrics, Method):
    """What both methods of reliability.intervention do alike: every dialogue file of the data dir (recorded
    on the task for the checksums), the dialogue as the unit of resampling and as a label (the n of each
    per-dialogue average), and the rules judge's refusal to rate."""

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        files = cpsycoune_files(data)
        self.task.files = tuple(files)
        return self.read(data, files)

    def read(self, data: DataSource, files: list[str]) -> list[Item]:
        """The items of the dialogue `files`, as this method builds them."""
        raise NotImplementedError

    def cluster(self, sample: Sample) -> str:
        return sample.item.meta["dialogue"]

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        return {"dialogue": sample.item.meta["dialogue"]}

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged:
        return Judged(reason=NO_RULES.format(what="comprehensiveness, professionalism, authenticity and safety"))
