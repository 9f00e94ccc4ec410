"""results.json's `paper` block: the originals' names for the numbers a task reports under --protocol paper.

A task lists `paper_names`, original name -> trustmh metric key, either plain ("macro_f1") or with
placeholders that stand for a class, a label or a rating (`{c}`, `{g}`, `{p}`, `{k}`:
"per_class_metrics.{c}.recall" -> "recall[{c}]"). Every metric key that fits a key pattern is listed under
the original's name with that metric's value, n and interval: one computation, two names."""

from __future__ import annotations

import re
from typing import Any

_FIELD = re.compile(r"\{(\w+)\}")


def _pattern(key_template: str) -> re.Pattern[str]:
    parts = _FIELD.split(key_template)  # text, name, text, name, ...
    regex = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
    return re.compile(regex)


def paper_block(names: dict[str, str], metrics: dict[str, Any]) -> dict[str, Any]:
    """Original name -> the metric (whatever `metrics` holds: a MetricValue, a float) for every key that
    `names` covers, in the order of `names` then of `metrics`."""
    out: dict[str, Any] = {}
    for original, key in names.items():
        if not _FIELD.search(key):
            if key in metrics:
                out[original] = metrics[key]
            continue
        pattern = _pattern(key)
        for metric_key, value in metrics.items():
            m = pattern.fullmatch(metric_key)
            if m:
                out[_FIELD.sub(lambda f: m.group(f.group(1)), original)] = value
    return out
