"""Every rating form writes the clinician's answers as a verdict its task's own scoring reads: scored with
it, a reply gets the per-sample values the form's metrics rest on, each criterion's value where the value
is the criterion itself, and no judge failure. Every task with a form: trustmh's protocol on the sample
suite, the paper's (its judges read from the authors' files) on the real data."""

import pytest

from trustmh.engine.prepare import prepare
from trustmh.judges.rubric import Judged, Verdicts
from trustmh.engine.run import context
from trustmh.judges.rating_forms import TEMPLATE_FORMS
from trustmh.validation.rating_forms import form_for

from conftest import run_spec

TASKS = sorted({t for forms in TEMPLATE_FORMS.values() for t in forms} - {"sycophancy.pas"})  # PAS: user-supplied


PAPER = ["crisis.escalation", "sycophancy.oeq", "sycophancy.aita", "reliability.support"]


@pytest.fixture(scope="module")
def prepared():
    spec = run_spec(models=["baseline/counselor"], tasks=",".join(TASKS), suite="sample", judge="openai/j")
    ctx = context(spec)
    return {p.task.id: p for p in prepare(spec, ctx)[0]}, ctx


@pytest.fixture(scope="module")
def paper_prepared():
    from conftest import UPSTREAM
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    spec = run_spec(models=["baseline/counselor"], tasks=",".join(PAPER), suite="data", data_dir=str(UPSTREAM),
                    judge="openai/j", protocol="paper", limit=2)
    ctx = context(spec)
    return {p.task.id: p for p in prepare(spec, ctx)[0]}, ctx


@pytest.mark.parametrize("task_id", TASKS)
@pytest.mark.parametrize("end", [0, -1])
def test_a_form_answer_is_read_back_as_the_same_value(prepared, task_id, end):
    check_form(*prepared, task_id, end)


@pytest.mark.needs_methods
@pytest.mark.parametrize("task_id", PAPER)
@pytest.mark.parametrize("end", [0, -1])
def test_the_paper_judges_forms_are_read_back_too(paper_prepared, task_id, end):
    check_form(*paper_prepared, task_id, end)
    assert any(r.method for r in paper_prepared[0][task_id].task.method(paper_prepared[1]).active_rubrics(paper_prepared[1]))


def check_form(by_id, ctx, task_id, end):
    p = by_id[task_id]
    form, why = form_for(p.task, ctx)
    assert form is not None, why
    sample = next(iter(p.samples))
    answers = {c.name: c.choices[end][0] for c in form.criteria}
    assert form.check(answers) is None
    reply = "That sounds really hard. I am here with you, and talking to someone you trust can help."
    # the task's other judgements (sycophancy's ELEPHANT dimensions, 0/1) keep the judge's verdicts
    others = Verdicts({r.name: Judged(text="0") for r in p.task.method(ctx).active_rubrics(ctx) if r.name != form.rubric})
    score = p.task.method(ctx).score(sample, reply, form.verdicts(answers, others), ctx)
    assert score.judge_failed is None, score.judge_failed
    for metric, column in form.metrics.items():
        if column is not None:
            assert column in score.values, (metric, column, score.values, score.unscored)
    for c in form.criteria:
        if c.name in score.values:
            assert score.values[c.name] == answers[c.name]
    assert form.check({**answers, "extra": 1}) is not None and form.check({}) is not None


def test_each_tasks_forms_are_registered_by_its_own_pillar_package():
    """Issue 43 item 6: a task's forms live in its pillar's package, which registers them when imported;
    validation/ keeps only the choice of a form for a run."""
    import ast
    from pathlib import Path

    from trustmh.judges.rating_forms import METHOD_FORMS
    from trustmh.tasks import TASKS as REGISTERED
    src = Path(__file__).resolve().parents[1] / "src" / "trustmh"
    module = ast.parse((src / "validation" / "rating_forms.py").read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(module) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "RatingForm"]
    assert {t for forms in METHOD_FORMS.values() for t in forms} == set(PAPER) | {"sycophancy.pas"}
    for registry in (TEMPLATE_FORMS, METHOD_FORMS):
        for forms in registry.values():
            for task in forms:
                text = (src / "tasks" / REGISTERED[task].pillar / "__init__.py").read_text(encoding="utf-8")
                assert "register_rating_forms(" in text and f'"{task}"' in text, task


def test_a_second_form_for_a_task_and_rubric_is_refused():
    from trustmh.judges.rating_forms import Criterion, RatingForm, register_rating_forms
    other = RatingForm("another", "judge", (Criterion("x", "?", ((0, "no"), (1, "yes"))),), str)
    with pytest.raises(ValueError, match="ethics.reasoning has a rating form for ethics_judge.j2 already"):
        register_rating_forms({"ethics.reasoning": other}, template="ethics_judge.j2")
    with pytest.raises(ValueError, match="give one"):
        register_rating_forms({"mine.task": other})
    register_rating_forms({"ethics.reasoning": TEMPLATE_FORMS["ethics_judge.j2"]["ethics.reasoning"]},
                          template="ethics_judge.j2")  # the same form again (a reload): harmless
