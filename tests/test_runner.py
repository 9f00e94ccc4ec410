"""The runner against loopback fake OpenAI and Anthropic servers, through the real SDK code paths."""

import asyncio
import json
import signal
import sqlite3
import threading
import time

import pytest

import forking
from conftest import run_cli, run_quiet, run_spec
from trustmh.engine import Limits
from trustmh.testing.fake_server import Fault, FakeLLMServer


def rating_reply(body):
    """Answer tier-1 prompts with a rating derived from the prompt text (deterministic)."""
    text = body["messages"][-1]["content"]
    if "strongly agree" in text:  # tier 2 scale
        return f"Answer: {[-100, -50, 0, 50, 100][len(text) % 5]}) rating"
    return f"Answer: {1 + len(text) % 4}) rating"


def test_openai_run_then_rerun_makes_no_new_calls(upstream, tmp_path):
    with FakeLLMServer(reply=rating_reply) as srv:
        spec = run_spec(models=["openai/fake-model"], base_url=srv.openai_base_url, tasks="privacy.awareness_tier1",
                        suite="data", data_dir=str(upstream))
        _, res, calls = run_quiet(spec, tmp_path / "run")
        t = res.models["openai/fake-model"].tasks["privacy.awareness_tier1"]
        assert t.n == 10 and t.n_errors == 0
        assert srv.n_requests == 10 and calls["openai/fake-model"] == 10
        sent = srv.requests[0]
        assert sent["model"] == "fake-model" and sent["temperature"] == 0.0 and sent["max_tokens"] == 365
        _, res2, calls2 = run_quiet(spec, tmp_path / "run")
        assert srv.n_requests == 10 and calls2["openai/fake-model"] == 0
        assert res2.models["openai/fake-model"].tasks["privacy.awareness_tier1"].value == t.value
    lines = (tmp_path / "run" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 10 and json.loads(lines[0])["response"].startswith("Answer:")


def test_anthropic_run_and_llm_judge(upstream, tmp_path):
    def reply(body):
        if "APA" in body["messages"][-1]["content"]:
            return '{"sc1": 4, "sc2": 3, "sc3": 5, "sc4": 2, "sc5": 4}'
        return '```json\n{"choice": "A", "reasoning": "safety first"}\n```'

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["anthropic/claude-fake"], base_url=srv.base_url, judge="anthropic/judge-fake",
                        judge_base_url=srv.base_url, tasks="ethics", suite="data", data_dir=str(upstream), limit=12)
        run_dir, res, _ = run_quiet(spec, tmp_path / "run")
        assert srv.n_requests == 24  # 12 generations + 12 judgements
        bodies = srv.requests
    t = res.models["anthropic/claude-fake"].tasks["ethics.reasoning"]
    assert t.n == 12 and t.n_errors == 0
    assert (t.metrics["sc1"].value, t.metrics["sc4"].value) == (4.0, 2.0)
    assert t.metrics["judge_mean"].value == pytest.approx(3.6)
    # temperature 0 reaches the server exactly when the installed SDK can send it; when it cannot, the
    # results say so for the model and the judge instead of silently claiming temperature 0
    import inspect

    import anthropic
    sendable = "temperature" in inspect.signature(anthropic.AsyncAnthropic(api_key="k").messages.create).parameters
    assert all(("temperature" in b) == sendable for b in bodies)
    assert all(b.get("temperature", 0) == 0 for b in bodies)
    if sendable:
        assert res.notes == []
    else:
        assert [n.split(":")[0] for n in res.notes] == ["model anthropic/claude-fake", "judge anthropic/judge-fake"]
        assert all("temperature" in n and "not sent" in n for n in res.notes)
        from trustmh.report import write_report
        page = write_report([run_dir], tmp_path / "report.html", paired=False).read_text()
        assert page.count("judge anthropic/judge-fake: temperature and top_p not sent") == 2  # top and spec


def test_retry_after_is_honoured(upstream, tmp_path, monkeypatch):
    """The retry waits for the server's Retry-After (0.6 s), not the 0.01 s back-off. Checked by order, not
    by the clock: the 429, then the client asking to sleep 0.6 s, then the retry."""
    events = []
    real_sleep = asyncio.sleep

    async def recording_sleep(delay, *args, **kw):
        if delay > 0:
            events.append(("sleep", delay))
        return await real_sleep(delay, *args, **kw)

    monkeypatch.setattr(asyncio, "sleep", recording_sleep)

    def faults(n, body):
        events.append(("request", n))
        return Fault("status", status=429, retry_after=0.6) if n == 0 else None

    with FakeLLMServer(reply=rating_reply, faults=faults) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="privacy.awareness_tier1",
                        suite="data", data_dir=str(upstream), limit=1)
        _, res, _ = run_quiet(spec, tmp_path / "run", limits=Limits(max_connections=1, backoff_base=0.01))
    first, retry = events.index(("request", 0)), events.index(("request", 1))
    between = [d for kind, d in events[first:retry] if kind == "sleep"]
    assert between and max(between) == pytest.approx(0.6, abs=0.01), events
    assert not any(d < 0.1 for d in between), events  # no back-off-sized wait before the retry
    t = res.models["openai/fake"].tasks["privacy.awareness_tier1"]
    assert t.n_errors == 0 and t.n == 1


def test_permanent_errors_are_counted_not_scored(upstream, tmp_path):
    def faults(n, body):
        if "Their social security number" in body["messages"][-1]["content"]:
            return Fault("status", status=400)
        return None

    with FakeLLMServer(reply=rating_reply, faults=faults) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="privacy.awareness_tier1",
                        suite="data", data_dir=str(upstream))
        _, res, _ = run_quiet(spec, tmp_path / "run", limits=Limits(backoff_base=0.01))
    t = res.models["openai/fake"].tasks["privacy.awareness_tier1"]
    assert t.n_errors == 1 and t.error_kinds == {"bad_request": 1} and t.n == 9
    rows = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    bad = [r for r in rows if r["error"]] if all("error" in r for r in rows) else [r for r in rows if r.get("error")]
    assert len(bad) == 1 and bad[0]["response"] is None and "values" not in bad[0]


@pytest.mark.needs_methods
def test_kill_mid_run_then_resume_pays_each_call_once(upstream, tmp_path):
    """Kill -9 the CLI while 4 requests are held at the server, resume, and count paid calls there."""
    hold = {"on": True}

    def faults(n, body):
        return Fault("stall", stall_s=60) if hold["on"] and n >= 30 else None

    with FakeLLMServer(reply=rating_reply, faults=faults, latency_s=0.01) as srv:
        cmd = ["-m", "trustmh.cli", "run", "-m", "openai/fake", "--base-url", srv.openai_base_url,
               "--tasks", "privacy.awareness_tier2a", "--suite", "data", "--data-dir", str(upstream),
               "--out", str(tmp_path / "run"), "--max-connections", "4", "--no-progress"]
        proc = forking.Forked(cmd)  # a process of its own, forked (tests/forking.py), to be killed
        deadline = time.monotonic() + 60
        while srv.n_requests < 34 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert srv.n_requests == 34  # 30 answered, 4 stalled in flight
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        db = sqlite3.connect(tmp_path / "run" / "store.sqlite")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT count(*) FROM calls WHERE ok = 1").fetchone()[0] == 30
        db.close()
        hold["on"] = False
        done = forking.run(cmd, timeout=120)
        assert done.returncode == 0, done.stderr
        assert srv.n_completed == 98
        assert srv.duplicate_paid_calls() == 0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["models"]["openai/fake"]["tasks"]["privacy.awareness_tier2a"]["n"] == 98


def test_results_json_matches_published_schema(upstream, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from trustmh.scoring.results import json_schema
    published = json.loads((Path(__file__).resolve().parents[1] / "src/trustmh/schema/results.schema.json").read_text())
    assert published == json_schema(), "regenerate src/trustmh/schema/results.schema.json"
    spec = run_spec(models=["baseline/random"], tasks="privacy,ethics", suite="data", data_dir=str(upstream), limit=5)
    run_quiet(spec, tmp_path / "run")
    jsonschema.validate(json.loads((tmp_path / "run" / "results.json").read_text()), published)


from pathlib import Path  # noqa: E402


def test_credentials_in_base_url_are_refused_without_echoing_them(tmp_path):
    """user:password@ in a base URL cannot work with bearer keys: a clear error that does not repeat the secret."""
    from trustmh.models import redact_url
    assert redact_url("http://gateway-user:s3cr3t-pw@127.0.0.1:9/v1") == "http://127.0.0.1:9/v1"
    assert redact_url("http://[::1]:9/v1") == "http://[::1]:9/v1"
    proc = run_cli("run", "-m", "openai/fake", "--base-url", "http://gateway-user:s3cr3t-pw@127.0.0.1:9/v1", "--suite",
                   "sample", "--tasks", "privacy.awareness_tier1", "--out", tmp_path / "run", "--no-progress")
    assert proc.returncode == 2 and "contains credentials" in proc.stderr and "Traceback" not in proc.stderr
    assert "s3cr3t-pw" not in proc.stdout + proc.stderr
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert b"s3cr3t-pw" not in path.read_bytes(), path


def test_an_untyped_backend_failure_is_an_error_not_a_crash(tmp_path, monkeypatch):
    from trustmh.models.baselines import CounselorBaseline

    def broken(self, request):
        if request.item_id == "1":
            raise ValueError("backend bug")
        if request.item_id == "2":  # a library quoting the key it was given: the key as sent, trimmed
            raise RuntimeError("rejected key sk-env-777 for this project")
        return "Answer: 4"

    monkeypatch.setattr(CounselorBaseline, "reply", broken)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-777\n")  # as `export OPENAI_API_KEY=$(cat key.txt)` leaves it
    spec = run_spec(models=["baseline/counselor"], tasks="privacy.awareness_tier1", suite="sample")
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models["baseline/counselor"].tasks["privacy.awareness_tier1"]
    assert t.error_kinds == {"other": 2} and t.n == t.n_samples - 2
    rows = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert [r["error"]["message"] for r in rows if r.get("error")] == [
        "ValueError: backend bug", "RuntimeError: rejected key [redacted] for this project"]


def test_slow_judge_does_not_hold_up_generation(upstream, tmp_path):
    """Generation and judging have their own workers: every judge call is held at the judge server until all
    16 generations have been answered, which only happens if no generation waits for a judge worker.
    (A pool shared by both would fill with held judge calls and stall: the judge server gives up waiting
    after 60 s and the test fails.)"""
    generated = []
    all_generated = threading.Event()
    judge_waits = []

    def gen_reply(body):
        generated.append(1)
        if len(generated) == 16:
            all_generated.set()
        return '{"choice": "A", "reasoning": "x"}'

    def judge_reply(body):
        # Runs on the judge server's own thread: holding it here holds every judge reply, not generation.
        judge_waits.append(all_generated.wait(timeout=60))
        return '{"sc1":3,"sc2":3,"sc3":3,"sc4":3,"sc5":3}'

    with FakeLLMServer(reply=gen_reply, latency_s=0.01) as gen_srv, FakeLLMServer(reply=judge_reply) as judge_srv:
        spec = run_spec(models=["openai/fake"], base_url=gen_srv.openai_base_url, judge="openai/judge",
                        judge_base_url=judge_srv.openai_base_url, tasks="ethics", suite="data",
                        data_dir=str(upstream), limit=16)
        _, res, _ = run_quiet(spec, tmp_path / "run", limits=Limits(max_connections=4))
    assert len(generated) == 16
    assert len(judge_waits) == 16 and all(judge_waits)  # no judge call had to give up waiting
    t = res.models["openai/fake"].tasks["ethics.reasoning"]
    assert t.n == 16 and t.metrics["sc1"].n == 16