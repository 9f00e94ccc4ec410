"""A judge role is one registered object (judges/roles.py): a new kind of judge is one file. A plugin
registers a role and a task whose rubric names it, and the engine asks its model through the same
endpoints, store and dry run as the run's --judge, with nothing else of trustmh changed."""

import json
import re

from test_plugins import ok

PLUGIN = '''
import os
from trustmh import Item, MetricSpec, Model, Response, Rubric, Score, Task, mean, register, register_model
from trustmh.judges.roles import JudgeRole, register_judge_role

register_judge_role(JudgeRole("second", "second opinion",
                              lambda spec, options: [("openai/second-opinion", os.environ["SECOND_URL"])]))


@register
class Judged(Task):
    id = "mine.judged"
    pillar = "mine"
    title = "Judged by a second opinion"
    dataset = "built-in"
    files = ()
    metric = MetricSpec("agree_rate", higher_is_better=True, lo=0.0, hi=1.0)
    primary_value = "agree"
    rubrics = (Rubric("opinion", role="second"),)

    def load(self, data, ctx):
        return [Item(id=i, input={"text": t}) for i, t in (("a", "hi"), ("b", "hello"), ("c", "hey"))]

    def prompt(self, item, ctx):
        return [{"role": "user", "content": item.input["text"]}]

    def judge_messages(self, sample, reply, ctx):
        return [{"role": "user", "content": f"Is this reply kind? {reply} ({sample.item.id})"}]

    def score(self, sample, reply, judged, ctx):
        return Score(values={"agree": float(judged["opinion"].text.strip() == "YES")})

    def aggregate(self, table, ctx):
        return {"agree_rate": mean(table.col("agree"))}


class Terse(Model):
    remote = False
    cacheable = False

    async def generate(self, request):
        return Response(text="ok", finish_reason="stop")


@register_model("terse")
def terse(name, **options):
    return Terse(options["spec"])
'''


def test_a_role_registered_in_one_plugin_file_judges_through_the_engine(cli, tmp_path, fake_llm):
    srv = fake_llm(reply=lambda body: "YES" if "kind?" in body["messages"][-1]["content"] else "NO")
    f = tmp_path / "roles_plugin.py"
    f.write_text(PLUGIN)
    env = {"SECOND_URL": srv.openai_base_url, "OPENAI_API_KEY": "sk-test-second"}
    args = ("run", "--include", f, "--model", "terse/x", "--tasks", "mine.judged", "--bootstrap", "0")
    plan = ok(cli(*args, "--dry-run", "--out", tmp_path / "run", cwd=tmp_path, env_extra=env))
    # the dry run prices the role's calls under its label (a narrow table wraps it over two lines)
    assert re.search(r"second(?: opinion)?\s+│\s+openai/se\S*\s+│\s+3\s+│", plan.stdout) and "opinion" in plan.stdout, plan.stdout
    assert not srv.requests  # the dry run asks nobody
    ok(cli(*args, "--out", tmp_path / "run", cwd=tmp_path, env_extra=env))
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    task = res["models"]["terse/x"]["tasks"]["mine.judged"]
    assert task["metrics"]["agree_rate"]["value"] == 1.0 and task["n_samples"] == 3
    assert sum(srv.calls.values()) == 3 and {b["model"] for b in srv.requests} == {"second-opinion"}
    assert task["judgements"]["opinion"]["role"] == "second"
    # stored and resumed like any judge: a second run pays nothing
    ok(cli(*args, "--out", tmp_path / "run", cwd=tmp_path, env_extra=env))
    assert sum(srv.calls.values()) == 3


def test_a_rubric_naming_no_registered_role_is_refused():
    import pytest
    from trustmh import Rubric
    with pytest.raises(ValueError, match="registered judge role"):
        Rubric("x", role="nobody")
    from trustmh.judges.roles import JUDGE_ROLES, JudgeRole, register_judge_role
    with pytest.raises(ValueError, match="registered already"):
        register_judge_role(JudgeRole("llm", "another", lambda spec, options: []))
    assert {"llm", "proxy", "classifier"} <= set(JUDGE_ROLES)
