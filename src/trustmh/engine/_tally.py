"""What phase 2 counts while it scores one task's samples (score.py): the per-sample values as float
columns, and every count results.json gives beside a task's metric."""

from __future__ import annotations

import array
import collections
import hashlib
import math
from typing import Any, Callable

import numpy as np

from ..judges.addressed import MAX_LISTED, judge_addressed
from ..judges.rubric import Verdicts
from ..scoring.degenerate import MAX_REPLIES, PER_ITEM, answers, near_duplicates
from ..scoring.metrics import Table
from ..tasks import RunContext, Task
from ..types import Sample, Score
from .judge import PanelTally, merged_verdicts, panel_score


class Tally:
    """What one task's scored samples add up to: the per-sample values table and every count that
    results.json gives beside the metric (and, for a panel, each judge's own values)."""

    def __init__(self, task: Task, ctx: RunContext, *, judged_by_model: bool):
        self.task, self.ctx, self.judged_by_model = task, ctx, judged_by_model
        self.rows, self.clusters, self.labels = Columns(), [], collections.defaultdict(list)
        self.errors, self.judge_errors = collections.Counter(), collections.Counter()
        self.unscored_primary = collections.Counter()
        self.unscored_by_value: collections.defaultdict = collections.defaultdict(collections.Counter)
        self.no_answer, self.judge_failed = collections.Counter(), collections.Counter()
        self.reasked = self.n_judged = self.n_usable = self.n_addressed = 0
        self.addressed: list[dict[str, str]] = []  # judged replies that speak to the judge (judges/addressed.py)
        self.panel: PanelTally | None = None
        # Per item (cluster), how often each free-text reply (by digest) answers it: how far one reply answers
        # most items (`same_reply_share`: informative; the pillars read near_duplicate_share).
        self.replies: collections.defaultdict[str, collections.Counter[bytes]] = collections.defaultdict(collections.Counter)
        # The degenerate-behaviour statistics (scoring/degenerate.py): the free-text replies compared (up to
        # PER_ITEM of an item, MAX_REPLIES in all) with their items, and how many of them answer.
        self.compared: list[tuple[str, str]] = []
        self.per_item: collections.Counter[str] = collections.Counter()
        self.n_answering = 0

    def for_panel(self, judges: list[str]) -> None:
        self.panel = PanelTally(judges)
        self.judge_rows = [Columns() for _ in judges]
        self.judge_labels = [collections.defaultdict(list) for _ in judges]
        self.judge_clusters: list[str] = []
        self._next = 0

    def panel_next(self) -> tuple[Verdicts | None, Score]:
        """The next scored sample's panel verdicts and Score (the samples in the first pass's order)."""
        assert self.panel is not None
        i, self._next = self._next, self._next + 1
        scores = self.panel.scores[i]
        return (merged_verdicts(self.panel.judges, self.panel.verdicts[i]),
                panel_score(scores, self.panel.kinds, self.task.primary_value))

    def error(self, s: Sample, model: str, resp) -> dict[str, Any]:
        kind = resp.error_kind if resp else "not_generated"
        self.errors[kind] += 1
        return {"model": model, "task": s.task, "item_id": s.item.id, "variant": s.variant, "messages": s.messages,
                "target": s.item.target, "response": None,
                "error": {"kind": kind, "message": resp.error if resp else "no reply stored"}}

    def add(self, s: Sample, model: str, resp, asked: str | None, judged: Verdicts | None, score: Score) -> dict:
        """Count one scored sample; its samples.jsonl line."""
        task, ctx, primary = self.task, self.ctx, self.task.primary_value
        line: dict[str, Any] = {"model": model, "task": s.task, "item_id": s.item.id, "variant": s.variant,
                                "messages": s.messages, "target": s.item.target}
        if judged and self.judged_by_model and (found := judge_addressed(resp.text)):
            self.n_addressed += 1
            line["judge_addressed"] = found
            if len(self.addressed) < MAX_LISTED:
                self.addressed.append({"item_id": s.item.id, "variant": s.variant, "found": found})
        self.rows.add(score.values)
        method = task.method(ctx)
        self.clusters.append(method.cluster(s))
        if s.choices is None and resp.text is not None:  # free text: a closed answer repeats by design
            self.replies[self.clusters[-1]][reply_digest(resp.text)] += 1
            item = self.clusters[-1]
            if len(self.compared) < MAX_REPLIES and self.per_item[item] < PER_ITEM:
                self.per_item[item] += 1
                self.compared.append((item, resp.text))
                self.n_answering += answers(resp.text, _request(s))  # a refusal check is ~0.5 ms: a sample of them
        sample_labels = method.labels(s, score)
        for k, v in sample_labels.items():
            self.labels[k].append(v)
        for name, reason in score.unscored.items():
            self.unscored_by_value[name][reason] += 1
        if primary not in score.values:
            self.unscored_primary[score.unscored.get(primary, "not scored")] += 1
        if score.no_answer is not None:
            if resp.finish_reason == "length":  # still the model's answer, but say why it has none
                score.no_answer += " (reply cut off at the token limit)"
            self.no_answer[score.no_answer] += 1
        if score.judge_failed is not None and self.judged_by_model:
            self.judge_failed[score.judge_failed] += 1
        if self.judged_by_model and judged and (score.judge_failed is not None
                                                or any(v.text is not None for v in judged.values())):
            self.n_judged += 1  # usable: neither failed nor read by a fall-back ("judge_unparsed")
            self.n_usable += score.judge_failed is None and score.values.get("judge_unparsed") != 1.0
        first = next(iter(judged.values())) if judged else None
        line.update(response=resp.text, finish_reason=resp.finish_reason, latency_s=resp.latency_s,
                    tokens={"prompt": resp.prompt_tokens, "completion": resp.completion_tokens},
                    attempts=resp.attempts,
                    judge={"text": first.text, "reason": first.reason} if first else None,
                    parsed=score.parsed, values=score.values, unscored=score.unscored, notes=score.notes,
                    no_answer=score.no_answer, judge_failed=score.judge_failed,
                    # cluster and labels let `trustmh compare` rebuild the task's Table per item
                    cluster=self.clusters[-1], labels=sample_labels)
        if asked and asked.startswith("asked "):  # the reply of a re-ask (Method.reask)
            line["asked"] = int(asked.removeprefix("asked "))
            self.reasked += 1
        if judged is not None and len(judged) > 1:
            line["verdicts"] = {k: {"text": v.text, "reason": v.reason} for k, v in judged.items()}
        if self.panel is not None:  # each judge's own values of this sample, beside the panel's
            scores = self.panel.scores[self._next - 1]
            line["panel"] = {j: {"values": sc.values, "judge_failed": sc.judge_failed}
                             for j, sc in zip(self.panel.judges, scores)}
        return line


    def same_reply_share(self) -> float | None:
        """The share of the items (clusters) whose usual free-text reply (the one given most often to the
        item's samples: its variants alike, as they should be) is the same text as most items': 1 for a model
        that says one thing to everything, 1/items for one whose reply follows the item. A reply that turns
        up once in every item (a stock opening) is not an item's usual one. None for closed questions or
        fewer than two items."""
        if len(self.replies) < 2:
            return None
        usual = collections.Counter(min(c, key=lambda d: (-c[d], d)) for c in self.replies.values())
        return round(max(usual.values()) / len(self.replies), 4)


    def degenerate_statistics(self, pause: Callable[[], None] = lambda: None) -> dict[str, float | None]:
        """near_duplicate_share, reply_similarity and answering_share (scoring/degenerate.py); None for
        closed questions. `pause`: as in_slices gives it (~0.1 ms a reply, 30 ms for 300)."""
        share, mean = near_duplicates([r for _, r in self.compared], [i for i, _ in self.compared], pause)
        answering = round(self.n_answering / len(self.compared), 4) if self.compared else None
        return {"near_duplicate_share": share, "reply_similarity": mean, "answering_share": answering}


def _request(s: Sample) -> str:
    """What the person last said to the model (the text an echo copies)."""
    content = s.messages[-1].get("content") if s.messages else ""
    return content if isinstance(content, str) else ""


def reply_digest(text: str) -> bytes:
    """A reply's identity, case and spacing aside."""
    return hashlib.blake2b(" ".join(text.lower().split()).encode("utf-8", "replace"), digest_size=8).digest()


class Columns:
    """Per-sample values as one float array per name, for `Table`: a dict kept per sample would cost
    ~200 bytes each, and a large run's re-scoring should not grow with the run."""

    def __init__(self) -> None:
        self.cols: dict[str, array.array] = {}
        self.n = 0

    def add(self, values: dict[str, float]) -> None:
        for name, v in values.items():
            col = self.cols.get(name)
            if col is None:
                col = self.cols[name] = array.array("d", [math.nan]) * self.n
            col.append(math.nan if v is None else v)
        self.n += 1
        for col in self.cols.values():
            if len(col) < self.n:
                col.append(math.nan)

    def table(self, clusters: list[str], labels: dict[str, list[Any]]) -> Table:
        columns = {name: np.frombuffer(self.cols[name], dtype=float) for name in sorted(self.cols)}
        return Table(columns, np.array(clusters, dtype=object), {k: np.array(v, dtype=object) for k, v in labels.items()})


