"""The report's judge panel section (a run judged by several --judge, engine/judge/_panel.py): per model and
judged task the panel's value, each judge's own value and Krippendorff's alpha per value with its
interval and level, a value whose judges agree below the run's threshold marked."""

from __future__ import annotations

from typing import Any


def panel_rows(entries: list[Any]) -> list[dict[str, Any]]:
    """One row per (model, task) judged by a panel, in the report's model order."""
    rows = []
    for e in entries:
        for tid, tr in e.result.tasks.items():
            p = getattr(tr, "panel", None)
            if p is None:
                continue
            rows.append({"model": e.label, "task": tid, "metric": tr.metric, "value": tr.value, "n": tr.n,
                         "n_judge_failed": tr.n_judge_failed, "judges": p.judges,
                         "judge_values": {j: p.judge_values.get(j) for j in p.judges},
                         "agreement": [{"value": name, "alpha": a.alpha, "ci": a.ci, "level": a.level, "n": a.n,
                                        "low": name in p.low_agreement} for name, a in p.agreement.items()],
                         "low": bool(p.low_agreement), "min_alpha": p.min_alpha})
    return rows
