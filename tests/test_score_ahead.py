"""The part of a task's scoring that rests on the reply alone (`Method.ahead`) is done as each reply arrives,
while the judge still works on the task, and the results are those of scoring everything at the end; ESConv's
reference metrics (reliability.support, robustness.support under the paper's protocol) use it."""

import functools
import json
import platform
import sys
import threading

import pytest

from conftest import run_quiet
from test_models_together import Judged1
from trustmh.engine import Limits
from trustmh.scoring.metrics import mean
from trustmh.tasks import TASKS, register
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.types import Item, Score

TASK_ID = "testahead.judged"
N = 12
LOG: list[tuple[str, str]] = []  # ("ahead" | "score", item id), in the order the run did them
CACHE: dict[tuple[str, str], int] = {}  # what ahead() computed, by (item id, reply)


def length(reply: str) -> int:
    return len(reply.split())


class Ahead(Judged1):  # test_models_together's judged task (prompt, judge messages, no rules verdict)
    id = TASK_ID
    title = "a judged task that computes a reply-only value ahead (test task)"

    def load(self, data, ctx):
        return [Item(f"i{n}", {"q": f"question {n} " + "word " * n}) for n in range(N)]

    def ahead(self, sample, reply, ctx):
        LOG.append(("ahead", sample.item.id))
        CACHE[(sample.item.id, reply)] = length(reply)

    def score(self, sample, reply, judged, ctx):
        LOG.append(("score", sample.item.id))
        if judged is None or judged.text is None:
            return Score(unscored={"rating": "no verdict"})
        # taken from the cache when ahead() ran on this very reply, computed here otherwise
        words = CACHE.pop((sample.item.id, reply), None)
        words = length(reply) if words is None else words
        return Score(values={"rating": float(judged.text.split(":")[1]), "words": float(words)})

    def aggregate(self, table, ctx):
        return {"rating": mean(table.col("rating")), "words": mean(table.col("words"))}


@pytest.fixture
def task():
    LOG.clear()
    CACHE.clear()
    register(Ahead)
    yield
    TASKS.pop(TASK_ID, None)


def reply(body):
    text = body["messages"][-1]["content"]
    if body["model"] == "j":
        return "Rating: 3"
    return f"{text} answered"


def test_reply_only_scoring_is_done_before_the_task_is_scored_with_the_same_results(spec_for, task, tmp_path):
    with FakeLLMServer(reply=reply, latency_s=0.02) as srv:
        spec = spec_for(srv, TASK_ID, n_boot=50)
        run_dir, results, calls = run_quiet(spec, tmp_path / "run", limits=Limits(max_connections=2))
        assert calls == {"openai/m": N, "judge": N}
        first_score = [kind for kind, _ in LOG].index("score")
        # every reply's ahead() ran while phase 1 went on, before the task's scoring began
        assert sorted(i for kind, i in LOG[:first_score] if kind == "ahead") == sorted(f"i{n}" for n in range(N))
        assert not CACHE  # each score took what ahead() computed for its reply
        before = json.loads((run_dir / "results.json").read_text())
        samples = (run_dir / "samples.jsonl").read_bytes()
        # re-scored from the store (no reply arrives, so nothing is done ahead): the same results
        LOG.clear()
        _, again, calls = run_quiet(spec, run_dir, generate=False)
        assert calls == {"openai/m": 0, "judge": 0} and ("ahead" not in {kind for kind, _ in LOG})
    after = json.loads((run_dir / "results.json").read_text())
    before.pop("created"), after.pop("created")
    assert after == before and (run_dir / "samples.jsonl").read_bytes() == samples
    t = results.models["openai/m"].tasks[TASK_ID]
    assert t.value == 3.0 and t.metrics["words"].value == pytest.approx(mean_words())


def mean_words():
    return sum(length(f"question {n} " + "word " * n + " answered") for n in range(N)) / N


def test_an_ahead_that_raises_leaves_the_work_to_score(spec_for, task, tmp_path, monkeypatch):
    def broken(self, sample, reply, ctx):
        LOG.append(("ahead", sample.item.id))
        raise RuntimeError("ahead failed")
    monkeypatch.setattr(Ahead, "ahead", broken)
    with FakeLLMServer(reply=reply, latency_s=0.01) as srv:
        spec = spec_for(srv, TASK_ID, n_boot=50)
        _, results, _ = run_quiet(spec, tmp_path / "run", limits=Limits(max_connections=2))
    assert ("ahead", "i0") in LOG
    assert results.models["openai/m"].tasks[TASK_ID].metrics["words"].value == pytest.approx(mean_words())


def test_esconv_reference_values_computed_ahead_are_taken_once_per_score():
    pytest.importorskip("nltk")
    from trustmh.tasks import esconv_reference as ref
    reply, target = "I hear you. That sounds hard.", "That must be really hard for you."
    fresh = ref.sample_values(reply, target)
    assert (reply, target, None) not in ref._AHEAD
    ref.values_ahead(reply, target)
    ref.values_ahead(reply, target)  # the same reply twice (two samples): computed once, taken twice
    assert ref._AHEAD[(reply, target, None)][2] == 2
    first = ref.sample_values(reply, target)
    first[0]["ref_hyp_len"] = -1.0  # a caller changing its copy changes nothing held
    assert ref.sample_values(reply, target) == fresh
    assert (reply, target, None) not in ref._AHEAD
    assert ref.sample_values(reply, target) == fresh  # and computed again when nothing is held


def test_idle_calls_are_made_once_during_phase_1_in_a_thread_and_a_failing_one_fails_nothing(spec_for, task, tmp_path):
    made = []

    def note():
        made.append(len(LOG))  # how much of the task was scored by then
        made.append(threading.current_thread() is threading.main_thread())  # off the event loop's thread
        made.append(sys.getswitchinterval())  # short while the thread works beside the loop

    def broken():
        made.append("broken")
        raise RuntimeError("idle work failed")

    # what the warm-up makes before the caller's calls, made already in this process: otherwise the first
    # replies (20 ms) may be scored while it imports them, and "before any sample" would be a race
    import trustmh.scoring.results  # noqa: F401
    from trustmh.tasks import load_pillars
    load_pillars()
    before = sys.getswitchinterval()
    assert before > 0.0005  # the interpreter's 5 ms, or a caller's own
    with FakeLLMServer(reply=reply, latency_s=0.02) as srv:
        spec = spec_for(srv, TASK_ID, n_boot=50)
        _, results, calls = run_quiet(spec, tmp_path / "run", limits=Limits(max_connections=2),
                                      idle=[broken, note])
    assert calls == {"openai/m": N, "judge": N}
    assert made == ["broken", 0, False, 0.0005]  # each once, in order, before any sample was scored, in a thread
    assert sys.getswitchinterval() == before  # and the interval found is back once it is done
    assert results.models["openai/m"].tasks[TASK_ID].value == 3.0


def test_the_scoring_versions_are_found_off_the_event_loop_before_phase_2_asks(spec_for, task, tmp_path, monkeypatch):
    """The files a task's scoring version hashes are found (its modules read with `ast`) in the thread that
    works while phase 1 waits, before any sample is scored, not on the event loop; the version results.json
    records is the one `scoring_version` gives."""
    from trustmh.tasks import versions
    versions._scoring_files.cache_clear()
    found = []
    real = versions._scoring_files.__wrapped__

    def noting(*classes):
        found.append((threading.current_thread().name, len(LOG)))
        return real(*classes)
    monkeypatch.setattr(versions, "_scoring_files", functools.lru_cache(maxsize=None)(noting))
    with FakeLLMServer(reply=reply, latency_s=0.02) as srv:
        _, results, _ = run_quiet(spec_for(srv, TASK_ID, n_boot=50), tmp_path / "run", limits=Limits(max_connections=2))
    assert found == [("trustmh-while-waiting", 0)]  # once, in that thread, before any sample was scored
    assert results.models["openai/m"].tasks[TASK_ID].scoring_version == versions.scoring_version(TASKS[TASK_ID]())


def test_the_package_versions_are_looked_up_off_the_event_loop_and_recorded_as_installed(spec_for, task, tmp_path,
                                                                                          monkeypatch):
    """results.json's package versions are looked up (a scan of sys.path's distributions each) in the
    thread that works while phase 1 waits, once per package, not after the last reply; they are the
    installed ones."""
    from importlib import metadata

    from trustmh.engine import spec as spec_module
    spec_module.package_versions.cache_clear()
    asked = []
    real = metadata.version

    def noting(name):
        asked.append((name, threading.current_thread().name))
        return real(name)
    monkeypatch.setattr(spec_module.metadata, "version", noting)
    try:
        with FakeLLMServer(reply=reply, latency_s=0.02) as srv:
            _, results, _ = run_quiet(spec_for(srv, TASK_ID, n_boot=50), tmp_path / "run",
                                      limits=Limits(max_connections=2))
    finally:
        spec_module.package_versions.cache_clear()  # the next test's lookups are the real ones
    packages = ["trustmh", "openai", "anthropic", "numpy", "scipy", "pydantic"]
    assert asked == [(name, "trustmh-while-waiting") for name in packages]
    installed = {}
    for name in packages:
        try:
            installed[name] = real(name)
        except metadata.PackageNotFoundError:
            pass
    assert results.versions == {"python": platform.python_version(), **installed}


def test_the_report_template_prepared_ahead_is_the_one_the_report_uses(tmp_path, monkeypatch):
    import jinja2

    from trustmh.report import html
    html._env.cache_clear()
    compiled = []
    real = jinja2.Environment.compile

    def counting(self, *a, **kw):
        compiled.append(a[1] if len(a) > 1 else kw.get("name"))
        return real(self, *a, **kw)
    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    html.prepare()
    assert compiled == ["report.html.j2"]
    assert html._env().get_template("report.html.j2") is html._env().get_template("report.html.j2")
    assert compiled == ["report.html.j2"]  # taken from the prepared environment, not compiled again


def test_short_switches_put_back_the_interval_found_when_the_last_user_leaves():
    """Two runs in threads of one process overlap: the interval is short while either works beside its
    loop, and the one found before the first is back after the last, whatever order they end in."""
    from trustmh.engine.run import _ShortSwitches
    before = sys.getswitchinterval()
    switches = _ShortSwitches()
    try:
        sys.setswitchinterval(0.002)
        switches.enter()
        switches.enter()
        assert sys.getswitchinterval() == 0.0005
        switches.leave()
        assert sys.getswitchinterval() == 0.0005  # the other still works
        switches.leave()
        assert sys.getswitchinterval() == 0.002
        sys.setswitchinterval(0.0001)  # already shorter: left as it is
        shorter = sys.getswitchinterval()  # (held in whole microseconds)
        switches.enter()
        assert sys.getswitchinterval() == shorter
        switches.leave()
        assert sys.getswitchinterval() == shorter
    finally:
        sys.setswitchinterval(before)


def test_the_interval_is_put_back_when_the_warm_up_thread_cannot_start(monkeypatch):
    """A process out of threads: the run fails as it would have, and the interval is not left short."""
    import asyncio

    from trustmh.engine.run import _while_waiting
    before = sys.getswitchinterval()

    def no_thread(self):
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    threads = []
    with pytest.raises(RuntimeError, match="can't start new thread"):
        asyncio.run(_while_waiting([lambda: None], threads))
    assert sys.getswitchinterval() == before and threads == []
