"""One surface for a task's hooks (issue 33): they live on `Method`; a `Task` holds declarations. A task
without `methods` (a plugin) may write the hooks on itself, with Method's signatures, and the plain Method
that runs it answers with them; a task that declares methods and writes a hook on itself is refused."""

from __future__ import annotations

import pytest

from trustmh import Item, MetricSpec, Score, Task, mean
from trustmh.tasks import HOOKS, TASKS, Method, RunContext, writes
from trustmh.types import Sample


class Plain(Task):  # not registered: a plugin's shape, hooks on the task itself
    id = "hooks.plain"
    pillar = "hooks"
    title = "hooks written on the task"
    dataset = "built-in"
    files = ()
    metric = MetricSpec("loud", True, 0.0, 1.0)
    primary_value = "loud"
    gen_params = {"max_tokens": 7}

    def load(self, data, ctx):
        return [Item("0", {"text": "hello"})]

    def prompt(self, item, ctx):
        return [{"role": "user", "content": item.input["text"]}]

    def choices(self, item):
        return ("HELLO", "hello")

    def score(self, sample, reply, judged, ctx):
        return Score(values={"loud": float(reply.isupper())})

    def labels(self, sample, score):
        return {"text": sample.item.input["text"]}

    def aggregate(self, table, ctx):
        return {"loud": mean(table.col("loud"))}


def test_task_holds_declarations_only():
    assert not [h for h in HOOKS if hasattr(Task, h)]
    for cls in TASKS.values():  # trustmh's own tasks write every hook on their methods
        if cls.__module__.startswith("trustmh."):
            assert not [h for h in HOOKS if callable(getattr(cls, h, None))], cls.id


def test_a_task_without_methods_is_run_by_the_plain_method_with_its_own_hooks():
    ctx = RunContext()
    task = Plain()
    method = task.method(ctx)
    assert type(method) is Method
    (item,) = method.load(None, ctx)
    # Method's default samples() builds on the task's prompt, choices and gen_params
    (sample,) = method.samples(item, ctx)
    assert sample.messages == [{"role": "user", "content": "hello"}]
    assert sample.choices == ("HELLO", "hello") and sample.params == {"max_tokens": 7}
    sc = method.score(sample, "HELLO", None, ctx)
    assert sc.values == {"loud": 1.0} and method.labels(sample, sc) == {"text": "hello"}
    # what the task does not write is Method's default
    assert method.cluster(sample) == "0" and method.judgements(sample, "x", ctx) == {}
    assert writes(method, "score") and not writes(method, "ahead")


def test_a_task_with_methods_may_not_write_hooks_on_itself():
    class Own(Method):
        pass

    with pytest.raises(TypeError, match="writes score on the task"):
        class Both(Task):
            methods = {"trustmh": Own}

            def score(self, sample, reply, judged, ctx):
                return Score()


def test_writes_sees_a_method_s_own_hook():
    class Ahead(Method):
        def ahead(self, sample: Sample, reply: str, ctx: RunContext) -> None:
            pass

    class WithMethods(Task):
        methods = {"trustmh": Ahead}

    assert writes(WithMethods().method(RunContext()), "ahead")
    assert not writes(WithMethods().method(RunContext()), "score")


def test_a_hook_written_on_a_task_takes_method_s_signature():
    """One signature per hook: a task hook with other parameters is refused when the class is made, with the
    signature to write, not left to fail in the middle of a run."""
    with pytest.raises(TypeError, match=r"Legacy.cluster\(self, sample, ctx\): write it as cluster\(self, sample\)"):
        class Legacy(Task):
            def cluster(self, sample, ctx):
                return sample.item.id

    class Optional(Task):  # a parameter with a default fits, as *args does
        def cluster(self, sample, ctx=None):
            return sample.item.id

        def labels(self, *args):
            return {}

    assert Optional().method(RunContext()).cluster(Sample("t", Item("7", {}), [])) == "7"
