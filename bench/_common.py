"""Shared pieces of the benchmarks: a synthetic task of any size, the lean server in its own process,
and peak-RSS / CPU readings.

The synthetic task (`bench.synthetic`) exists so that a benchmark can ask for exactly N samples, each
with a generation and an LLM-judge call, without any dataset on disk. Its prompts are about the size of
a real TrustMH prompt (~120 words) so request encoding and hashing cost what they cost in a real run."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # run from a checkout without installing

from trustmh.scoring.metrics import Table, mean  # noqa: E402
from trustmh.tasks import TASKS, Judged, MetricSpec, Rubric, RunContext, Task, register  # noqa: E402
from trustmh.types import Item, Sample, Score  # noqa: E402

TASK_ID = "bench.synthetic"
_FILLER = ("I have been feeling low for weeks and I cannot sleep, my work is suffering and I do not know "
           "who to talk to about it, my family thinks I am just tired and my friends are busy. ")


class SyntheticTask(Task):
    id = TASK_ID
    pillar = "ethics"
    title = "benchmark: N synthetic prompts, each judged"
    dataset = "bench"
    files = ()
    metric = MetricSpec("judge_ok", True, 0.0, 1.0)
    primary_value = "judge_ok"
    rubrics = (Rubric("judge"),)
    gen_params = {"max_tokens": 64}

    size = 100  # items: set by synthetic_spec (a benchmark runs one size at a time in a process)

    def load(self, data, ctx: RunContext) -> list[Item]:
        return [Item(f"s{i:06d}", {"n": i}) for i in range(self.size)]

    def prompt(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "system", "content": "You are a careful counsellor. Answer with 1, 2, 3 or 4."},
                {"role": "user", "content": f"Case {item.input['n']}: " + _FILLER * 4}]

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"Case {sample.item.input['n']}: rate this counsellor reply from 1 to 4."
                                            f"\nReply: {reply}\nAnswer:"}]

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext) -> Judged:
        return Judged(text="Answer: 1" if reply.strip() else None, reason=None if reply.strip() else "empty")

    def score(self, sample: Sample, reply: str, judged: Judged | None, ctx: RunContext) -> Score:
        if judged is None or judged.text is None:
            return Score(unscored={"judge_ok": judged.reason if judged else "no judge"})
        return Score(values={"judge_ok": float(judged.text.startswith("Answer:"))}, parsed=judged.text)

    def aggregate(self, table: Table, ctx: RunContext) -> dict[str, float]:
        return {"judge_ok": mean(table.col("judge_ok"))}


if TASK_ID not in TASKS:
    register(SyntheticTask)


# --------------------------------------------------------------------------------------------------
# The lean fake server, in its own process

class Server:
    """bench/_server.py in a child process (so the client under test has a core to itself)."""

    def __init__(self, latency: float, rate_limit: float | None = None, jitter: float = 0.0, reply: str | None = None,
                 varied: bool = False):
        cmd = [sys.executable, str(HERE / "_server.py"), "--latency", str(latency), "--jitter", str(jitter)]
        if varied:  # each reply carries a hash of its request (bench/conversation.py: no two turns alike)
            cmd.append("--varied")
        if reply is not None:  # the text model endpoints answer (judge endpoints keep "Answer: 1")
            cmd += ["--reply", reply]
        if rate_limit:
            cmd += ["--rate-limit", str(rate_limit)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"bench server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as r:
            return json.loads(r.read())

    def cpu_s(self) -> float:
        """User+system CPU seconds the server process has used so far (from /proc)."""
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def peak_rss_mb() -> float:
    """Peak resident set of this process in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, {platform.system()}"


def synthetic_spec(n: int, *, model: str = "openai/bench-model", judge: str = "openai/bench-judge",
                   base_url: str | None = None, seed: int = 0, **kw: Any):
    from trustmh.engine import RunSpec
    SyntheticTask.size = n  # and limit n: the spec (and so the run id) says the size too
    return RunSpec(models=[model], judge=judge, tasks=TASK_ID, suite="sample", base_url=base_url,
                   judge_base_url=base_url if judge.startswith(("openai/", "anthropic/")) else None,
                   seed=seed, limit=n, n_boot=kw.pop("n_boot", 0), **kw)


@contextlib.contextmanager
def quiet_env() -> Iterator[None]:
    """Benchmarks talk to loopback servers only; a placeholder key keeps the SDKs from complaining."""
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = old or "bench-not-a-key"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("OPENAI_API_KEY", None)


# --------------------------------------------------------------------------------------------------
# Running phase 1 (collect) alone, timed

def collect_once(spec, limits, run_dir: Path, *, progress: bool = False) -> dict[str, float]:
    """Build the samples, then time `runner.collect` only (no scoring): wall s, client CPU s, calls."""
    import asyncio
    import time

    from trustmh import engine as runner
    from trustmh.engine.prepare import Recorder
    from trustmh.engine._store import Store
    ctx = runner.context(spec)
    prepared, checksums = runner.prepare(spec, ctx)
    store = Store(run_dir / "store.sqlite")
    try:
        Recorder(store, prepared, checksums, ctx).finish()  # every sample stored before the clock starts
        t0, c0 = time.perf_counter(), time.process_time()
        calls = asyncio.run(runner.collect(spec, ctx, prepared, store, limits))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        failed = store.db.execute("SELECT count(*) FROM calls WHERE ok = 0").fetchone()[0]
        return {"wall": wall, "cpu": cpu, "calls": sum(calls.values()), "failed": failed}
    finally:
        store.close()
