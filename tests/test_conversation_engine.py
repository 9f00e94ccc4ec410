"""crisis.conversation in the engine: conversations as chains of dependent calls against loopback servers
that play the simulated person, the tested models and the judge with scripted turns.

* Kills: `kill -9` the real `trustmh run` process at seeded turns (the server answers K requests, then
  holds the next; the kill lands once those K replies are committed, mid-conversation), resume with the same
  command, and compare with an uninterrupted run: the same transcripts and verdicts, and no turn paid twice
  (the server counts every reply it sent by request body). A random kill (a seeded delay) may lose at most
  the replies in flight.
* Every model's conversations run at once, each endpoint within its own bound (the servers' peak in flight).
* Replayed transcripts: VERA-MH's 105 concept-paper conversations, judged end to end by a scripted judge
  without calling any model; a trustmh transcript file the same way."""

import json
import os
import random
import re
import shutil
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

import forking
from conftest import IN_CI, methods_with_vera, run_cli, run_quiet, run_spec

from trustmh.testing.fake_server import Fault, FakeLLMServer

PERSONAS = "Tove,Idris"
RUNS, TURNS = 2, 8
HOLD = Fault("stall", stall_s=600)


def script(body: dict) -> str:
    """Deterministic turns: the person's lines carry its run's seed (so no two conversations send one body),
    the bot echoes, the judge answers the first option of a choice and No otherwise."""
    msgs, who, last = body["messages"], body["model"], body["messages"][-1]["content"]
    if who == "person":
        k = sum(m["role"] == "assistant" for m in msgs) + 1
        name = re.search(r"^- (\S+) \(", msgs[0]["content"], re.M)[1]  # the sample persona prompt's first line
        return f"{name} run{body.get('seed')} line {k}"
    if who.startswith("bot"):
        return f"{who} heard: {last[-40:]}"
    if "FIRST_HARM" in last:
        return "FIRST_HARM: none\nFIRST_HELP: 1\nREASONING: s"
    if "Kept or Drifted" in last:
        return "ANSWER: Kept\nREASONING: s"
    opts = re.findall(r"^- (.+)$", last, re.M)
    pick = opts[0] if opts and opts[:2] != ["Yes", "No"] else "No"
    return f"ANSWER: {pick}\nREASONING: s"


class Gate:
    """Admit `budget` more requests, then hold every further one (until the client is gone)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.budget: int | None = None
        self.held = 0

    def __call__(self, n: int, body: dict):
        with self.lock:
            if self.budget is None:
                return None
            if self.budget > 0:
                self.budget -= 1
                return None
            self.held += 1
            return HOLD


def _args(url: str, out: Path) -> list[str]:
    return ["run", "--tasks", "crisis.conversation", "--suite", "sample", "--personas", PERSONAS, "--runs", str(RUNS),
            "--turns", str(TURNS), "--model", "openai/bot", "--base-url", url, "--user-model", "openai/person",
            "--user-model-base-url", url, "--judge", "openai/judge", "--judge-base-url", url, "--max-connections", "2",
            "--out", str(out), "--no-progress", "--bootstrap", "50", "--max-retries", "0"]


def _cli(args) -> forking.Forked:
    """`trustmh ARGS` in a process of its own (forked: tests/forking.py), to be killed."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY",)}
    return forking.Forked(["-m", "trustmh.cli", *args], env=env)


def _stored(out: Path) -> int:
    db = out / "store.sqlite"
    if not db.is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return con.execute("SELECT COUNT(*) FROM calls WHERE ok = 1 AND purpose NOT IN "
                               "('conversation', 'judge:walk')").fetchone()[0]
    except sqlite3.Error:
        return 0


def _end_state(out: Path) -> dict:
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {(r["item_id"], r["variant"]): (json.loads(r["response"])["turns"], r["verdicts"], r["values"])
            for r in rows}


def test_kills_mid_conversation_resume_to_the_same_result_and_pay_no_turn_twice(tmp_path):
    gate = Gate()
    with FakeLLMServer(reply=script, faults=gate) as srv:
        url = srv.openai_base_url
        ref = _cli(_args(url, tmp_path / "ref"))
        assert ref.wait(timeout=120) == 0, ref.output()[1]
        clean = _end_state(tmp_path / "ref")
        total = srv.n_completed
        assert len(clean) == 2 * RUNS and all(len(t) == TURNS for t, _, _ in clean.values())
        assert srv.duplicate_paid_calls() == 0
        # Seeded kill points: while the conversations talk (their 32 turns come first, the judge's walks after
        # each conversation ends), and while the judge walks the rubric.
        rng = random.Random(36)
        talking = 2 * RUNS * TURNS
        points = [rng.randrange(3, talking - 2) for _ in range(3 if IN_CI else 1)]
        points += [rng.randrange(talking + 2, total - 2) for _ in range(2 if IN_CI else 1)]
        for i, k in enumerate(points):
            out = tmp_path / f"kill{i}"
            srv.reset_counters()
            gate.budget, gate.held = k, 0
            proc = _cli(_args(url, out))
            deadline = time.monotonic() + 60
            while not (gate.held and _stored(out) >= k) and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.02)
            assert proc.poll() is None, f"the run ended before its kill at {k}: {proc.output()[1]}"
            assert _stored(out) == k  # every reply the server sent is committed; the next is held
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            gate.budget = None
            again = _cli(_args(url, out))
            assert again.wait(timeout=120) == 0, again.output()[1]
            assert srv.duplicate_paid_calls() == 0, f"kill at reply {k}: a turn was paid twice"
            assert srv.n_completed == total, (k, srv.n_completed, total)  # each turn paid exactly once in all
            assert _end_state(out) == clean, f"kill at reply {k}: not the uninterrupted run's result"


def test_a_kill_at_a_random_moment_loses_at_most_what_was_in_flight(tmp_path):
    with FakeLLMServer(reply=script, latency_s=0.01) as srv:
        url = srv.openai_base_url
        ref = _cli(_args(url, tmp_path / "ref"))
        assert ref.wait(timeout=120) == 0, ref.output()[1]
        clean, total = _end_state(tmp_path / "ref"), srv.n_completed
        srv.reset_counters()
        proc = _cli(_args(url, tmp_path / "run"))
        while srv.n_completed < total // 3 and proc.poll() is None:
            time.sleep(0.005)
        time.sleep(random.Random(7).uniform(0, 0.02))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        again = _cli(_args(url, tmp_path / "run"))
        assert again.wait(timeout=120) == 0, again.output()[1]
        assert srv.duplicate_paid_calls() <= 2 * 2 + 2  # in flight at the kill: 2 connections per endpoint
        assert _end_state(tmp_path / "run") == clean


def test_every_models_conversations_run_at_once_each_endpoint_within_its_bound(tmp_path):
    from trustmh.engine import Limits
    person, models = FakeLLMServer(reply=script, latency_s=0.05), FakeLLMServer(reply=script, latency_s=0.05)
    with person, models:
        spec = run_spec(models=["openai/bot-a", "openai/bot-b"], base_url=models.openai_base_url,
                        tasks="crisis.conversation",
                        personas=PERSONAS, runs=3, turns=6, user_model="openai/person", user_model_base_url=person.openai_base_url)
        run_quiet(spec, tmp_path / "run", limits=Limits(max_connections=4))
        # 2 models x 6 conversations x 3 person turns, less the 6 first messages, which do not depend on the
        # model and are asked once for both (the same request): the person's endpoint is the busiest and is
        # kept full, never past its bound; each model's endpoint stays within its own 4, both at the same time.
        assert person.n_completed == 36 - 6 and models.n_completed == 36
        assert person.max_in_flight == 4
        assert 4 < models.max_in_flight <= 8
    res = json.loads((tmp_path / "run/results.json").read_text())
    for m in ("openai/bot-a", "openai/bot-b"):
        t = res["models"][m]["tasks"]["crisis.conversation"]
        assert t["n_samples"] == 6 and t["n_errors"] == 0 and t["n_judge_failed"] == 0


def test_an_api_error_ends_a_conversation_as_an_error_never_as_its_text(tmp_path):
    def faults(n, body):  # the tested model's reply to Idris's third message in run 1 fails for good (400)
        return Fault("status", status=400) if body["messages"][-1]["content"] == "Idris run1 line 3" else None

    with FakeLLMServer(reply=script, faults=faults) as srv:
        url = srv.openai_base_url
        spec = run_spec(models=["openai/bot"], base_url=url, tasks="crisis.conversation",
                        personas=PERSONAS, runs=RUNS, turns=TURNS, user_model="openai/person", user_model_base_url=url)
        run_quiet(spec, tmp_path / "run")
        asked = [b["messages"][-1]["content"] for b in srv.requests if b["model"] == "person"]
    t = json.loads((tmp_path / "run/results.json").read_text())["models"]["openai/bot"]["tasks"]["crisis.conversation"]
    assert t["n_errors"] == 1 and t["error_kinds"] == {"bad_request": 1} and t["n_samples"] == 2 * RUNS
    rows = {(r["item_id"], r["variant"]): r for r in map(json.loads, (tmp_path / "run/samples.jsonl").read_text().splitlines())}
    failed = rows[("Idris", "run1")]
    assert "Error generating response" not in json.dumps(list(rows.values()))
    assert failed["response"] is None and "values" not in failed  # an error of the sample, never scored
    assert failed["error"] == {"kind": "bad_request", "message": "message 6 (tested model): HTTP 400: injected fault: "
                                                                 "HTTP 400"}
    assert all(r["values"].get("rated") == 1.0 for k, r in rows.items() if k != ("Idris", "run1"))
    # the conversation stopped there: the person was not asked again after the failed reply
    assert not any("Idris run1 line 3" in a for a in asked)


# Three of the seven personas of the concept-paper transcripts (Omar, Lena, Ray, Maya, Noah, Kevin, Sky).
PERSONAS_JUDGED = "Omar,Lena,Ray"


@pytest.mark.parametrize("protocol", ["paper", "trustmh"])
def test_the_concept_paper_transcripts_of_three_personas_are_judged_end_to_end_without_calling_a_model(tmp_path, vera, protocol):
    from conftest import methods_with_vera
    data = tmp_path / "data"
    data.mkdir()
    (data / "vera-mh").symlink_to(vera)
    folders = sorted(p for p in (vera / "conversations").iterdir() if p.is_dir())
    if protocol == "trustmh":  # the corrected method on one folder (the paper's takes all three)
        folders = [p for p in folders if "gpt_4o" in p.name]
    # 15 of each folder's 35 transcripts, copied as they are: every judge call of the rubric walk carries a
    # whole transcript, and the other four personas add the suite's time, not a path (Lena's is read below).
    three = PERSONAS_JUDGED.split(",")
    for p in folders:
        (tmp_path / p.name).mkdir()
        for f in p.iterdir():
            if f.suffix == ".txt" and f.name.split("_")[1] in three:
                shutil.copyfile(f, tmp_path / p.name / f.name)
    models = [f"transcripts/{tmp_path / p.name}" for p in folders]
    with FakeLLMServer(reply=script) as srv:
        url = srv.openai_base_url
        spec = run_spec(models=models, judge="openai/judge", judge_base_url=url, tasks="crisis.conversation",
                        suite="data", data_dir=str(data), protocol=protocol, methods_dir=str(methods_with_vera(tmp_path)),
                        personas=PERSONAS_JUDGED)
        run_quiet(spec, tmp_path / "run")
        sent = srv.requests
    assert {b["model"] for b in sent} == {"judge"}  # only the judge was called: no model, no simulated person
    res = json.loads((tmp_path / "run/results.json").read_text())
    rows = [json.loads(x) for x in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert len(rows) == 5 * len(three) * len(folders) and (protocol == "trustmh" or len(folders) == 3)
    assert {r["item_id"] for r in rows} == set(three)
    for m in models:
        t = res["models"][m]["tasks"]["crisis.conversation"]
        assert (t["n_samples"], t["n_errors"], t["n_judge_failed"], t["n"]) == (15, 0, 0, 15), t
        assert t["protocol"] == protocol and 0 <= t["value"] <= 100
    # The scripted judge takes the first option of a choice and No otherwise: under both walks the person
    # "makes statements" at Q4 and denies at Q13, and every yes/no is No, so every dimension is Best Practice.
    assert all(r["parsed"]["ratings"] == dict.fromkeys(r["parsed"]["ratings"], "Best Practice") for r in rows)
    lena = next(p for p in sorted((vera / "conversations").rglob("*_Lena_g4o_run3.txt")))  # in the gpt-4o folder
    if protocol == "paper":  # VERA-MH's judge reads the file whole: its `agent:` labels and all
        preamble = (vera / "data/rubric_prompt_beginning.txt").read_text(encoding="utf-8")
        want = preamble.format(conversation=lena.read_text(encoding="utf-8"))
        assert any(b["messages"][0]["content"] == want for b in sent)
    else:
        first = lena.read_text(encoding="utf-8").split("\n\n")[0].removeprefix("user: ")
        assert any(f"[person 1] {first}" in b["messages"][0]["content"] for b in sent)
        assert all(r["values"]["drifted"] == 0.0 for r in rows)


def test_a_trustmh_transcript_file_is_judged_and_a_bad_one_is_one_line(tmp_path):
    good = tmp_path / "mine.jsonl"
    turns = [{"role": "user", "text": "i feel low"}, {"role": "chatbot", "text": "Please call 988 now."}]
    good.write_text("".join(json.dumps({"persona": p, "run": 1, "turns": turns}) + "\n" for p in ("Tove", "Idris")))
    spec = run_spec(models=[f"transcripts/{good}"], tasks="crisis.conversation",
                    personas=PERSONAS, runs=1)
    run_quiet(spec, tmp_path / "run")
    t = json.loads((tmp_path / "run/results.json").read_text())["models"][f"transcripts/{good}"]["tasks"]["crisis.conversation"]
    assert (t["n_samples"], t["n_errors"], t["n"]) == (2, 0, 2)
    rows = [json.loads(x) for x in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert json.loads(rows[0]["response"])["turns"] == turns
    assert rows[0]["values"]["help_event"] == 1.0 and rows[0]["values"]["help_turn"] == 1.0  # 988 at chatbot 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"persona": "Tove", "run": 1, "turns": [{"role": "bot", "text": "x"}]}) + "\n")
    proc = run_cli("run", "--model", f"transcripts/{bad}", "--tasks", "crisis.conversation", "--out", tmp_path / "r2",
                   "--no-progress")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{bad}:1: turn 1: expected" in proc.stderr


def test_progress_counts_conversations_and_turns_and_the_view_shows_them(tmp_path):
    from trustmh.cli.render import _ProgressView
    from trustmh.engine import TaskProgress
    events = []
    view = _ProgressView(False)
    spec = run_spec(models=["baseline/counselor"], tasks="crisis.conversation",
                    personas=PERSONAS, runs=RUNS, turns=10)
    with view:
        run_quiet(spec, tmp_path / "run", events=lambda e: (events.append(e), view(e)))
    rows = [e for e in events if isinstance(e, TaskProgress) and e.task == "crisis.conversation"]
    # the scripted person says it is done at its fourth message: 7 messages a conversation, 4 conversations
    assert rows[-1].finished and (rows[-1].done, rows[-1].total, rows[-1].turns) == (4, 4, 4 * 7)
    assert [r.turns for r in rows] == sorted(r.turns for r in rows)
    shown = [t for t in view.bars.tasks if "crisis.conversation" in t.description]
    assert not shown or "conversations" in shown[0].fields["count"]


def test_rescoring_a_conversation_run_with_an_llm_judge_calls_only_the_judge(tmp_path):
    spec = run_spec(models=["baseline/counselor"], tasks="crisis.conversation", personas=PERSONAS, runs=1)
    run_quiet(spec, tmp_path / "run")
    before = json.loads((tmp_path / "run/samples.jsonl").read_text().splitlines()[0])["response"]
    with FakeLLMServer(reply=script) as srv:
        proc = run_cli("score", tmp_path / "run", "--judge", "openai/judge", "--judge-base-url", srv.openai_base_url)
        models = {b["model"] for b in srv.requests}
    assert proc.returncode == 0, proc.stderr
    assert models == {"judge"}  # the conversations were read back, never talked again
    rows = [json.loads(x) for x in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert rows[0]["response"] == before and all(r["values"]["rated"] == 1.0 for r in rows)
    res = json.loads((tmp_path / "run/results.json").read_text())
    assert res["spec"]["judge"] == "openai/judge"
    assert res["models"]["baseline/counselor"]["tasks"]["crisis.conversation"]["n_judge_failed"] == 0


def test_dry_run_counts_turns_as_upper_bounds_and_max_cost_needs_the_persons_price(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["OPENAI_API_KEY"] = "sk-test-not-a-key"
    args = ["run", "--tasks", "crisis.conversation", "--model", "openai/gpt-4o",
            "--judge", "openai/gpt-4.1", "--user-model", "openai/gpt-4o-mini", "--out", str(tmp_path / "run")]
    dry = run_cli(*args, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    text = " ".join(dry.stdout.split())
    # 4 sample personas x 5 runs x 30 messages: at most 15 model and 15 person turns a conversation; the judge
    # walks the sample rubric's 13 questions at most, then the fidelity and per-turn judgements
    assert re.search(r"crisis\.conversation │ openai/gpt-4o │ 20 │ ≤300 │ ≤\d+ │ ≤300 │ ≤\d+", text), text[:600]
    assert re.search(r"simulated person │ openai/gpt-4o-mini │ 300 │", text) and "upper bounds (≤)" in text
    capped = run_cli(*args[:-2], "--user-model", "openai/no-such-price", "--out", tmp_path / "r2", "--max-cost", "1",
                     env=env)
    assert capped.returncode == 2 and "no price for openai/no-such-price" in capped.stderr


def test_a_drifted_person_is_counted_apart_and_left_out_of_the_ratings(tmp_path):
    recorded = tmp_path / "mine.jsonl"
    lines = []
    for name in ("Tove", "Idris"):
        for run in (1, 2):
            person = "As an AI language model, I can help you." if (name, run) == ("Idris", 2) else "i feel low"
            lines.append(json.dumps({"persona": name, "run": run, "turns": [
                {"role": "user", "text": person}, {"role": "chatbot", "text": "Please call 988."}]}))
    recorded.write_text("\n".join(lines) + "\n")
    spec = run_spec(models=[f"transcripts/{recorded}"], tasks="crisis.conversation",
                    personas=PERSONAS, runs=2)
    run_quiet(spec, tmp_path / "run")  # the rules judge reads a person speaking as an assistant as drift
    t = json.loads((tmp_path / "run/results.json").read_text())["models"][f"transcripts/{recorded}"]["tasks"][
        "crisis.conversation"]
    assert t["metrics"]["drift_rate"]["value"] == 0.25 and t["metrics"]["drift_rate"]["n"] == 4
    assert t["n"] == 3 and t["unscored_reasons"] == {"the simulated person drifted from its persona": 1}
    rows = {(r["item_id"], r["variant"]): r for r in map(json.loads, (tmp_path / "run/samples.jsonl").read_text().splitlines())}
    drifted = rows[("Idris", "run2")]
    assert drifted["values"]["drifted"] == 1.0 and "rated" not in drifted["values"]
    # one exclusion rule for every metric (the help rates too), and the primary value with the drifted beside
    m = t["metrics"]
    assert m["ever_helped"]["n"] == m["first_help_rate"]["n"] == m["conversations_with_hph"]["n"] == 3
    assert m["vera_score_with_drifted"]["n"] == 4 and m["vera_score"]["n"] == 3


_RSS_CHILD = """
import sys
from trustmh.cli import main
sys.argv = ["trustmh", *sys.argv[1:]]
code = 0
try:
    main()
except SystemExit as e:
    code = e.code
# VmHWM, this process's peak RSS: getrusage's ru_maxrss would also count the parent's RSS at the fork (Linux
# keeps the larger of the two over exec)
print("peak_rss_kb", open("/proc/self/status").read().split("VmHWM:")[1].split()[0], file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("protocol", ["paper", "trustmh"])
def test_a_10_mb_reply_a_turn_ends_the_conversation_as_an_error_in_bounded_memory(tmp_path, protocol, vera):
    """The tested model answers 10 MB each turn: the conversation stops at the first such reply as an error
    of its sample (reply_too_large, counted), nothing of it is stored, the run's memory stays bounded and
    it exits non-zero (every sample failed, over --max-failed's 5 %)."""
    import subprocess
    import sys
    big = "x" * (10 << 20)

    def reply(body):
        return big if body["model"] == "bot" else "I have not slept in days." if body["model"] == "person" else script(body)

    data = tmp_path / "data"
    data.mkdir()
    (data / "vera-mh").symlink_to(vera)
    with FakeLLMServer(reply=reply) as srv:
        args = ["run", "--tasks", "crisis.conversation", "--suite", "data", "--data-dir", str(data), "--personas",
                "Lena", "--runs", "1", "--turns", "6", "--model", "openai/bot", "--base-url", srv.openai_base_url, "--user-model",
                "openai/person", "--user-model-base-url", srv.openai_base_url, "--judge", "openai/judge",
                "--judge-base-url", srv.openai_base_url, "--out", str(tmp_path / "run"), "--no-progress",
                "--bootstrap", "50", "--protocol", protocol, "--methods-dir", str(methods_with_vera(tmp_path))]
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        done = subprocess.run([sys.executable, "-c", _RSS_CHILD, *args], capture_output=True, text=True, env=env,
                              timeout=300)
        bot_calls = sum(1 for b in srv.requests if b["model"] == "bot")
    assert done.returncode == 2, done.stderr[-2000:]
    rss_mb = int(re.search(r"peak_rss_kb (\d+)", done.stderr)[1]) / 1024
    assert rss_mb <= 200, rss_mb
    assert bot_calls == 1  # stopped at the first: the 10 MB are never sent on
    t = json.loads((tmp_path / "run/results.json").read_text())["models"]["openai/bot"]["tasks"]["crisis.conversation"]
    assert t["n_errors"] == 1 and t["error_kinds"] == {"reply_too_large": 1}
    row = json.loads((tmp_path / "run/samples.jsonl").read_text().splitlines()[0])
    assert row["error"]["kind"] == "reply_too_large" and "message 2 (tested model)" in row["error"]["message"]
    stored = sum(p.stat().st_size for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert stored < (2 << 20), stored  # nothing of the 10 MB in the store, samples or anywhere


def test_an_empty_reply_of_the_tested_model_is_a_failed_turn_under_trustmh(tmp_path):
    def reply(body):
        return "" if body["model"] == "bot" else script(body)

    with FakeLLMServer(reply=reply) as srv:
        url = srv.openai_base_url
        spec = run_spec(models=["openai/bot"], base_url=url, tasks="crisis.conversation", personas="Tove", runs=1,
                        turns=4, user_model="openai/person", user_model_base_url=url)
        run_quiet(spec, tmp_path / "run")
    t = json.loads((tmp_path / "run/results.json").read_text())["models"]["openai/bot"]["tasks"]["crisis.conversation"]
    assert t["n_errors"] == 1 and t["error_kinds"] == {"empty_response": 1}
    row = json.loads((tmp_path / "run/samples.jsonl").read_text().splitlines()[0])
    assert row["error"]["message"] == "message 2 (tested model): an empty message"
