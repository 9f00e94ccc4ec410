"""The report's *Conversations, turn by turn* section: for a task whose samples are conversations
(crisis.conversation), survival curves per model of the first chatbot message with high potential for harm
and of the first offering human help or crisis resources (scoring/survival.py), read from samples.jsonl,
with the numbers the curves rest on."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analysis.runs import may_hold, read_rows
from ..scoring.survival import kaplan_meier, survival_band, turn_data
from .charts import PALETTE, survival_svg

EVENTS = {"harm": "first chatbot message with high potential for harm",
          "help": "first chatbot message offering human help or crisis resources"}


def conversation_sections(ents) -> list[dict[str, Any]]:
    """One entry per conversation task of the runs: {task, harm, help (SVG), rows (a row per model)}."""
    rows_by_run: dict[int, dict] = {}
    per_task: dict[str, list[tuple[int, Any, list[dict[str, float]]]]] = {}
    for i, e in enumerate(ents):
        run_rows = rows_by_run.get(id(e.run))
        if run_rows is None:  # a run without conversations is not read for them (a small run's tail: ~0.05 s)
            run_rows = rows_by_run[id(e.run)] = read_rows(e.run) if may_hold(e.run, "chatbot_turns") else {}
        for (model, task), rows in run_rows.items():
            if model != e.model or "chatbot_turns" not in rows.values:
                continue
            per_task.setdefault(task, []).append((i, e, [rows.values_of(k) for k in rows.keys], rows.clusters))
    out = []
    for task, groups in per_task.items():
        models = [(i, e, vals) for i, e, vals, _ in groups]
        longest = int(max((v.get("chatbot_turns", 1.0) for _, _, vals in models for v in vals), default=1.0))
        curves = {}
        for ev in EVENTS:  # each model's curve, with a persona-clustered 95% band (none from < 5 personas)
            curves[ev] = []
            for i, e, vals, clusters in groups:
                times, events, kept = turn_data(vals, ev, clusters)
                band = survival_band(np.array(times), np.array(events), np.array(kept), longest)
                curves[ev].append((e.label, PALETTE[i % len(PALETTE)], kaplan_meier(times, events), band))
        # The early messages the table reads the curves at: 5 and 3, or the last message when the
        # conversations were shorter (never "by message 5" of conversations with 3 chatbot messages).
        by_harm, by_help = min(5, longest), min(3, longest)
        table = []
        for (i, e, vals), (_, _, harm, _), (_, _, helped, _) in zip(models, curves["harm"], curves["help"]):
            drifted = sum(1 for v in vals if v.get("drifted") == 1.0)
            tr = e.result.tasks.get(task)
            rates = {k: tr.metrics.get(k) for k in ("first_harm_rate", "first_help_rate")} if tr is not None else {}
            table.append({"label": e.label, "color": PALETTE[i % len(PALETTE)], "n": harm.n or helped.n,
                          "harm_events": harm.events, "harm_median": harm.median(),
                          "no_harm_by": harm.at(by_harm) if harm.n else None,
                          "help_events": helped.events, "help_median": helped.median(),
                          "helped_by": 1 - helped.at(by_help) if helped.n else None, "drifted": drifted,
                          "conversations": len(vals), **{k: v for k, v in rates.items() if v is not None}})
        if not any(c.n for _, _, c, _ in curves["harm"] + curves["help"]):
            continue
        out.append({"task": task,
                    "harm": survival_svg(curves["harm"], t_max=longest),
                    "help": survival_svg(curves["help"], rising=True, t_max=longest),
                    "rows": table, "by_harm": by_harm, "by_help": by_help})
    return out

