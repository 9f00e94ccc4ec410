"""Kill -9 a run at random moments, resume it each time, and check nothing was paid twice and the
final results equal an uninterrupted run's.

    python bench/resume.py [--samples 600] [--kills 8] [--latency 0.02] [--connections 16] [--seed 1]

The job (N synthetic samples, generation + LLM judge, openai/ models) runs in a child process against
the project's FakeLLMServer in this process, which counts every reply it delivers by request body.
The child is SIGKILLed at K random moments and restarted with the same command; then it runs to the
end. Printed: calls made (replies the server delivered, all attempts) / calls needed (distinct
requests of the job), the calls paid twice, how many of those had already been stored when they were
paid again (the resume guarantee: must be 0), and whether results.json and samples.jsonl equal those
of an uninterrupted run of the same job.

A reply the server has already written when the client dies (in the socket buffer, not yet read and
committed) is lost with the process and paid again on resume: that, and only that, can push the ratio
above 1.0; a stored reply is never asked for again."""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, synthetic_spec  # noqa: E402

from trustmh.testing.fake_server import FakeLLMServer, request_key  # noqa: E402


def reply(body: dict) -> str:
    # deterministic and varied, so equal results mean equal replies were used
    text = body["messages"][-1]["content"]
    return f"Answer: {1 + len(text) % 4}"


def child(a) -> None:
    from trustmh import engine as runner
    spec = synthetic_spec(a.samples, base_url=a.base_url, n_boot=200)
    runner.run(spec, Path(a.out), limits=runner.Limits(max_connections=a.connections))


def start(a, base_url: str, out: Path) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--child", "--base-url", base_url, "--out", str(out),
           "--samples", str(a.samples), "--connections", str(a.connections)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def ident(body: dict) -> tuple[str, str]:
    """(item id, purpose) of a request body of the synthetic task."""
    text = body["messages"][-1]["content"]
    n = int(text.split(":", 1)[0].removeprefix("Case "))
    return f"s{n:06d}", "judge" if "rate this counsellor reply" in text else "model"


def delivered(srv: FakeLLMServer) -> collections.Counter:
    """Replies delivered so far, by (item id, purpose)."""
    by_key = {request_key(b): ident(b) for b in srv.requests}
    out: collections.Counter = collections.Counter()
    for key, n in srv.calls.items():
        out[by_key[key]] += n
    return out


def stored(run_dir: Path) -> set[tuple[str, str]]:
    db = sqlite3.connect(run_dir / "store.sqlite")
    try:
        return set(db.execute("SELECT item_id, purpose FROM calls WHERE ok = 1"))
    finally:
        db.close()


def outputs(run_dir: Path) -> tuple[dict, list[dict]]:
    """results.json and samples.jsonl, less what differs between any two runs (time, latency)."""
    res = json.loads((run_dir / "results.json").read_text())
    res.pop("created")
    res.pop("outputs")  # the sha256 of samples.jsonl, whose latencies differ between any two runs
    lines = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    for line in lines:
        line.pop("latency_s", None)
    return res, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--base-url", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    rng = random.Random(a.seed)
    tmp = Path(tempfile.mkdtemp(prefix="trustmh-resume-"))
    print(f"machine: {machine()}")
    print(f"{a.samples} samples x (generation + judge), {a.connections} connections, {a.latency * 1e3:.0f} ms "
          f"latency, {a.kills} kill -9 at random moments\n")
    try:
        with FakeLLMServer(latency_s=a.latency, reply=reply) as srv:
            ref_dir = tmp / "reference" / "run"
            p = start(a, srv.openai_base_url, ref_dir)
            if p.wait() != 0:
                raise SystemExit(f"reference run failed: {p.stderr.read()}")
            needed = len(srv.calls)
            srv.reset_counters()

            run_dir = tmp / "killed" / "run"
            paid_when_stored: dict[tuple[str, str], int] = {}
            for k in range(a.kills):
                # a random point of the job: after a random share of the calls still to make
                p = start(a, srv.openai_base_url, run_dir)
                target = srv.n_completed + rng.randint(1, max(1, (needed - srv.n_completed) // (a.kills - k + 1)))
                while srv.n_completed < target and p.poll() is None:
                    time.sleep(0.001)
                time.sleep(rng.uniform(0, 2 * a.latency))  # so the kill is not tied to the moment a reply left
                if p.poll() is not None:
                    print(f"kill {k + 1}: the run had already finished")
                    break
                p.send_signal(signal.SIGKILL)
                p.wait()
                # every reply committed by now, and how often it had been delivered by now
                now = delivered(srv)
                for i in stored(run_dir):
                    paid_when_stored.setdefault(i, now[i])
                print(f"kill {k + 1}: after {srv.n_completed} of {needed} calls", flush=True)
            p = start(a, srv.openai_base_url, run_dir)
            if p.wait() != 0:
                raise SystemExit(f"resumed run failed: {p.stderr.read()}")
            made, distinct, twice = srv.n_completed, len(srv.calls), srv.duplicate_paid_calls()
            final = delivered(srv)
            repaid_stored = sum(final[i] - n for i, n in paid_when_stored.items())
        same = outputs(ref_dir) == outputs(run_dir)
        print(f"\ncalls made / calls needed: {made} / {needed} = {made / needed:.4f}   "
              f"(distinct requests answered: {distinct}; paid twice: {twice})")
        print(f"replies paid again after they were stored: {repaid_stored} (must be 0); the other "
              f"{twice - repaid_stored} were delivered into a process being killed, before it could store them "
              f"({(twice - repaid_stored) / max(1, a.kills):.1f} per kill)")
        print(f"final results equal the uninterrupted run: {same}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
