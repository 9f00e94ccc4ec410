"""A judge rubric's rating form: what a human rater is asked about a judged reply, and their answers
written as a verdict of that rubric, so that the task's own `score()` turns them into the same per-sample
values it makes of the judge's verdict (`trustmh annotate`, the calibrated values).

Each pillar keeps its tasks' forms in its own package and registers them here when it is imported
(`register_rating_forms`), beside its tasks; validation/rating_forms.py picks a task's form for a run
(`form_for`). The types and the registry sit here, below the tasks, so that a pillar declares its forms
without importing validation, which sits above the tasks."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .rubric import Judged, Verdicts


@dataclass(frozen=True)
class Criterion:
    name: str  # the per-sample value or JSON key the rubric's verdict gives
    question: str  # what the clinician is asked, in plain words
    choices: tuple[tuple[int, str], ...]  # (value, what it means)

    def allows(self, v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and any(v == c for c, _ in self.choices)


@dataclass(frozen=True)
class RatingForm:
    title: str  # what is rated, one line
    rubric: str  # the task's rubric name this form answers
    criteria: tuple[Criterion, ...]
    # the answers as the rubric's verdict text; or, for a judge asked once per criterion (the paper's ESConv
    # judge), a verdict text per rubric name
    verdict: Callable[[dict[str, int]], "str | dict[str, str]"]
    # metric -> the per-sample value it is the mean of (None: not a mean; the prediction-powered bootstrap)
    metrics: dict[str, str | None] = field(default_factory=dict)
    context_label: str = "What the person wrote"

    def public(self) -> dict[str, Any]:
        """What the rating page shows (nothing of the task's id, the model or the judge)."""
        return {"title": self.title, "context_label": self.context_label,
                "criteria": [{"name": c.name, "question": c.question, "choices": [list(x) for x in c.choices]}
                             for c in self.criteria]}

    def bounds(self, column: str | None) -> tuple[float, float] | None:
        """The range of a per-sample value that is one of the form's criteria (None: another value; a 0/1
        value is then read as a proportion by the calibration)."""
        for c in self.criteria:
            if c.name == column:
                values = [v for v, _ in c.choices]
                return float(min(values)), float(max(values))
        return None

    def problem(self, answers: Any) -> str | None:
        """Why `answers` read from a file is not a rating on this form, as a reason to count (None: it is one):
        a rating is a whole number the criterion offers, never a string, a fraction, NaN or off the scale."""
        if not isinstance(answers, dict):
            return "answers are not an object"
        if set(answers) - {c.name for c in self.criteria}:
            return "answers name a criterion the form does not have"
        for c in self.criteria:
            v = answers.get(c.name)
            if v is None:
                return "answers lack a criterion of the form"
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return "a rating is not a number"
            if isinstance(v, float) and not (math.isfinite(v) and v == int(v)):
                return "a rating is not a whole number"
            if not c.allows(int(v)):
                return "a rating is off the form's scale"
        return None

    def check(self, answers: Any) -> str | None:
        """Why `answers` is not a complete rating on this form (None: it is)."""
        if not isinstance(answers, dict):
            return "answers must be an object"
        for c in self.criteria:
            if not c.allows(answers.get(c.name)):
                return f"{c.name}: give one of {', '.join(str(v) for v, _ in c.choices)}"
        extra = set(answers) - {c.name for c in self.criteria}
        return f"unknown criteria: {', '.join(sorted(map(str, extra)))[:200]}" if extra else None

    def verdicts(self, answers: dict[str, int], judge: Verdicts | None) -> Verdicts:
        """The task's verdicts with the human's answers in this form's rubric (the other rubrics as judged)."""
        out = Verdicts(judge or {})
        given = self.verdict(answers)
        for name, text in (given.items() if isinstance(given, dict) else [(self.rubric, given)]):
            out[name] = Judged(text=text)
        return out


# The forms the pillars registered, by what the rubric they answer is made from -> task -> its form.
TEMPLATE_FORMS: dict[str, dict[str, RatingForm]] = {}  # a rubric template's file name (trustmh's protocol)
METHOD_FORMS: dict[str, dict[str, RatingForm]] = {}  # a paper protocol judge's method file (methods.json)


def register_rating_forms(forms: Mapping[str, RatingForm], *, template: str | None = None,
                          method: str | None = None) -> None:
    """Task -> its form for the judge rubric rendered from `template` (a template's file name, as under
    tasks/<pillar>/templates/), or for the paper protocol's judge read from `method` (a method file whose
    verdict format the form writes as the authors' code reads it). Called by a pillar's package when it is
    imported. A second, different form for one task and rubric is refused."""
    if (template is None) == (method is None):
        raise ValueError("a rating form answers a rubric by its template or by its method file: give one")
    known = (TEMPLATE_FORMS if method is None else METHOD_FORMS).setdefault(template or method, {})
    for task, form in forms.items():
        if known.setdefault(task, form) != form:
            raise ValueError(f"{task} has a rating form for {template or method} already")


def as_json(answers: dict[str, int]) -> str:
    """The answers as the JSON object of scores a rubric asks for (criterion -> value)."""
    return json.dumps(answers)


def scale(lo: int, hi: int, low: str, high: str) -> tuple[tuple[int, str], ...]:
    """The choices lo..hi, the ends named `low` and `high`."""
    return tuple((v, low if v == lo else high if v == hi else "") for v in range(lo, hi + 1))
