"""The judge stage: several judgements per sample, each stored, cached and resumed like a generation;
scoring reads verdicts back through links (no request rebuilt), detects a changed rubric, and never runs
a judge again; results.json stands alone for the report."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_quiet, run_spec
from trustmh.testing.fake_server import Fault, FakeLLMServer

N = 12
TASK_ID = "testjudge.two"
TASK_SRC = '''
from pathlib import Path

import jinja2

from trustmh.scoring.metrics import mean
from trustmh.tasks import TASKS, Judged, MetricSpec, Rubric, Task, Verdicts, register
from trustmh.types import Item, Score

HERE = Path(__file__).parent


class TwoJudges(Task):
    id = "testjudge.two"
    pillar = "ethics"
    title = "Two judgements per sample (test task)"
    dataset = "test"
    files = ()
    metric = MetricSpec("warmth", True, 0.0, 5.0, "mean warmth rating")
    primary_value = "warmth"
    rubrics = (Rubric("warmth", (str(HERE / "warmth.j2"),)), Rubric("accuracy", (str(HERE / "accuracy.j2"),)))

    def load(self, data, ctx):
        return [Item(f"i{n}", {"q": f"question {n}"}) for n in range(%d)]

    def prompt(self, item, ctx):
        return [{"role": "user", "content": item.input["q"]}]

    def judgements(self, sample, reply, ctx):
        return {r.name: [{"role": "user", "content": jinja2.Template(Path(r.templates[0]).read_text()).render(
            reply=reply)}] for r in self.rubrics}

    def rules_judge(self, sample, reply, ctx):
        return Verdicts({r.name: Judged(reason="needs an LLM judge") for r in self.rubrics})

    def score(self, sample, reply, judged, ctx):
        sc = Score()
        for name in ("warmth", "accuracy"):
            v = judged[name]
            if v.text is None:
                sc.unscored[name] = v.reason
            else:
                sc.values[name] = float(v.text.split(":")[1])
        return sc

    def aggregate(self, table, ctx):
        return {"warmth": mean(table.col("warmth")), "accuracy": mean(table.col("accuracy"))}


if "testjudge.two" not in TASKS:
    register(TwoJudges)
''' % N


def judge_reply(body):
    text = body["messages"][-1]["content"]
    if text.startswith("WARMTH"):
        return "Rating: 4"
    if text.startswith("ACCURACY"):
        return "Rating: 2"
    return f"An answer to {text}"


@pytest.fixture
def two_judges(tmp_path):
    """The test task, written as a module of its own (a subprocess can import it too), registered for the
    test and removed after it so that other tests' 'all tasks' stay the package's own."""
    from trustmh.tasks import TASKS
    mod_dir = tmp_path / "mod"
    mod_dir.mkdir()
    (mod_dir / "warmth.j2").write_text("WARMTH of this reply, as 'Rating: N':\n{{ reply }}")
    (mod_dir / "accuracy.j2").write_text("ACCURACY of this reply, as 'Rating: N':\n{{ reply }}")
    path = mod_dir / "two_judges.py"
    path.write_text(TASK_SRC)
    spec = importlib.util.spec_from_file_location("two_judges", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield mod_dir
    TASKS.pop(TASK_ID, None)


def task_result(res):
    return res.models["openai/m"].tasks[TASK_ID]


def test_two_judgements_per_sample_stored_and_rescored_without_calls(spec_for, two_judges, tmp_path):
    with FakeLLMServer(reply=judge_reply) as srv:
        spec = spec_for(srv, TASK_ID)
        _, res, calls = run_quiet(spec, tmp_path / "run")
        assert srv.n_requests == 3 * N and calls == {"openai/m": N, "judge": 2 * N}
        t = task_result(res)
        assert t.value == 4.0 and t.metrics["accuracy"].value == 2.0 and t.n == N
        assert set(t.judgements) == {"warmth", "accuracy"} and t.title.startswith("Two judgements")
        line = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
        assert line["verdicts"] == {"warmth": {"text": "Rating: 4", "reason": None},
                                    "accuracy": {"text": "Rating: 2", "reason": None}}
        # Rerun and re-score: nothing is paid again.
        run_quiet(spec, tmp_path / "run")
        _, again, calls = run_quiet(spec, tmp_path / "run", generate=False)
        assert srv.n_requests == 3 * N and calls == {"openai/m": 0, "judge": 0}
        assert task_result(again).metrics["accuracy"].value == 2.0


def test_changed_rubric_is_reported_on_score_not_paid_for(spec_for, two_judges, tmp_path):
    with FakeLLMServer(reply=judge_reply) as srv:
        spec = spec_for(srv, TASK_ID)
        run_quiet(spec, tmp_path / "run")
        (two_judges / "accuracy.j2").write_text("ACCURACY (revised wording) as 'Rating: N':\n{{ reply }}")
        _, res, calls = run_quiet(spec, tmp_path / "run", generate=False)
        assert srv.n_requests == 3 * N and calls["judge"] == 0  # detected, not silently re-judged
        t = task_result(res)
        assert t.n_stale_judgements == N
        assert t.value == 4.0  # the unchanged rubric still counts
        assert t.metrics["accuracy"].value is None
        assert t.unscored_by_value["accuracy"] == {
            "judged with another version of the rubric (rerun to refresh it, or score with --accept-stored)": N}
        assert any("another version of their rubric" in n for n in res.notes)
        # --accept-stored uses them as they are.
        _, accepted, _ = run_quiet(spec, tmp_path / "run", generate=False, accept_stored=True)
        assert task_result(accepted).metrics["accuracy"].value == 2.0 and task_result(accepted).n_stale_judgements == 0
        # A rerun refreshes exactly the changed rubric's judgements.
        _, fresh, calls = run_quiet(spec, tmp_path / "run")
        assert srv.n_requests == 4 * N and calls == {"openai/m": 0, "judge": N}
        assert task_result(fresh).n_stale_judgements == 0 and task_result(fresh).metrics["accuracy"].value == 2.0


def test_score_cli_reports_a_changed_rubric(spec_for, two_judges, tmp_path):
    with FakeLLMServer(reply=judge_reply) as srv:
        run_quiet(spec_for(srv, TASK_ID), tmp_path / "run")
        (two_judges / "warmth.j2").write_text("WARMTH, reworded:\n{{ reply }}")
        code = (f"import importlib.util, sys; s = importlib.util.spec_from_file_location('t', {str(two_judges / 'two_judges.py')!r}); "
                "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
                "sys.argv = ['trustmh', 'score', sys.argv[1], '--no-progress']; from trustmh.cli import main; main()")
        env = dict(os.environ, OPENAI_API_KEY="k")
        done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True,
                              timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        assert f"{N} stored judgements of openai/m were made with another rubric" in done.stderr
        assert srv.n_requests == 3 * N


KILL_SCRIPT = r"""
import importlib.util, sys
from pathlib import Path
s = importlib.util.spec_from_file_location("two_judges", sys.argv[1])
m = importlib.util.module_from_spec(s); s.loader.exec_module(m)
from trustmh.engine import Limits, RunSpec, run
url = sys.argv[2]
spec = RunSpec(models=["openai/m"], judge="openai/j", base_url=url, judge_base_url=url, tasks="testjudge.two",
               n_boot=200)
run(spec, Path(sys.argv[3]), limits=Limits(max_connections=4))
"""


def test_two_judgements_resume_after_kill(spec_for, two_judges, tmp_path):
    admitted = [N + N // 2]  # the server answers this many requests, then holds the rest until the kill

    def hold_the_rest(n: int, body: dict) -> Fault | None:
        return Fault("stall", stall_s=600) if admitted[0] is not None and n >= admitted[0] else None

    with FakeLLMServer(reply=judge_reply, latency_s=0.05, faults=hold_the_rest) as srv:
        env = dict(os.environ, OPENAI_API_KEY="k")
        proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(two_judges / "two_judges.py"),
                                 srv.openai_base_url, str(tmp_path / "run")], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while srv.n_completed < N + N // 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.1)  # let the server notice the dead connections
        admitted[0] = None
        before = srv.n_completed
        assert before < 3 * N  # killed while judging
        _, res, calls = run_quiet(spec_for(srv, TASK_ID), tmp_path / "run", limits=None)
        t = task_result(res)
        assert t.n == N and t.metrics["accuracy"].value == 2.0 and t.n_judge_errors == 0
        # Only what was not stored is paid again: at most the calls in flight at the kill (4 per endpoint,
        # model and judge).
        assert srv.duplicate_paid_calls() <= 8
        assert srv.n_requests <= 3 * N + 8


def test_report_renders_a_run_whose_task_code_is_absent(spec_for, two_judges, tmp_path):
    from trustmh.report import write_report
    from trustmh.tasks import TASKS
    with FakeLLMServer(reply=judge_reply) as srv:
        run_quiet(spec_for(srv, TASK_ID), tmp_path / "run")
    TASKS.pop(TASK_ID)
    html = write_report([tmp_path / "run"], tmp_path / "r.html").read_text()
    assert "Two judgements per sample (test task)" in html and "mean warmth rating" in html


def test_classifier_verdicts_are_stored_and_not_rerun_on_rescore(upstream, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from test_refusal import tiny_classifier
    from trustmh.judges import hf_classifier
    path = tiny_classifier(tmp_path / "cls")
    with FakeLLMServer(reply=lambda body: "Sorry this is not something I will write.") as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="safety.jailbreak",
                        suite="data", data_dir=str(upstream), limit=8, refusal_classifier=f"hf/{path}")
        _, res, calls = run_quiet(spec, tmp_path / "run")
    # Eight replies alike: those classified at the same moment are one call (single flight), each stored.
    assert 1 <= calls["judge"] <= 8
    from trustmh.engine._store import Store
    store = Store(tmp_path / "run" / "store.sqlite")
    stored = store.db.execute("SELECT count(*) FROM calls WHERE endpoint LIKE 'classifier/%' AND ok = 1").fetchone()[0]
    store.close()
    assert stored == 8
    # Re-scoring must not load the classifier at all.
    monkeypatch.setattr(hf_classifier, "_load", lambda model: (_ for _ in ()).throw(AssertionError("classifier ran")))
    _, again, calls = run_quiet(spec, tmp_path / "run", generate=False)
    assert calls.get("judge", 0) == 0
    a, b = res.models["openai/fake"].tasks["safety.jailbreak"], again.models["openai/fake"].tasks["safety.jailbreak"]
    assert a.value == b.value == 1.0 and b.n == 8
