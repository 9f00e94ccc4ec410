"""The paper's methods of the robustness pillar (PAPER_PROTOCOL.md §2 robustness.support and robustness.diagnosis;
§0.3 PT-*): each item asked clean, exactly as its base task asks it under the paper protocol, and once per
intensity (low, medium, high) with the predecessor's cumulative perturbation (type `all`: character, word,
then sentence stage; variants/paper_perturb.py), or with the single-stage types the original also has
(character, word, sentence) where `--perturbations` names them.

* robustness.support perturbs the list of formatted context turns ("Seeker: ..." / "Supporter: ...", both
  speakers, prefixes included) and sends the perturbed list as ES-gen's context and as the judge's
  Context and User_input (run_robustness_experiments in ESConv's main.py).
* robustness.diagnosis perturbs the inputs list [post] and keeps only its first element, as the SWMH run's
  CSV round trip does (save_perturbed_data, then load_dataset), so what the sentence stage adds is lost.

The perturbation tables are read at run time from each dataset's own perturbation.py (ESConv's and SWMH's
differ: SWMH repeats and inserts more sentences); a missing or altered file stops the task with its reason.
Each (item, intensity) draws from its own generator, seeded by `perturbation_seed`: the original is
unseeded. `RobustPaper` builds on the base task's paper method through the base task's Task-level hooks
(a `RobustMethod`, tasks/robustness/common.py), so what the base task's paper method asks, reads and
scores is what this one does for the clean sample."""

from __future__ import annotations

import functools
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...data.extract import module_constant
from ...data.methods import MethodError
from ...scoring.metrics import Means, Resamples, Table, point, whole
from ...types import Item, Sample, Score
from ...variants.paper_perturb import (CHAR_EDITS, SENTENCE_RATES, TYPES, WORD_RATES, Tables, csv_round_trip,
                                       perturb_pieces, perturbation_seed)
from ..esconv_reference import reference_metrics
from ..reliability.paper import ESCONV, SWMH_SRC, es_generation_messages, es_judge_messages, es_turns
from .common import (CLEAN, PERTURBATION, SEED, NoBatchedForm, RobustMethod, Subsets, nanmean_many,
                     relative, selection)
from ..labelled import SUPPORT_CRITERIA
from ..base import MethodTemplate, RunContext, Verdicts

ES_PERTURB, SW_PERTURB = f"{ESCONV}/src/perturbation.py", f"{SWMH_SRC}/perturbation.py"
TABLES = ("PERTURBATION_INTENSITY", "CHAR_METHOD_TRIGGER_PROB", "HOMOGLYPH_MAP", "SIMILAR_CHAR_MAP", "STOP_WORDS",
          "SPELLING_ERRORS", "ABBREVIATIONS", "INSERT_WORDS", "IRRELEVANT_SENTENCES")
LEVELS = ("low", "medium", "high")
PAPER_TYPE = "all"  # the original's default perturbation type: every stage, cumulative
# The original's types (its --perturbation_type): `all` and the three single stages; run as <type>@<level>.
PAPER_TYPES = (PAPER_TYPE, *(t for t in TYPES if t != PAPER_TYPE))
PAPER_KEYS = tuple(f"{t}@{level}" for t in PAPER_TYPES for level in LEVELS)  # the order results list them in
TURNS = "paper_turns"  # item input: robustness.support's perturbed formatted turns
SEED_RULE = ("each item and intensity perturbed with its own random.Random(seed), seed = the first 8 bytes "
             "(big-endian) of sha256('<run seed>|<task id>|<item id>|<type>@<intensity>'), type all by default; "
             "the original is unseeded")


PAPER_STAGE = {"char": "character", "word": "word", "sentence": "sentence"}  # trustmh's level -> the original's type
PAPER_DESCRIPTION = (
    "--protocol paper: each item asked clean and at the intensities low, medium and high of the predecessor's "
    "cumulative perturbation (type all: character, word, sentence stage; --perturbations may pick its "
    "single-stage types character, word or sentence instead; tables read from its perturbation.py; "
    + SEED_RULE + "). score[clean] and score[<type>@<intensity>]: the base task's paper metric over all samples "
    "of that perturbation, as the predecessor's summary lists them side by side; diff[<type>@<intensity>] = "
    "score[<type>@<intensity>] - score[clean]. The paper has no drop formula and its robustness number is "
    "unknown. Primary (trustmh's): mean_rel_drop, the mean over the perturbations run of "
    "rel_drop[<type>@<intensity>] = (clean - perturbed) / clean of the base metric over the items scored on "
    "both sides; 0 = no loss, 0.5 or more maps to trust 0. CIs resample items with all their samples "
    "(paired bootstrap)")


def paper_keys(ctx: RunContext) -> list[str]:
    """The perturbations a paper-protocol run asks, as `<type>@<intensity>`: all@low/medium/high by
    default. The same names pick the original's types: a level (char, word, sentence) or a kind of it its
    single-stage type, `all` or an intensity alone the cumulative one."""
    chosen = selection(ctx)
    if chosen is None:
        return [f"{PAPER_TYPE}@{level}" for level in LEVELS]
    keys = {f"{PAPER_TYPE if what is None else PAPER_STAGE[what.split('_', 1)[0]]}@{level}"
            for what, intensity in chosen for level in LEVELS if intensity in (None, level)}
    return [k for k in PAPER_KEYS if k in keys]


def table_templates(local: str) -> tuple[MethodTemplate, ...]:
    return tuple(MethodTemplate(f"PT-{name}", local, name) for name in TABLES)


@functools.lru_cache(maxsize=4)
def original_tables(local: str, root: str) -> Tables:
    """The nine K1 tables of one perturbation.py, their shape checked (fail closed, file and symbol named)."""
    raw = {name: module_constant(local, Path(root), name) for name in TABLES}

    def need(ok: bool, name: str, what: str) -> None:
        if not ok:
            raise MethodError(f"method file {local}#{name}: expected {what}")

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def strings(v: Any, kind: type) -> bool:
        return isinstance(v, kind) and len(v) > 0 and all(isinstance(s, str) for s in v)

    intensity = raw["PERTURBATION_INTENSITY"]
    for stage, rules in (("character", CHAR_EDITS), ("word", WORD_RATES), ("sentence", SENTENCE_RATES)):
        need(isinstance(intensity, dict) and all(
            isinstance(intensity.get(lv), dict) and isinstance(intensity[lv].get(stage), dict)
            and all(number(intensity[lv][stage].get(r)) for r in rules) for lv in LEVELS),
            "PERTURBATION_INTENSITY", f"numbers {', '.join(rules)} under each of {', '.join(LEVELS)} / {stage}")
    trigger = raw["CHAR_METHOD_TRIGGER_PROB"]
    need(isinstance(trigger, dict) and all(number(trigger.get(lv)) for lv in LEVELS), "CHAR_METHOD_TRIGGER_PROB",
         f"a number for each of {', '.join(LEVELS)}")
    for name in ("HOMOGLYPH_MAP", "SIMILAR_CHAR_MAP", "SPELLING_ERRORS", "ABBREVIATIONS"):
        need(strings(raw[name], dict) and all(isinstance(v, str) for v in raw[name].values()), name,
             "a dict of strings to strings")
    need(strings(raw["STOP_WORDS"], (set, frozenset)), "STOP_WORDS", "a set of strings")
    for name in ("INSERT_WORDS", "IRRELEVANT_SENTENCES"):
        need(strings(raw[name], list), name, "a list of strings")
    return Tables(intensity, trigger, raw["HOMOGLYPH_MAP"], raw["SIMILAR_CHAR_MAP"], frozenset(raw["STOP_WORDS"]),
                  raw["SPELLING_ERRORS"], raw["ABBREVIATIONS"], tuple(raw["INSERT_WORDS"]),
                  tuple(raw["IRRELEVANT_SENTENCES"]))


class RobustPaper(RobustMethod):
    """A robustness task under --protocol paper, on the base task's paper method."""

    base_protocol = "paper"

    def samples(self, item: Item, ctx: RunContext) -> list[Sample]:
        """The base task's own paper sample (filed under the base task: the call is shared), then one
        perturbed sample per key `<type>@<intensity>` of `paper_keys` (all@low, all@medium, all@high by
        default): the same request but for the person's text (settings, choices and target are the clean
        sample's)."""
        tables = original_tables(self.task.perturbation_file, str(ctx.methods_root))
        inner = self.base_ctx(ctx)
        (clean,) = [replace(s, task=self.task.id, request_task=self.base.id)
                    for s in self.base_method.samples(item, inner)]
        out = [clean]
        for key in paper_keys(ctx):
            kind, _, level = key.partition("@")
            seed = perturbation_seed(ctx.seed, self.task.id, item.id, key)
            rng = random.Random(seed)
            edited = self.edit(item, lambda pieces: perturb_pieces(pieces, level, kind, tables, rng), inner)
            if edited is not None:
                edited = Item(edited.id, edited.input, edited.target, {**edited.meta, PERTURBATION: key, SEED: seed})
                out.append(replace(clean, item=edited, messages=self.messages(edited, inner), variant=key,
                                   request_task=""))
        return out

    def edit(self, item: Item, perturb: Callable[[list[str]], list[str]], ctx: RunContext) -> Item | None:
        """The item as the original perturbs it (None: the original would not ask it)."""
        raise NotImplementedError

    def messages(self, edited: Item, ctx: RunContext) -> list[dict[str, str]]:
        return self.base_method.prompt(edited, ctx)

    def score(self, sample: Sample, reply: str, judged: Verdicts | None, ctx: RunContext) -> Score:
        sc = super().score(sample, reply, judged, ctx)
        if SEED in sample.item.meta:
            sc.notes.append(f"perturbed as the paper's predecessor ({sample.variant}), "
                            f"random.Random({sample.item.meta[SEED]})")
        return sc

    def metric_description(self, ctx: RunContext) -> str:
        return PAPER_DESCRIPTION

    # --- the metrics, one body for the table and for a block of resamples --------------------------
    # Not mean_metrics: the base task's primary metric over subsets of rows (`Subsets`), as RobustOwn's.
    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        out = {k: float(v) for k, v in self.intensity_metrics(Subsets(self, table, self.base_ctx(ctx))).items()}
        return out | point(self.extras(table, whole(table)))

    def aggregate_many(self, table: Table, resamples: Resamples, ctx: RunContext) -> dict[str, Any] | None:
        v = Subsets(self, table, self.base_ctx(ctx), resamples)
        try:
            out = self.intensity_metrics(v)
        except NoBatchedForm:  # a base task without a batched form has none for any subset
            return None
        return out if v.clean is None else out | self.extras(table, resamples)

    def intensity_metrics(self, v: Subsets) -> dict[str, Any]:
        """The base task's primary metric per perturbation, its difference from clean and the relative drop."""
        if v.clean is None:
            return {"mean_rel_drop": v.nan}
        sign = 1.0 if self.base.metric.higher_is_better else -1.0
        on_clean = v.pert == v.clean
        out = {"clean": v.metric(on_clean)}
        out[f"score[{CLEAN}]"] = out["clean"]
        out["perturbed"] = v.metric(~on_clean)  # trustmh's, for the pillar (Task.counted), not the original's
        rel = []
        for key in [k for k in PAPER_KEYS if k in v.names]:
            k = v.names.index(key)
            out[f"score[{key}]"] = v.metric(v.pert == k)
            out[f"diff[{key}]"] = out[f"score[{key}]"] - out["clean"]
            rows = v.complete(k)
            c = v.metric(rows & on_clean)
            rel.append(relative(sign * (c - v.metric(rows & (v.pert == k))), c))
            out[f"rel_drop[{key}]"] = rel[-1]
        # Over 0-d arrays for the point value too, the summation this number has always had.
        out["mean_rel_drop"] = nanmean_many(rel, v.nan)
        return out

    def extras(self, table: Table, r: Resamples) -> dict[str, Any]:
        """Numbers the original's summary lists per intensity beyond the base task's primary metric."""
        return {}

    def metric_n(self, table: Table, metric: str) -> int:
        if metric.startswith(("score[", "diff[", "rel_drop[")):  # the per-intensity metrics
            key = metric[metric.index("[") + 1:-1]
            if metric.startswith("rel_drop["):  # paired: its pairs
                return int(self.complete_rows(table, key).sum())
            pert, names, _, scored = self.pairs(table)
            if key not in names or CLEAN not in names:
                return 0
            on = pert == names.index(key)
            if metric.startswith("diff["):  # the difference of two means: the samples of both
                on |= pert == names.index(CLEAN)
            return int((scored & on).sum())
        if metric.startswith(("judge_", "ref_")) and metric.endswith("]") and "perturbation" in table.labels:
            name, _, key = metric[:-1].partition("[")  # extras': one perturbation's samples with a value
            column = name.removeprefix("judge_") if name.startswith("judge_") else "ref_hyp_len"
            return int(((table.labels["perturbation"] == key) & ~np.isnan(table.col(column))).sum())
        return super().metric_n(table, metric)


class SupportRobustPaper(RobustPaper):
    """robustness.support under --protocol paper."""

    def edit(self, item: Item, perturb: Callable[[list[str]], list[str]], ctx: RunContext) -> Item:
        return Item(item.id, {**item.input, TURNS: perturb(es_turns(item.input["context"], ctx))}, item.target,
                    dict(item.meta))

    def messages(self, edited: Item, ctx: RunContext) -> list[dict[str, str]]:
        return es_generation_messages(edited.input[TURNS], ctx)

    def judgements(self, sample: Sample, reply: str, ctx: RunContext) -> dict[str, list[dict[str, str]]]:
        """The paper's judge sees what the model saw: the perturbed turns as Context and User_input."""
        turns = sample.item.input.get(TURNS)
        if turns is None:  # the clean sample: the base task's own judgements
            return super().judgements(sample, reply, ctx)
        return es_judge_messages(turns, sample.item.target, reply, self.base_ctx(ctx))

    def extras(self, table: Table, r: Resamples) -> dict[str, Any]:
        """save_summary_report's rows per intensity: each judge criterion's mean over the samples of one
        perturbation (`judge_<criterion>[<type>@<intensity>]`, and `[clean]`) and, where the replies were
        scored against the ground-truth turn, the reference metrics of that intensity's run
        (`ref_<name>[<key>]`: its generation_metrics.aggregate, which the summary lists per intensity too);
        over Resamples (one body)."""
        means, out = Means(table, r), {}
        perturbation = table.labels.get("perturbation")
        if perturbation is None:
            return out
        reference = "ref_hyp_len" in table.columns
        for key in sorted(set(perturbation)):
            rows = perturbation == key
            for c in SUPPORT_CRITERIA:
                out[f"judge_{c}[{key}]"] = means(c, rows)
            if reference:  # the same subset table for every block: what it memoises is built once
                sub = table.memoized(("perturbation", key), lambda: table.where(rows))
                out.update({f"{name}[{key}]": v for name, v in reference_metrics(sub, r.rows(rows)).items()})
        return out


class DiagnosisRobustPaper(RobustPaper):
    """robustness.diagnosis under --protocol paper."""

    def edit(self, item: Item, perturb: Callable[[list[str]], list[str]], ctx: RunContext) -> Item | None:
        post = item.input["post"].strip()  # load_dataset's text, the one element of inputs
        kept = csv_round_trip(perturb([post]), post)
        return None if kept is None else self.base_method.perturb(item, lambda _: kept)
