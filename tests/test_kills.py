"""Kill campaign: `kill -9` the real `trustmh run` process at 20+ seeded points in CI (CI=true; one
point of each kind, 5 in all, by default), resume with the same command each time, and compare the end
state with an uninterrupted run.

Kill points (docs/reliability.md explains what each proves):
  * random   - after a seeded number of replies plus a seeded 0-20 ms: while replies stream into the store;
  * held     - the server answers K more requests (seeded K), then holds every further one; we kill once
               the K replies are committed, so nothing is between the server and the store (each holds a
               generation request: it lands while the model is generating);
  * judge    - as held, but only judge requests are held: generation runs to its end, the server answers
               K more judge requests and holds the next (each kill checks it held judging, and that K
               judge replies were paid);
  * scoring  - the process kills itself after a seeded number of scored sample rows (nothing left to
               collect: the kill lands in phase 2, which is too quick on this run for an outside poll to hit);
  * in-write - the process kills itself half-way through writing results.json (and report.html when the
               run writes a report), and after the first task's rows of samples.jsonl: each in the writer's
               exclusively created NAME.<random>.tmp, which the test finds left behind after the kill.
A second `trustmh run` and a `trustmh score` on the directory, started while a run holds it, must refuse.
Counted at the server: a reply it sent that the killed client had not committed is paid again on resume
("lost"). Held kills must lose nothing; random kills may lose at most what was in flight, and the total
of duplicate paid calls must equal exactly the sum lost (no other cause of double payment).

Where they land. A model generates the tasks a judge reads first (collect.judged_first), so judging runs
beside generation from the first replies, not after it: the ethics task is the larger one here (300 of
the 360 samples), so that the random and held kills land while both endpoints have requests in flight,
and their budgets are capped (`spare`) so that judging is still left for the judge kills, whatever the
order: each stored judgement needs its stored ethics reply, so the judgements made are at most half the
replies the server sent.

Each launch (~27 for the whole campaign, ~11 for the default 5 points) is a process of its own forked from
a server that imported trustmh once (tests/forking.py), so that real kill -9 points do not each pay a
fresh interpreter's ~0.7 s of imports; the run itself is small (360 samples + 300 judge calls, 10 ms
latency)."""

import collections
import json
import os
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

import forking
from conftest import IN_CI, make_synthetic_data, synthetic_reply
from trustmh.testing.fake_server import Fault, FakeLLMServer

N_TIER1, N_ETHICS = 60, 300
N_GEN = N_TIER1 + N_ETHICS
N_CALLS = N_GEN + N_ETHICS  # every generation, plus one judge call per ethics item
MAX_CONN = 4
SELF_KILLED = ("scoring", "in-write")  # kill points the process reaches itself (SELF_KILL below)
HOLD = Fault("stall", stall_s=600)  # the client is killed long before this ends
# Kill points per kind: the whole campaign (21) in CI; one of each kind by default, so that a local run
# still kills at every kind of point. The two refusal checks (a second `run`, a `score`) are made during
# the first two held kills, or both during the one.
POINTS = ({"random": 5, "held": 5, "judge": 4, "scoring": 4, "in-write": 3} if IN_CI else
          {"random": 1, "held": 1, "judge": 1, "scoring": 1, "in-write": 1})
REFUSALS = (("run",), ("score",)) if POINTS["held"] >= 2 else (("run", "score"),)
JUDGE_BUDGET = 5  # judge replies a judge kill lets through (seeded 0..5)
# Judgements the judge kills need left: each lets up to JUDGE_BUDGET through, and the last still holds one.
JUDGE_NEED = JUDGE_BUDGET * POINTS["judge"] + 1


class Gate:
    """The server's fault hook: open, or admit `budget` more requests (judge requests only, if
    `judge_only`) and hold the rest until the client goes away. Counts by purpose ("generate", "judge")
    the requests it admitted under the budget and those it held."""

    def __init__(self):
        self.lock = threading.Lock()
        self.budget: int | None = None
        self.judge_only = False
        self.admitted: collections.Counter = collections.Counter()
        self.held_by: collections.Counter = collections.Counter()

    @property
    def held(self) -> int:
        return sum(self.held_by.values())

    def set(self, budget: int | None, judge_only: bool = False) -> None:
        with self.lock:
            self.budget, self.judge_only = budget, judge_only
            self.admitted, self.held_by = collections.Counter(), collections.Counter()

    def __call__(self, n: int, body: dict):
        purpose = "judge" if "APA" in body["messages"][-1]["content"] else "generate"
        with self.lock:
            if self.budget is None or (self.judge_only and purpose != "judge"):
                return None
            if self.budget > 0:
                self.budget -= 1
                self.admitted[purpose] += 1
                return None
            self.held_by[purpose] += 1
            return HOLD


def store_ok(db: Path) -> tuple[int, int]:
    """Successful (generation, judge) calls committed in the store; (0, 0) before it exists."""
    if not db.exists():
        return 0, 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = dict(con.execute("SELECT purpose, count(*) FROM calls WHERE ok = 1 GROUP BY purpose").fetchall())
    except sqlite3.OperationalError:  # schema not created yet
        return 0, 0
    finally:
        con.close()
    return rows.get("model", 0), rows.get("judge", 0)


def integrity(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def wait_for(cond, what, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(0.005)


def normalised_outputs(run_dir: Path) -> tuple[dict, list]:
    """results.json and samples.jsonl without what legitimately differs between two runs."""
    res = json.loads((run_dir / "results.json").read_text())
    res.pop("created")
    res.pop("outputs")  # hashes samples.jsonl, whose latencies differ between runs
    for k in ("base_url", "judge_base_url"):
        res["spec"].pop(k)
    rows = []
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        r = json.loads(line)
        r.pop("latency_s", None)
        rows.append(r)
    return res, rows


# A wrapper that runs the CLI but SIGKILLs itself at a chosen point of writing the outputs.
SELF_KILL = r"""
import contextlib, os, signal, sys
from pathlib import Path
import trustmh.files as rundir
import trustmh.engine.score as runner
where = os.environ["TRUSTMH_TEST_SELF_KILL"]
if where.startswith("row:"):  # die right after the N-th scored sample row is written
    rows_left = [int(where[4:])]
    row_write = rundir.Utf8Writer.write
    def row_then_die(self, text):
        row_write(self, text)
        rows_left[0] -= 1
        if rows_left[0] == 0:
            os.kill(os.getpid(), signal.SIGKILL)
    rundir.Utf8Writer.write = row_then_die
class HalfThenDie:
    def __init__(self, fh):
        self.fh = fh
    def write(self, data):  # the first piece written (all of results.json; report.html up to its samples): half
        self.fh.write(data[: len(data) // 2])
        self.fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
replacing = rundir._replacing  # the one writer: every output's NAME.<random>.tmp is opened here
@contextlib.contextmanager
def dying_replacing(path, binary):
    with replacing(path, binary) as fh:
        yield HalfThenDie(fh) if where == path.name + ".tmp" and where != "samples.jsonl.tmp" else fh
rundir._replacing = dying_replacing
append_part = runner.append_part
def die_after_first_task(out, part):  # samples.jsonl.<random>.tmp then holds the first task's rows only
    append_part(out, part)
    if where == "samples.jsonl.tmp":
        out.fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
runner.append_part = die_after_first_task
sys.argv[0] = "trustmh"
from trustmh.cli import main
main()
"""


@pytest.mark.needs_methods
def test_kill9_at_20_points_then_resume(tmp_path, figures):
    rng = random.Random(20240607)
    data = make_synthetic_data(tmp_path / "data", N_TIER1, N_ETHICS)
    gate = Gate()

    def cli_args(url: str, out: Path) -> list[str]:
        return ["run", "-m", "openai/fake", "--judge", "openai/judge", "--base-url", url, "--judge-base-url", url,
                "--tasks", "privacy.awareness_tier1,ethics.reasoning", "--suite", "data", "--data-dir", str(data),
                "--out", str(out), "--max-connections", str(MAX_CONN), "--no-progress", "--bootstrap", "1000",
                "--max-judge-failed", "1"]  # the synthetic judge's replies are not five-principle verdicts

    # The uninterrupted reference, on a server of its own.
    with FakeLLMServer(reply=synthetic_reply, latency_s=0.01) as ref_srv:
        ref_dir = tmp_path / "ref" / "run"
        ref = forking.run(["-m", "trustmh.cli", *cli_args(ref_srv.openai_base_url, ref_dir)], timeout=120)
        assert ref.returncode == 0, ref.stderr
        assert ref_srv.n_completed == N_CALLS and ref_srv.duplicate_paid_calls() == 0
    reference = normalised_outputs(tmp_path / "ref" / "run")

    run_dir = tmp_path / "kill" / "run"
    db = run_dir / "store.sqlite"
    kills: list[dict] = []
    refused: list[str] = []  # the other commands that were refused while a run held the directory
    base: dict = {}  # the server's and the store's counts when the current run started
    with FakeLLMServer(reply=synthetic_reply, faults=gate, latency_s=0.01) as srv:
        cmd = ["-m", "trustmh.cli", *cli_args(srv.openai_base_url, run_dir)]  # python's arguments

        def kill_run(kind: str, arm, trigger, cmd=cmd, env=None) -> dict:
            """Start the command, wait for `trigger`, kill -9, and account for what was paid and stored."""
            completed0, stored0 = srv.n_completed, sum(store_ok(db))
            base.update(completed=completed0, stored=stored0)
            had_outputs = (run_dir / "results.json").exists()
            arm()
            proc = forking.Forked(cmd, env=env)
            try:
                trigger(proc)
                alive = proc.poll() is None
                at_kill = srv.n_completed
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
            finally:
                if proc.poll() is None:
                    proc.kill()
            _, stderr = proc.output()
            assert proc.returncode == -signal.SIGKILL, (kind, proc.returncode, stderr)
            assert alive or kind in SELF_KILLED, f"{kind}: the run ended before the kill"
            time.sleep(0.1)  # let the server notice the dead connections
            held, admitted = dict(gate.held_by), dict(gate.admitted)
            gate.set(None)
            paid, stored = srv.n_completed - completed0, sum(store_ok(db)) - stored0
            # lost = sent by the server but not in the store: in transit at the kill, or (as a provider
            # would still charge for it) finished by the server after the client died.
            k = dict(kind=kind, paid=paid, stored=stored, lost=paid - stored, paid_after_kill=srv.n_completed - at_kill,
                     held=held, admitted=admitted, store_at_kill=store_ok(db))
            if db.exists():
                k["integrity"] = integrity(db)
                assert k["integrity"] == "ok", k
            # Outputs are replaced atomically: what is there is the old or the new version, never a part.
            if had_outputs or (run_dir / "results.json").exists():
                assert normalised_outputs(run_dir) == reference, kind
            if (run_dir / "report.html").exists():
                assert (run_dir / "report.html").read_text().rstrip().endswith("</html>"), kind
            assert 0 <= k["lost"] <= 2 * MAX_CONN, k  # at most what two endpoints can have in flight
            kills.append(k)
            return k

        def remaining() -> int:
            return N_CALLS - sum(store_ok(db))

        def spare(kills_left: int) -> int:
            """Server replies each of the next `kills_left` random and held kills may spend, so that JUDGE_NEED
            judgements are still to make when the judge kills start: the judgements stored are at most half
            the replies the server sent (each needs its ethics reply stored), in whatever order the run
            asks. Less a margin for what a random kill spends past its count (in flight, its poll, its
            0-20 ms)."""
            return (2 * (N_ETHICS - JUDGE_NEED) - srv.n_completed) // kills_left - 4 * MAX_CONN

        def store_files() -> list:
            return [(f.stat().st_size, f.stat().st_mtime_ns) for f in (db, db.with_name(db.name + "-wal"))
                    if f.exists()]

        # 1. random moments while replies stream in: after a seeded number of replies (so the point does not
        # depend on machine speed), plus a seeded 0-20 ms, which lands in the reply's way to the store
        before_judging = POINTS["random"] + POINTS["held"]  # the kills that must leave judging to do
        for i in range(POINTS["random"]):
            cap = max(1, min(40, spare(before_judging - i)))
            after, delay = srv.n_completed + rng.randint(1, cap), rng.uniform(0.0, 0.02)
            kill_run("random", lambda: gate.set(None),
                     lambda p, a=after, d=delay: (wait_for(lambda: srv.n_completed >= a, "replies"), time.sleep(d)))

        def all_held(what: str) -> None:
            """Wait until every request in flight is held at the server and every reply it sent is committed,
            and it stays so for 0.1 s: a kill now can lose nothing."""
            def still() -> bool:
                return (gate.held > 0 and srv.in_flight == gate.held
                        and srv.n_completed - base["completed"] == sum(store_ok(db)) - base["stored"])
            while True:
                wait_for(still, lambda: f"{what}: held {gate.held}, in flight {srv.in_flight}, store {store_ok(db)}")
                seen = srv.n_requests
                time.sleep(0.1)
                if still() and srv.n_requests == seen:
                    return

        # 2. held during generation: K more replies, then every request waits at the server
        for i in range(POINTS["held"]):
            budget = rng.randint(0, max(0, min(20, remaining() - 2, spare(POINTS["held"] - i))))

            def trigger(p, second=i):
                all_held("held generation")
                # meanwhile a second `trustmh run` (or `score`) on the directory must refuse
                for other_kind in (REFUSALS[second] if second < len(REFUSALS) else ()):
                    other_cmd = cmd if other_kind == "run" else [*cmd[:2], "score", str(run_dir), "--no-progress"]
                    before = store_files()
                    other = forking.run(other_cmd, timeout=60)
                    assert other.returncode == 2 and "another trustmh process is using" in other.stderr, other.stderr
                    assert "Traceback" not in other.stderr and store_files() == before
                    refused.append(other_kind)
            k = kill_run("held", lambda b=budget: gate.set(b), trigger)
            # nothing lost, exactly K paid, and the model's generation was among what the server held
            assert k["lost"] == 0 and k["paid"] == budget and k["held"].get("generate", 0) > 0, k

        # 3. held during judging: generation runs freely, K judge replies, then judge requests wait
        judging_left = N_ETHICS - store_ok(db)[1]
        assert judging_left >= JUDGE_NEED, f"the kills before left {judging_left} judgements for the judge kills"
        for _ in range(POINTS["judge"]):
            budget = rng.randint(0, min(JUDGE_BUDGET, N_ETHICS - store_ok(db)[1] - 1))
            k = kill_run("judge", lambda b=budget: gate.set(b, judge_only=True), lambda p: all_held("held judging"))
            # It landed while judging: every generation in, exactly K judge replies paid, the next judge
            # requests held at the server, nothing lost.
            assert k["lost"] == 0 and k["store_at_kill"][0] == N_GEN, k
            assert k["admitted"].get("judge", 0) == budget and k["held"].get("judge", 0) > 0, k
        assert remaining() > 0  # the judge kills really left judging to do

        # The same command now finishes the collection and writes the outputs.
        done = forking.run(cmd, timeout=120)
        assert done.returncode == 0, done.stderr
        assert remaining() == 0

        # 4. seeded moments while scoring: after the N-th sample row of samples.jsonl's parts
        wrapper = ["-c", SELF_KILL, *cmd[2:]]
        for _ in range(POINTS["scoring"]):
            env = dict(os.environ, TRUSTMH_TEST_SELF_KILL=f"row:{rng.randint(1, N_TIER1 + N_ETHICS)}")
            kill_run("scoring", lambda: gate.set(None), lambda p: p.wait(timeout=60), cmd=wrapper, env=env)

        # 5. killed half-way through writing results.json, and part-way through samples.jsonl
        # (and in report.html, once the run writes one)
        report = ("report.html.tmp",) if (run_dir / "report.html").exists() else ()
        for where in ("results.json.tmp", "samples.jsonl.tmp", *report)[:POINTS["in-write"]]:
            env = dict(os.environ, TRUSTMH_TEST_SELF_KILL=where)
            kill_run("in-write", lambda: gate.set(None), lambda p: p.wait(timeout=60), cmd=wrapper, env=env)
            # the kill hit the write: its partial NAME.<random>.tmp (the writer's name) is left behind, unused
            assert list(run_dir.glob(where[:-len("tmp")] + "*.tmp")), (where, sorted(os.listdir(run_dir)))

        # And the same command, once more, completes.
        final = forking.run(cmd, timeout=120)
        assert final.returncode == 0, final.stderr
        duplicates = srv.duplicate_paid_calls()

    lost = sum(k["lost"] for k in kills)
    by_kind = {}
    for k in kills:
        by_kind[k["kind"]] = by_kind.get(k["kind"], 0) + 1
    in_write = POINTS["in-write"] if report else min(POINTS["in-write"], 2)
    assert by_kind == dict(POINTS, **{"in-write": in_write}), by_kind  # every kill point was reached
    assert len(kills) >= (20 if IN_CI else 5) and refused == ["run", "score"]
    assert duplicates == lost  # every duplicate paid call is a reply lost at a kill, and nothing else
    assert integrity(db) == "ok" and sum(store_ok(db)) == N_CALLS
    assert normalised_outputs(run_dir) == reference  # identical to the uninterrupted run
    figures.update(kills=len(kills), kills_by_point=by_kind, resumes=len(kills) + 1,
                   replies_lost_at_kills=lost, duplicate_paid_calls=duplicates,
                   duplicates_at_held_kills=sum(k["lost"] for k in kills if k["kind"] != "random"),
                   store_integrity="ok", final_results_identical=True, concurrent_run_refused=True,
                   per_kill=[(k["kind"], k["paid"], k["lost"], k["paid_after_kill"], k["held"]) for k in kills])
