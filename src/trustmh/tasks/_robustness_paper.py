"""The robustness pillar's paper protocol (PAPER_PROTOCOL.md §2 robustness.support and robustness.diagnosis;
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
unseeded."""

from __future__ import annotations

import functools
import random
from dataclasses import replace
from typing import Any, Callable, ClassVar

from ..metrics import Means, Resamples, Table
from ..types import Item, Sample
from ..variants.paper_perturb import (CHAR_EDITS, SENTENCE_RATES, TYPES, WORD_RATES, Tables, csv_round_trip,
                                      perturb_pieces, perturbation_seed)
from ._reliability_paper import (ESCONV, SWMH_SRC, DiagnosisPaper, SupportPaper, es_generation_messages,
                                 es_judge_messages, es_turns)
from ._esconv_reference import reference_metrics
from ._shared import SUPPORT_CRITERIA
from .base import MethodTemplate, RunContext

ES_PERTURB, SW_PERTURB = f"{ESCONV}/src/perturbation.py", f"{SWMH_SRC}/perturbation.py"
TABLES = ("PERTURBATION_INTENSITY", "CHAR_METHOD_TRIGGER_PROB", "HOMOGLYPH_MAP", "SIMILAR_CHAR_MAP", "STOP_WORDS",
          "SPELLING_ERRORS", "ABBREVIATIONS", "INSERT_WORDS", "IRRELEVANT_SENTENCES")
LEVELS = ("low", "medium", "high")
PAPER_TYPE = "all"  # the original's default perturbation type: every stage, cumulative
# The original's types (its --perturbation_type): `all` and the three single stages; run as <type>@<level>.
PAPER_TYPES = (PAPER_TYPE, *(t for t in TYPES if t != PAPER_TYPE))
PAPER_KEYS = tuple(f"{t}@{level}" for t in PAPER_TYPES for level in LEVELS)  # the order results list them in
PERTURBATION = "robustness_perturbation"  # item meta: the perturbation key (both protocols)
SEED = "robustness_seed"  # item meta: the seed of a paper perturbation
TURNS = "paper_turns"  # item input: robustness.support's perturbed formatted turns
SEED_RULE = ("each item and intensity perturbed with its own random.Random(seed), seed = the first 8 bytes "
             "(big-endian) of sha256('<run seed>|<task id>|<item id>|<type>@<intensity>'), type all by default; "
             "the original is unseeded")


def table_templates(local: str) -> tuple[MethodTemplate, ...]:
    return tuple(MethodTemplate(f"PT-{name}", local, name) for name in TABLES)


@functools.lru_cache(maxsize=4)
def original_tables(local: str, root: str) -> Tables:
    """The nine K1 tables of one perturbation.py, their shape checked (fail closed, file and symbol named)."""
    from pathlib import Path

    from ..data.extract import module_constant
    from ..data.methods import MethodError
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


class RobustPaper:
    """The paper side of a robustness task (mixed into it; `self.base` is the base task)."""

    perturbation_file: ClassVar[str]
    base: Any

    def _paper_extras(self, table: Table, r: Resamples) -> dict[str, Any]:
        """Numbers the original's summary lists per intensity beyond the base task's primary metric."""
        return {}

    def _paper_samples(self, item: Item, ctx: RunContext, keys: list[str]) -> list[Sample]:
        """The base task's own paper sample (filed under the base task: the call is shared), then one
        perturbed sample per key `<type>@<intensity>` (all@low, all@medium, all@high by default): the same
        request but for the person's text (settings, choices and target are the clean sample's)."""
        tables = original_tables(self.perturbation_file, str(ctx.methods_root))
        (clean,) = [replace(s, task=self.id, request_task=self.base.id) for s in self.base.samples(item, ctx)]
        out = [clean]
        for key in keys:
            kind, _, level = key.partition("@")
            seed = perturbation_seed(ctx.seed, self.id, item.id, key)
            rng = random.Random(seed)
            edited = self._paper_edit(item, lambda pieces: perturb_pieces(pieces, level, kind, tables, rng), ctx)
            if edited is not None:
                edited = Item(edited.id, edited.input, edited.target, {**edited.meta, PERTURBATION: key, SEED: seed})
                out.append(replace(clean, item=edited, messages=self._paper_messages(edited, ctx), variant=key,
                                   request_task=""))
        return out

    def _paper_edit(self, item: Item, perturb: Callable[[list[str]], list[str]], ctx: RunContext) -> Item | None:
        """The item as the original perturbs it (None: the original would not ask it)."""
        raise NotImplementedError

    def _paper_messages(self, edited: Item, ctx: RunContext) -> list[dict[str, str]]:
        return self.base.prompt(edited, ctx)

    def _paper_judgements(self, sample: Sample, reply: str, ctx: RunContext) -> dict[str, list[dict[str, str]]]:
        return self.base.judgements(sample, reply, ctx)


class SupportRobustPaper(RobustPaper):
    """robustness.support under --protocol paper."""

    perturbation_file = ES_PERTURB
    method_templates = SupportPaper.method_templates + table_templates(ES_PERTURB)

    def _paper_edit(self, item: Item, perturb: Callable[[list[str]], list[str]], ctx: RunContext) -> Item:
        return Item(item.id, {**item.input, TURNS: perturb(es_turns(item.input["context"], ctx))}, item.target,
                    dict(item.meta))

    def _paper_messages(self, edited: Item, ctx: RunContext) -> list[dict[str, str]]:
        return es_generation_messages(edited.input[TURNS], ctx)

    def _paper_extras(self, table: Table, r: Resamples) -> dict[str, Any]:
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
            if reference:
                out.update({f"{name}[{key}]": v
                            for name, v in reference_metrics(table.where(rows), r.rows(rows)).items()})
        return out

    def _paper_judgements(self, sample: Sample, reply: str, ctx: RunContext) -> dict[str, list[dict[str, str]]]:
        turns = sample.item.input.get(TURNS)
        if turns is None:  # the clean sample: the base task's own judgements
            return self.base.judgements(sample, reply, ctx)
        return es_judge_messages(turns, sample.item.target, reply, ctx)


class DiagnosisRobustPaper(RobustPaper):
    """robustness.diagnosis under --protocol paper."""

    perturbation_file = SW_PERTURB
    method_templates = DiagnosisPaper.method_templates + table_templates(SW_PERTURB)

    def _paper_edit(self, item: Item, perturb: Callable[[list[str]], list[str]], ctx: RunContext) -> Item | None:
        post = item.input["post"].strip()  # load_dataset's text, the one element of inputs
        kept = csv_round_trip(perturb([post]), post)
        return None if kept is None else self.base.perturb(item, lambda _: kept, ctx)
