"""Several tested models in one run: their endpoints work at the same time (each its own concurrency),
the judge is shared in turn, and every model's results equal those of a run of that model alone."""

import asyncio
import json
from types import SimpleNamespace

import pytest

from conftest import run_quiet
from trustmh.engine import Limits
from trustmh.engine.judge._pool import JudgePool
from trustmh.scoring.metrics import mean
from trustmh.tasks import TASKS, Judged, MetricSpec, Rubric, Task, register
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.types import Item, Score

KEY = {"OPENAI_API_KEY": "test-not-a-key"}  # openai/ models need one, even on a loopback server
TASK_ID = "testtogether.judged"
N = 10


class Judged1(Task):
    id = TASK_ID
    pillar = "ethics"
    title = "one judgement per sample (test task)"
    dataset = "test"
    files = ()
    metric = MetricSpec("rating", True, 0.0, 5.0)
    primary_value = "rating"
    rubrics = (Rubric("judge"),)

    def load(self, data, ctx):
        return [Item(f"i{n}", {"q": f"question {n}"}) for n in range(N)]

    def prompt(self, item, ctx):
        return [{"role": "user", "content": item.input["q"]}]

    def judge_messages(self, sample, reply, ctx):
        return [{"role": "user", "content": f"RATE {sample.item.id}: {reply}"}]

    def rules_judge(self, sample, reply, ctx):
        return Judged(reason="needs an LLM judge")

    def score(self, sample, reply, judged, ctx):
        if judged is None or judged.text is None:
            return Score(unscored={"rating": "no verdict"})
        return Score(values={"rating": float(judged.text.split(":")[1])})

    def aggregate(self, table, ctx):
        return {"rating": mean(table.col("rating"))}


@pytest.fixture
def task():
    register(Judged1)
    yield
    TASKS.pop(TASK_ID, None)


def reply(body):
    text = body["messages"][-1]["content"]
    if body["model"] == "j":  # the judge rates model a's replies 2 and model b's 4
        return "Rating: 4" if "from b" in text else "Rating: 2"
    return f"{text} from {body['model']}"


def test_models_run_at_the_same_time_with_the_results_of_each_alone(spec_for, task, tmp_path):
    with FakeLLMServer(reply=reply, latency_s=0.02) as srv:
        both = spec_for(srv, TASK_ID, ["openai/a", "openai/b"], n_boot=50)
        _, together, calls = run_quiet(both, tmp_path / "both",
                                       limits=Limits(max_connections=2))
        order = [r["model"] for r in srv.requests]
        assert calls == {"openai/a": N, "openai/b": N, "judge": 2 * N}
        gen = [m for m in order if m != "j"]
        # one model after the other would send every request of a before the first of b
        assert gen.index("b") < len(gen) - 1 - gen[::-1].index("a")
        assert order.index("j") < len(order) - 1 - order[::-1].index("b")  # judging overlaps generation too
        # re-scoring both models at once reads everything back and calls nothing
        _, rescored, calls = run_quiet(both, tmp_path / "both", generate=False)
        assert calls == {"openai/a": 0, "openai/b": 0, "judge": 0} and len(srv.requests) == 4 * N
        srv.reset_counters()
        alone = {m: run_quiet(spec_for(srv, TASK_ID, [m], n_boot=50), tmp_path / m.replace("/", "-"),
                              limits=Limits(max_connections=2))[1]
                 for m in ("openai/a", "openai/b")}
    for m, value in (("openai/a", 2.0), ("openai/b", 4.0)):
        t = together.models[m].tasks[TASK_ID]
        assert rescored.models[m].tasks[TASK_ID].model_dump() == t.model_dump()
        assert t.value == value and t.n == N
        assert t.model_dump() == alone[m].models[m].tasks[TASK_ID].model_dump()
    lines = [json.loads(x) for x in (tmp_path / "both" / "samples.jsonl").read_text().splitlines()]
    assert [x["model"] for x in lines] == ["openai/a"] * N + ["openai/b"] * N  # run order, model by model


def test_the_judge_takes_the_models_in_turn():
    """A model that queued many judgements (it answers at once) does not hold the others behind them."""
    served = []

    class Owner:
        def __init__(self, name):
            self.name = name

        async def judge(self, ep, job):
            served.append((self.name, job))
            await asyncio.sleep(0)
            return job != "bad"

    async def main():
        pool = JudgePool("llm", SimpleNamespace(model=SimpleNamespace(spec="j"), width=1))
        a, b, c = Owner("a"), Owner("b"), Owner("c")
        for k in range(5):
            pool.put(a, (f"a{k}",))
        pool.put(b, ("b0",))
        pool.put(b, ("bad",))
        pool.put(c, ("c0",))
        worker = asyncio.create_task(pool.work())
        await asyncio.sleep(0)
        pool.close()  # what is queued is still judged
        await worker
        return pool

    pool = asyncio.run(main())
    assert [name for name, _ in served] == ["a", "b", "c", "a", "b", "a", "a", "a"]
    assert [job for _, job in served if _ == "a"] == [f"a{k}" for k in range(5)]  # each model's own order kept
    assert (pool.n_queued, pool.n_done, pool.n_errors) == (8, 8, 1)


def test_models_file_names_every_model_and_reaches_results(cli, tmp_path):
    with FakeLLMServer(reply=lambda body: f"an answer from {body['model']}") as one, \
            FakeLLMServer(reply=lambda body: f"an answer from {body['model']}") as two:
        listing = tmp_path / "models.toml"
        listing.write_text(f'''
[[model]]
spec = "openai/general-1"
base_url = "{one.openai_base_url}"
label = "General One"
group = "general"

[[model]]
spec = "openai/mh-1"
base_url = "{two.openai_base_url}"
group = "mental-health"

[[model]]
spec = "baseline/refuse"
''')
        out = tmp_path / "run"
        done = cli("run", "--models", listing, "--suite", "sample", "--tasks", "ethics", "--limit", "2",
                   "--bootstrap", "20", "--out", out, "--no-progress", env_extra=KEY)
        assert done.returncode == 0, done.stderr
        assert one.n_requests > 0 and two.n_requests > 0
        assert {r["model"] for r in one.requests} == {"general-1"} and {r["model"] for r in two.requests} == {"mh-1"}
    results = json.loads((out / "results.json").read_text())
    assert list(results["models"]) == ["openai/general-1", "openai/mh-1", "baseline/refuse"]
    assert results["spec"]["options"]["model_info"] == {
        "openai/general-1": {"label": "General One", "group": "general"},
        "openai/mh-1": {"group": "mental-health"}}
    # the rank table's column groups come from the file when no --group is given
    from trustmh.analysis.runs import entries, load_run
    assert {e.model: e.group for e in entries([load_run(out)])} == {
        "openai/general-1": "general", "openai/mh-1": "mental-health", "baseline/refuse": ""}
    # a new label is how the report shows the run, not another run: the same --out resumes, paying nothing
    # (the servers are gone: a call would fail)
    listing.write_text(listing.read_text().replace("General One", "General 1"))
    again = cli("run", "--models", listing, "--suite", "sample", "--tasks", "ethics", "--limit", "2",
                "--bootstrap", "20", "--out", out, "--no-progress", env_extra=KEY)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "results.json").read_text())["spec"]["options"]["model_info"]["openai/general-1"] == {
        "label": "General 1", "group": "general"}


@pytest.mark.parametrize("text, needle", [
    ("[[model]]\nlabel = 'x'\n", "has no spec"),
    ("[[model]]\nspec = 'openai/a'\ncolour = 'red'\n", "unknown key 'colour'"),
    ("[[model]]\nspec = 'openai/a'\nbase_url = 'localhost:8000'\n", "http:// or https://"),
    ("[[model]]\nspec = 'openai/a'\nlabel = 3\n", "label must be"),
    ("model = 'openai/a'\n", "no [[model]] entry"),
    ("[[model]\n", "not valid TOML"),
    ("[[model]]\nspec = 'openai/a'\n[[model]]\nspec = 'openai/a'\n", "given twice"),
])
def test_a_bad_models_file_is_a_one_line_error(cli, tmp_path, text, needle):
    listing = tmp_path / "models.toml"
    listing.write_text(text)
    done = cli("run", "--models", listing, "--suite", "sample", "--out", tmp_path / "run", "--no-progress",
               env_extra=KEY)
    assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout, done.stderr
    assert needle in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()


def test_models_file_and_model_are_one_or_the_other(cli, tmp_path):
    listing = tmp_path / "models.toml"
    listing.write_text("[[model]]\nspec = 'baseline/refuse'\n")
    done = cli("run", "--models", listing, "--model", "baseline/random", "--suite", "sample", "--no-progress",
               env_extra=KEY)
    assert done.returncode == 2 and "give the models one way" in done.stderr


def test_a_model_waits_for_room_in_the_judge_queue():
    """At most `cap` judgements of one model wait: its generation is held until the judge takes one."""
    served = []

    class Owner:
        async def judge(self, ep, job):
            served.append(job)
            await asyncio.sleep(0)
            return True

    async def main():
        pool = JudgePool("llm", SimpleNamespace(model=SimpleNamespace(spec="j"), width=1), backlog=64)
        a, b = Owner(), Owner()
        for k in range(pool.cap):
            pool.put(a, (k,))
        held = asyncio.create_task(pool.room(a))
        await pool.room(b)  # another model is not held by a's backlog
        for _ in range(3):
            await asyncio.sleep(0)
        assert not held.done() and served == []
        worker = asyncio.create_task(pool.work())
        for _ in range(3):
            await asyncio.sleep(0)
        assert held.done() and 0 < len(served) < pool.cap  # room as soon as one was taken
        pool.close()
        await worker
        return pool

    pool = asyncio.run(main())
    assert served == list(range(pool.cap))


def test_a_queued_reply_is_rendered_only_when_the_judge_takes_it():
    """Judgements wait as replies (`Pending`), not prompts: a reply's judge prompts are built by the worker
    that takes it, its other rubrics go next, and one that needs no judgement is never sent."""
    from trustmh.engine.judge._pool import Pending
    log = []

    class Owner:
        def render(self, pool, job):
            log.append(("render", job.reply))
            return [(job.reply, r) for r in {"two": ["r1", "r2"], "none": []}.get(job.reply, ["r1"])]

        async def judge(self, ep, reply, rubric):
            log.append(("judge", reply, rubric))
            await asyncio.sleep(0)
            return True

    async def main():
        pool = JudgePool("llm", SimpleNamespace(model=SimpleNamespace(spec="j"), width=1))
        a, b = Owner(), Owner()
        pool.put(a, Pending(None, None, "two"))
        pool.put(a, Pending(None, None, "none"))
        pool.put(a, Pending(None, None, "last"))
        pool.put(b, Pending(None, None, "b"))
        assert log == [] and pool.n_queued == 4  # nothing rendered while it waits
        worker = asyncio.create_task(pool.work())
        await asyncio.sleep(0)
        pool.close()
        await worker
        return pool

    pool = asyncio.run(main())
    assert log == [("render", "two"), ("judge", "two", "r1"), ("render", "b"), ("judge", "b", "r1"),
                   ("judge", "two", "r2"), ("render", "none"), ("render", "last"), ("judge", "last", "r1")]
    assert (pool.n_queued, pool.n_done) == (4, 4)  # what was judged: the reply needing none counts nothing
