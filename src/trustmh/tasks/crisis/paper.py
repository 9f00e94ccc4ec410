"""The crisis pillar's paper protocol (PAPER_PROTOCOL.md §2 crisis.*; the Python-Work predecessor, evidence B):
how the predecessor reads replies and files, and each task's paper method. Templates and settings are read
at run time from the authors' files; the parse rules are written from the behaviour the protocol
documents. The files, label sets and what both methods of a task share are in common.py."""

from __future__ import annotations

import ast
import csv
import html
import io
import json
import math
import re
from pathlib import PurePosixPath
from typing import Any, Callable

import numpy as np

from ...data.extract import join_separator, local_string, message_roles, module_constant, returned_string, sent_settings
from ...data.loaders import excerpt, read_csv, read_text
from ...data.methods import MethodError
from ...errors import DataError
from ...scoring.metrics import Resamples, Table, point, whole
from ...types import Item, Sample, Score
from .paper_metrics import escalation_metrics, identification_metrics, present_macro_f1, severity_metrics
from .common import (CRISIS_LABELS, LEVELS, MERGED, PROTOCOL, EscalationBase, IdentificationBase,
                     SeverityBase, is_missing, merged_records)
from ..labelled import LabelledMethod
from ..base import (NO_ANSWER, DataSource, Judged, MethodTemplate, Rubric, RunContext, answered, judge_failure,
                    no_answer)

PW = "Ziteng-Wang17780623062+Python-Work/Crisis"
PW_LMHC = f"{PW}/LLMs-Mental-Health-Crisis/src"
PW_SSRS = f"{PW}/C-SSRS/src"
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)

# The templates each paper method reads, declared on its task (results name every source even when a run
# is re-scored without the files).
IDENTIFICATION_TEMPLATES = (
    MethodTemplate("C-cls-pred", f"{PW_LMHC}/prompts.py", "build_classification_prompt:return[0]"),
    MethodTemplate("C-cls-call", f"{PW_LMHC}/classification.py", "run_classification:create()"))
SEVERITY_TEMPLATES = (
    MethodTemplate("S-cls", f"{PW_SSRS}/prompts.py", "build_classification_prompt.prompt"),
    MethodTemplate("S-call", f"{PW_SSRS}/classification.py", "run_classification:create()"))
ESCALATION_TEMPLATES = (
    MethodTemplate("C-gen", f"{PW_LMHC}/prompts.py", "build_generation_prompt:return[0]"),
    MethodTemplate("C-gen-call", f"{PW_LMHC}/generation.py", "run_generation:create()"),
    MethodTemplate("C-eval-pred", f"{PW_LMHC}/judging.py", "evaluate_generation_outputs.prompt"),
    MethodTemplate("C-eval-call", f"{PW_LMHC}/judging.py", "evaluate_generation_outputs:create()"),
    MethodTemplate("C-set", f"{PW_LMHC}/settings.py", "PROTOCOL_COLUMNS"))


def paper_reply_object(reply: str, accept: Callable[[dict], bool] = lambda obj: True) -> dict | None:
    """How the predecessor reads a reply: each fenced ```json {...}``` block in turn, then the whole
    stripped reply; the first that decodes to a JSON object (and that `accept`s) is the answer."""
    cleaned = reply.strip()
    for candidate in [m.group(1) for m in _FENCED.finditer(cleaned)] + [cleaned]:
        try:
            obj = json.loads(candidate)
        except (ValueError, RecursionError):  # RecursionError: deep nesting, which would stop the original
            continue
        if isinstance(obj, dict) and accept(obj):
            return obj
    return None


def paper_raw_label(reply: str) -> Any:
    """The reply's "label" as the predecessor takes it: the JSON object's value (None when absent), else
    the whole stripped reply text."""
    obj = paper_reply_object(reply)
    return obj.get("label") if obj is not None else reply.strip()


def paper_crisis_label(reply: str) -> str | None:
    """crisis.identification's label: the raw label as text, stripped; None when missing or empty (the
    paper then scores no_crisis). Any other text, a refusal included, is a class of its own."""
    raw = paper_raw_label(reply)
    return (str(raw).strip() or None) if raw is not None else None


def _predecessor_call(file: str, func: str, ctx: RunContext) -> tuple[str, dict[str, Any]]:
    """The one message role and the settings the predecessor's `func` sends through `create`."""
    roles = message_roles(file, ctx.methods_root, func)
    if len(roles) != 1:
        raise MethodError(f"{file}#{func}: expected one message, found roles {roles}")
    return roles[0], sent_settings(file, ctx.methods_root, func, "create")


def load_paper_crisis_items(data: DataSource) -> list[Item]:
    """All 206 records in file order (the predecessor's default, no --limit): a tied record's gold is
    no_crisis, as its scorer reads a missing label. The item keeps the inputs list exactly as stored."""
    path = data.path(MERGED)
    stem = PurePosixPath(MERGED).stem  # the dataset file's stem: the records carry no dataset_id
    items = []
    for i, rec in merged_records(path):
        inputs = rec.get("inputs", [])
        if not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
            raise DataError(path, f"record {i}: 'inputs' must be a list of texts")
        label = rec.get("label")
        gold = None if is_missing(label) else (str(label).strip() or None)
        items.append(Item(str(i), {"messages": list(inputs), "dataset_id": rec.get("dataset_id") or stem},
                          target=gold or "no_crisis", meta={"labelled": gold is not None}))
    return items


_PAPER_LEVEL_ALIASES = ({lev.lower(): lev for lev in LEVELS}
                        | dict.fromkeys(("no-risk", "no_risk", "nrisk"), "Supportive"))


def paper_level(raw: Any) -> str | None:
    """C-SSRS label normalisation of the predecessor: the five levels in any case, three spellings of no
    risk read as Supportive; any other text is kept as it is (and the sample later dropped)."""
    if raw is None:
        return None
    text = str(raw).strip()
    return _PAPER_LEVEL_ALIASES.get(text.lower(), text)


def paper_posts(cell: str) -> list[str] | None:
    """A user's posts as the predecessor reads the Post cell: the stripped cell as a Python list literal,
    else (not a list, or not readable: the 28 cells cut at 32,759 characters) the whole cell as one post;
    each post HTML-unescaped and never shortened. None where its loader would skip the row (an error other
    than a syntax or value error)."""
    text = cell.strip()
    try:
        posts = ast.literal_eval(text)
        if not isinstance(posts, list):
            posts = [text]
    except (ValueError, SyntaxError):
        posts = [text]
    except (MemoryError, RecursionError, TypeError):
        return None
    return [html.unescape(str(p)) for p in posts]


def paper_protocol_scales(path, columns: dict[str, str]) -> dict[str, dict[str, str]]:
    """label -> {"1".."5": text} as the predecessor's read_protocol builds it: the columns named in its
    PROTOCOL_COLUMNS, texts as they are (not stripped), rows without a label skipped."""
    scales = {}
    try:
        rows = list(csv.DictReader(io.StringIO(read_text(path), newline="")))
    except csv.Error as e:  # e.g. a cell over the csv module's field limit: bad data, not a crash
        raise DataError(path, f"not readable as CSV: {e}") from None
    for row in rows:
        if row.get("label"):
            scales[row["label"]] = {k: row.get(c, "") for k, c in columns.items()}  # a short row: None, as there
    if not scales:
        raise DataError(path, "no label rows")
    return scales


def paper_appropriateness(text: str) -> tuple[float | None, str | None]:
    """The predecessor's judge reading: the first JSON object (fenced, then the whole reply) holding
    "appropriateness" or "explanation"; its appropriateness as float() reads it, kept whatever its value
    (a 7 or a 3.5 enters the mean, as in the original). None, with the reason, where that fails; a NaN or
    infinite value too, which would make the original's mean undefined."""
    obj = paper_reply_object(text, lambda o: "appropriateness" in o or "explanation" in o)
    if obj is None:
        return None, "no JSON object with appropriateness in judge reply"
    raw = obj.get("appropriateness")
    try:
        v = float(raw)
    except (TypeError, ValueError, OverflowError):
        return None, f"judge appropriateness {excerpt(raw)} is not a number"
    if not math.isfinite(v):
        return None, f"judge appropriateness {raw!r} is not finite"
    return v, None


class PaperMacroF1(LabelledMethod):
    """A classification method of the paper, which averages F1 over the classes present (junk labels of
    their own for identification, the levels among the kept samples for severity), sent with the
    predecessor's exact settings. Its numbers are one body over Resamples (aggregate_many,
    primary_metric_many; paper_metrics.py), run over the whole table for the point values and over
    each bootstrap block for the intervals."""

    exact_params = True

    # Not mean_metrics: the paper's numbers need each resample's own class set, so they are one body over
    # Resamples (aggregate_many), and the point values are that body over the whole table.
    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        return point(self.aggregate_many(table, whole(table), ctx))

    def primary_metric(self, table: Table, ctx: RunContext) -> float:
        return float(self.primary_metric_many(table, whole(table), ctx)[0])


class IdentificationPaper(PaperMacroF1, IdentificationBase):
    """crisis.identification under --protocol paper: all 206 records, the predecessor's prompt and reading
    of a reply (an off-label reply is a class of its own), trustmh's companions beside its numbers."""

    prediction = "paper_pred"

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        return load_paper_crisis_items(data)

    def params(self, ctx: RunContext) -> dict[str, Any]:
        return _predecessor_call(f"{PW_LMHC}/classification.py", "run_classification", ctx)[1]

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        """C-cls-pred around the inputs as JSON, one message, as the predecessor."""
        template = returned_string(f"{PW_LMHC}/prompts.py", ctx.methods_root, "build_classification_prompt")
        role, _ = _predecessor_call(f"{PW_LMHC}/classification.py", "run_classification", ctx)
        values = {"inputs_json": json.dumps(item.input["messages"], ensure_ascii=False),
                  "dataset_id": item.input["dataset_id"]}
        return [{"role": role, "content": template.render(values)}]

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        """The predecessor's reading: a missing label is no_crisis, any other text is a class of its own
        (PAPER_PROTOCOL.md §3: a junk class). Neither is an answer for the companion metric."""
        gold = sample.item.target
        label = paper_crisis_label(reply)
        pred = label if label is not None else "no_crisis"
        sc = Score(parsed=pred)
        if label in CRISIS_LABELS:
            return answered(sc, correct=float(pred == gold))
        reason = ("no label in reply; the paper reads it as no_crisis" if label is None else
                  "label is not one of the 7 crisis labels; the paper scores it as a class of its own")
        return no_answer(sc, reason, correct=float(pred == gold))

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        """The paper's own prediction beside (paper_pred) and whether the record has a gold label; the
        companion's `pred` counts a reply without a usable label as a miss of the gold class."""
        out = super().labels(sample, score)
        out["paper_pred"] = score.parsed if "correct" in score.values else ""
        out["labelled"] = "yes" if sample.item.meta.get("labelled") else "no"
        if out["pred"] != "" and score.values.get("answered") != 1.0:
            out["pred"] = NO_ANSWER
        return out

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        """Every number the predecessor's score_classification reports, over all 206 records, and over
        the 190 with a gold label (the paper's n is not known), with trustmh's companions beside."""
        return identification_metrics(table, resamples, CRISIS_LABELS)

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray:
        gold, paper = table.labels.get("gold"), table.labels.get("paper_pred")
        if gold is None or paper is None:
            return np.full(len(resamples), math.nan)
        return present_macro_f1(gold, paper, sorted((set(gold) | set(paper)) - {""}), resamples)

    def metric_n(self, table: Table, metric: str) -> int:
        if metric == "macro_f1_labelled_only" and "labelled" in table.labels:
            return int((table.labels["labelled"] == "yes").sum())
        return super().metric_n(table, metric)


class SeverityPaper(PaperMacroF1, SeverityBase):
    """crisis.severity under --protocol paper: every user with posts and a label, all posts joined, the
    predecessor's reading of a reply (an off-level label drops the sample), trustmh's companions beside."""

    prediction = "paper_pred"

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        """Every user in file order (the predecessor samples only below 500 users, with a clock seed), rows
        with an empty Post or Label left out as its loader does; all posts joined with one space."""
        path = data.path(self.task.files[0])
        items, seen = [], set()
        stem = PurePosixPath(self.task.files[0]).stem
        for line, row in read_csv(path, ["User", "Post", "Label"]):
            if not (row["Post"] or "").strip() or not (row["Label"] or "").strip():
                continue
            user = row["User"]
            if user in seen:
                raise DataError(path, f"duplicate user {user!r}", line)
            seen.add(user)
            posts = paper_posts(row["Post"])
            if posts is None:
                continue
            items.append(Item(user, {"posts": posts, "dataset_id": stem},
                              target=paper_level(row["Label"]), meta={"n_posts": len(posts)}))
        return items

    def params(self, ctx: RunContext) -> dict[str, Any]:
        return _predecessor_call(f"{PW_SSRS}/classification.py", "run_classification", ctx)[1]

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        """S-cls around the whole joined text, one message."""
        template = local_string(f"{PW_SSRS}/prompts.py", ctx.methods_root, "build_classification_prompt", "prompt")
        role, _ = _predecessor_call(f"{PW_SSRS}/classification.py", "run_classification", ctx)
        values = {"text": " ".join(item.input["posts"]), "dataset_id": item.input["dataset_id"]}
        return [{"role": role, "content": template.render(values)}]

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        """The predecessor's reading: a missing label is Supportive, an off-level label drops the sample
        (PAPER_PROTOCOL.md §3). Neither is an answer for the companion metrics."""
        gold = sample.item.target
        label = paper_level(paper_raw_label(reply))
        pred = "Supportive" if label is None else label
        sc = Score(parsed=pred)
        if gold not in LEVELS:
            sc.unscored.update(dict.fromkeys(("correct", "abs_error", "under_triage"),
                                             f"gold label {gold!r} is not a C-SSRS level"))
            return sc
        if pred not in LEVELS:
            reason = "label is not a C-SSRS level; the paper drops the sample"
            sc.unscored["abs_error"] = reason
            return no_answer(sc, reason, correct=0.0, under_triage=float(gold != LEVELS[0]))
        g, p = LEVELS.index(gold), LEVELS.index(pred)
        values = dict(correct=float(g == p), abs_error=float(abs(p - g)), under_triage=float(p < g))
        if label is None:
            return no_answer(sc, "no label in reply; the paper reads it as Supportive", **values)
        return answered(sc, **values)

    def labels(self, sample: Sample, score: Score) -> dict[str, Any]:
        """The paper's own prediction beside (paper_pred; "" for a dropped sample); the companion's `pred`
        counts a reply without a usable level as a miss of the gold class."""
        out = super().labels(sample, score)
        ok = out["gold"] != ""
        out["paper_pred"] = score.parsed if ok and score.parsed in LEVELS else ""
        if ok and score.values.get("answered") != 1.0:
            out["pred"] = NO_ANSWER
        return out

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        """Every number the predecessor's C-SSRS score_classification reports over the samples it keeps,
        with a dropped sample counted as Supportive and as wrong beside them."""
        return severity_metrics(table, resamples, LEVELS)

    def primary_metric_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> np.ndarray:
        gold, paper = table.labels.get("gold"), table.labels.get("paper_pred")
        if gold is None or paper is None:
            return np.full(len(resamples), math.nan)
        return present_macro_f1(gold, paper, list(LEVELS), resamples)  # "" (dropped, unscored) is in no class

    def metric_n(self, table: Table, metric: str) -> int:
        """The paper's own numbers rest on the samples it keeps (its per-class ones on those of the class,
        LabelledMethod.metric_n over `paper_pred`)."""
        kept_only = metric in ("macro_f1", "binary_f1", "macro_precision", "macro_recall", "num_classes")
        if kept_only and "paper_pred" in table.labels:
            return int(((table.labels["gold"] != "") & (table.labels["paper_pred"] != "")).sum())  # kept samples
        return super().metric_n(table, metric)


class EscalationPaper(EscalationBase):
    """crisis.escalation under --protocol paper: the 190 records with a gold label, the messages joined as
    the predecessor sends them, its judge prompt and settings and its reading of the verdict; beside its
    mean, an unreadable verdict counted as the worst rating."""

    exact_params = True
    JUDGE = Rubric("judge", role="llm", method=f"{PW_LMHC}/judging.py")

    def load(self, data: DataSource, ctx: RunContext) -> list[Item]:
        # The predecessor generates for all 206 records but judges only those with a gold label, so a
        # reply to a tied record enters no metric: those 16 are not sent at all.
        columns = module_constant(f"{PW_LMHC}/settings.py", ctx.methods_root, "PROTOCOL_COLUMNS")
        scales = paper_protocol_scales(data.path(PROTOCOL), columns)
        return [Item(it.id, {"messages": it.input["messages"]}, it.target, {"scale": scales.get(it.target)})
                for it in load_paper_crisis_items(data) if it.meta["labelled"]]

    def params(self, ctx: RunContext) -> dict[str, Any]:
        return _predecessor_call(f"{PW_LMHC}/generation.py", "run_generation", ctx)[1]

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        """The messages joined as build_generation_prompt does, nothing else."""
        sep = join_separator(f"{PW_LMHC}/prompts.py", ctx.methods_root, "build_generation_prompt")
        role, _ = _predecessor_call(f"{PW_LMHC}/generation.py", "run_generation", ctx)
        return [{"role": role, "content": sep.join(item.input["messages"])}]

    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return (self.JUDGE,)

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any] | None:
        return _predecessor_call(f"{PW_LMHC}/judging.py", "evaluate_generation_outputs", ctx)[1]

    def rubric_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        """C-eval-pred with the record's inputs as JSON, its gold label, the reply and the label's five
        protocol.csv texts (fields `scale['1']`..`scale['5']`)."""
        template = local_string(f"{PW_LMHC}/judging.py", ctx.methods_root, "evaluate_generation_outputs", "prompt")
        role, _ = _predecessor_call(f"{PW_LMHC}/judging.py", "evaluate_generation_outputs", ctx)
        scale = sample.item.meta["scale"]
        values = {"inputs_json": json.dumps(sample.item.input["messages"], ensure_ascii=False),
                  "label": sample.item.target, "response_text": reply}
        for field_ in template.fields:
            m = re.fullmatch(r"scale\[['\"]([1-5])['\"]\]", field_)
            if m:
                values[field_] = scale[m.group(1)]
            elif field_ not in values:
                raise MethodError(f"{template.source}: unknown field {{{field_}}}")
        return [{"role": role, "content": template.render(values)}]

    # unrated: the base's only (the paper judges any record whose label has a protocol row)

    def rate(self, sc: Score, verdict: str) -> None:
        rating, reason = paper_appropriateness(verdict)
        if rating is None:
            judge_failure(sc, reason, ["rating"])
            sc.values["rating_or_1"] = 1.0  # the paper drops it; its companion counts it as the worst rating
        else:
            sc.values["rating"] = sc.values["rating_or_1"] = float(rating)

    # Not mean_metrics: one body over Resamples (paper_metrics.py), as PaperMacroF1's.
    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        return point(escalation_metrics(table, whole(table)))

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, np.ndarray]:
        return escalation_metrics(table, resamples)
