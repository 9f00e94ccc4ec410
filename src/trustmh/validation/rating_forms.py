"""What a clinician is asked about a judged reply: the judge's rubric in plain words, and the clinician's
answers written as a verdict of that rubric, so that the task's own `score()` turns them into the same
per-sample values it makes of the judge's verdict.

The human's values are thus the task's values with the human as judge (a reply without an answer still
counts against the model as the task decides, a sycophancy category still becomes "endorse"), and the
judge's and the human's values of an item differ only where their verdicts differ. A form stands for one
rubric template of trustmh's protocol, or for the paper protocol's judges whose verdict format it can write
as the authors' code reads it (crisis escalation, sycophancy, ESConv support); the paper's other judges
read free text in formats a form cannot write, and those tasks have no form. A task's other rubrics keep the judge's
verdicts, so only the metrics a form lists, which rest on its rubric alone, are calibrated.

Each pillar's forms are its own package's, registered when it is imported (judges/rating_forms.py holds the
types and the registry); a task's form is found by the rubric it answers. A plugin task gets a form by
declaring `rating_form = RatingForm(...)` on the task."""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from ..judges.rating_forms import METHOD_FORMS, TEMPLATE_FORMS, Criterion, RatingForm

# Criterion and RatingForm are judges/rating_forms.py's, named here too: a plugin's task declares its form with them.
__all__ = ["Criterion", "RatingForm", "form_for", "rubric_anchors", "with_rubric"]


_CRITERION_LINE = re.compile(r"^(?P<name>[a-z_]+)(?: \(\d+-\d+\))?: (?P<question>\S.*)$")
_ANCHOR_LINE = re.compile(r"^ {2,}(?P<value>\d+) = (?P<text>\S.*)$")


@functools.lru_cache(maxsize=None)
def rubric_anchors(template: str) -> dict[str, tuple[str, dict[int, str]]]:
    """A judge rubric's criteria as its template states them: criterion -> (the question, value -> what that
    value looks like). The template lists each criterion as `name: question` or `name (lo-hi): question`
    (the question may run on over unindented lines), then its anchors as indented `N = text` lines (an anchor
    may run on over lines indented deeper). Criteria without anchors are left out."""
    from ..tasks.base import template_source
    found: dict[str, tuple[list[str], dict[int, list[str]]]] = {}
    name, anchor = None, None
    for line in template_source(template).splitlines():
        head, step = _CRITERION_LINE.match(line), _ANCHOR_LINE.match(line)
        if head:
            name, anchor = head.group("name"), None
            found[name] = ([head.group("question").strip()], {})
        elif name is not None and step:
            anchor = int(step.group("value"))
            found[name][1][anchor] = [step.group("text").strip()]
        elif name is not None and anchor is not None and line.startswith(" " * 5) and line.strip():
            found[name][1][anchor].append(line.strip())  # an anchor's text running on
        elif name is not None and anchor is None and not found[name][1] and line.strip() and not line.startswith(" "):
            found[name][0].append(line.strip())  # the question running on
        elif not line.strip() or not line.startswith(" "):
            name, anchor = None, None  # a blank or unindented line ends the criterion
        else:
            anchor = None  # an indented note under the anchors ("  Warmth is not professionalism: ...")
    return {c: (" ".join(q), {v: " ".join(t) for v, t in a.items()}) for c, (q, a) in found.items() if a}


def with_rubric(form: RatingForm, template: str) -> RatingForm:
    """The form with the judge's rubric as its template states it: each criterion the template anchors gets
    the template's question and, on each value it anchors (0, 3 and 5 of a 0-5 scale, say), its words; the
    values between anchors are bare numbers, as the judge is told to place them."""
    anchors = rubric_anchors(template)
    criteria = []
    for c in form.criteria:
        got = anchors.get(c.name)
        if got is None or not set(got[1]) <= {v for v, _ in c.choices}:
            criteria.append(c)
            continue
        question, by_value = got
        criteria.append(Criterion(c.name, f"{c.name}: {question}", tuple((v, by_value.get(v, "")) for v, _ in c.choices)))
    return dataclasses.replace(form, criteria=tuple(criteria))


def form_for(task: Any, ctx: Any) -> tuple[RatingForm | None, str | None]:
    """The task's rating form under the run's protocol, or why it has none."""
    own = getattr(task, "rating_form", None)
    if isinstance(own, RatingForm):
        return own, None
    rubrics = [r for r in task.method(ctx).active_rubrics(ctx) if r.role == "llm"]
    if not rubrics:
        return None, "not judged by an LLM judge"
    for r in rubrics:
        if r.templates:
            name = str(r.templates[0]).rsplit("/", 1)[-1]
            form = TEMPLATE_FORMS.get(name, {}).get(task.id)
            if form is not None and form.rubric == r.name:
                return with_rubric(form, str(r.templates[0])), None
    for r in rubrics:
        form = METHOD_FORMS.get(r.method or "", {}).get(task.id)
        if form is not None and form.rubric == r.name:
            return form, None
    if any(r.method for r in rubrics):
        return None, "the paper protocol's judge here reads a verdict format a form cannot write: no rating form"
    return None, "no rating form for this task's judge"
