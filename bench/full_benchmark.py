"""Every task on the real data, one model and an LLM judge, through the CLI: wall time against the
ideal, the scoring phase, and peak memory.

    python bench/full_benchmark.py --data-dir /path/to/upstream [--latency 0.2] [--connections 64]

`trustmh run --suite data` is started as a child process (the CLI is the interface users have, and
it keeps the measurement independent of the Python API) against the lean bench server
(`_server.py`, its own process) standing for both endpoints: the model at <server>/v1 and the judge
at <server>/judge/v1, each with --max-connections C. Then `trustmh score` re-scores the same run
directory in a second child (every judgement is stored, so it makes no call): that is phase 2 alone.

Ideal: with nothing but the server's latency L costing time, the busier endpoint's N calls run C at a
time back to back, N / (C / L) s, plus one L for the first replies to arrive before the judge can
start and one L for the last judgement after the last generation: N / (C / L) + 2L. The server counts
calls per endpoint so N is what was actually sent. Printed ratio = ideal / wall.

With --baseline-src DIR (the src/ folder of another checkout, e.g. from `git archive <commit> src`),
`trustmh score` is also timed with that code on the same run directory, alternating with this
checkout's, so the two score times are measured side by side under the same machine load.

"before first request" is the time from starting the run's process to the server seeing its first
request (imports, loading the data, building and storing the samples). "after last reply" is the time between the server writing its last reply and the run's process
exiting: scoring, writing results and the report, and interpreter exit. Peak RSS is the largest
resident set of any finished child (getrusage RUSAGE_CHILDREN, read before the server is stopped)."""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Server, machine  # noqa: E402

SRC = Path(__file__).resolve().parent.parent / "src"


def child_env(src: Path = SRC) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OPENAI_API_KEY"] = "bench-not-a-key"  # loopback server only; never checked
    return env


def timed(cmd: list[str], src: Path = SRC) -> tuple[float, float]:
    """(wall s, CPU s) of a child; CPU time is the steadier figure when other jobs share the machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=child_env(src), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="data directory holding the upstream datasets")
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="also time `trustmh score` with this src/ folder, alternating with this checkout's")
    ap.add_argument("--repeat", type=int, default=3, help="score timings per code version with --baseline-src")
    ap.add_argument("--keep", default=None, help="keep the run directory here (default: a temporary one)")
    ap.add_argument("--protocol", default="trustmh", choices=("trustmh", "paper"),
                    help="trustmh (default: the figures in bench/README.md were measured so) or paper")
    ap.add_argument("--methods-dir", default=None, help="the authors' method files, for --protocol paper")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trustmh-full-"))
    run_dir = Path(a.keep) if a.keep else tmp / "run"
    print(machine())
    try:
        with Server(a.latency) as server:
            url = f"http://127.0.0.1:{server.port}"
            cli = [sys.executable, "-m", "trustmh.cli"]
            run_start = time.monotonic()
            run_wall, run_cpu = timed(cli + ["run", "--model", "openai/x", "--base-url", f"{url}/v1", "--judge", "openai/j",
                                    "--judge-base-url", f"{url}/judge/v1", "--max-connections", str(a.connections),
                                    "--suite", "data", "--data-dir", a.data_dir, "--bootstrap", str(a.bootstrap),
                                    "--out", str(run_dir), "--no-progress", "--protocol", a.protocol, "--max-judge-failed", "1",
                                    *(["--methods-dir", a.methods_dir] if a.methods_dir else [])])
            run_end = time.monotonic()
            run_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            stats = server.stats()
            score_wall, score_cpu = timed(cli + ["score", str(run_dir), "--no-progress", "--max-judge-failed", "1"])
            pairs = []
            for _ in range(a.repeat if a.baseline_src else 0):
                pairs.append((timed(cli + ["score", str(run_dir), "--no-progress", "--max-judge-failed", "1"], a.baseline_src.resolve()),
                              timed(cli + ["score", str(run_dir), "--no-progress", "--max-judge-failed", "1"])))
            peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            extra_calls = server.stats()["requests"] - stats["requests"]
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    by = stats["by_endpoint"]
    busiest = max(by.values())
    ideal = busiest / (a.connections / a.latency) + 2 * a.latency
    after = run_end - stats["last_answer"]
    before = stats["first_request"] - run_start
    print(f"calls: model {by.get('', 0)}, judge {by.get('/judge', 0)}; {a.connections} connections per "
          f"endpoint, {a.latency * 1000:.0f} ms latency, {a.bootstrap} bootstrap resamples")
    print(f"run wall      {run_wall:7.1f} s   ({run_cpu:.1f} s CPU)   ideal {ideal:6.1f} s   ratio {ideal / run_wall:.2f}")
    print(f"before first request {before:5.1f} s   (start-up: imports, loading the data, building and storing samples)")
    print(f"after last reply {after:5.1f} s   ({after / run_wall:.0%} of the run: scoring, results, report, exit)")
    print(f"score wall    {score_wall:7.1f} s   ({score_cpu:.1f} s CPU; trustmh score on the same run; {extra_calls} calls made)")
    if pairs:
        def median(i: int, j: int) -> float:  # i: 0 baseline, 1 this checkout; j: 0 wall, 1 CPU
            return sorted(p[i][j] for p in pairs)[len(pairs) // 2]
        base, base_cpu, this, this_cpu = median(0, 0), median(0, 1), median(1, 0), median(1, 1)
        print(f"score, side by side (medians of {len(pairs)} alternating): baseline {base:.1f} s ({base_cpu:.1f} s CPU), "
              f"this checkout {this:.1f} s ({this_cpu:.1f} s CPU); baseline / this: {base / this:.2f} wall, "
              f"{base_cpu / this_cpu:.2f} CPU")
    print(f"peak RSS      {run_rss:7.0f} MiB (run)   {peak_rss:.0f} MiB (run and score)")


if __name__ == "__main__":
    main()
