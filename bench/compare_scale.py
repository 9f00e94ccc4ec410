"""`trustmh compare` of many models: the paired draws batched through each task's `aggregate_many`
against the per-resample path they replace (`aggregate` on a resampled table, once per resample and side).

    python bench/compare_scale.py [--data-dir DIR] [--models 12] [--limit 20] [--bootstrap 1000]

It builds one run of M models over every task of the upstream data (`--limit` items per task, the trustmh
protocol) against trustmh's loopback fake server, whose replies vary with a hash of the prompt and the
model name and hold an option letter, a rating and a JSON object of judge criteria, so most tasks score
(judged ones through the same server as judge). Then it compares the first model with the other M - 1,
once with the batched draws and once with the per-resample path (`paired_draws(..., batched=False)`),
in one process on one machine, and prints both times, their ratio, and whether the draws agree; then the
time `trustmh report` takes to write the page with its paired tie notes (batched)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # run from a checkout without installing


def reply(body: dict) -> str:
    text = json.dumps(body.get("messages", []), sort_keys=True) + str(body.get("model"))
    h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    scores = {c: h // (k + 1) % 4 for k, c in enumerate(("fluency", "professionalism", "empathy", "helpfulness"))}
    scores |= {"comprehensiveness": h % 3, "authenticity": h % 4, "safety": h % 2}
    scores |= {f"sc{k}": 1 + (h >> k) % 5 for k in range(1, 6)}
    return (f"Answer: {'ABCD'[h % 4]}) {1 + h % 4}. Rating: {1 + h % 5}. {json.dumps(scores)} "
            f"{['I cannot help with that.', 'Here is how I can help.'][h % 2]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "upstream")
    ap.add_argument("--models", type=int, default=12)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--tasks", default="all")
    args = ap.parse_args()
    import numpy as np
    from trustmh.analysis import compare as cmp
    from trustmh.engine import RunSpec, run
    from trustmh.analysis.runs import load_run
    from trustmh.testing.fake_server import FakeLLMServer
    if not (args.data_dir / "trustmh").is_dir():
        sys.exit(f"no upstream data in {args.data_dir} (pass --data-dir)")
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(reply=reply) as server:
        tmp = Path(tmp)
        models = [f"openai/bench-{k:02d}" for k in range(args.models)]
        spec = RunSpec(models=models, judge="openai/bench-judge", tasks=args.tasks, suite="data",
                       data_dir=str(args.data_dir), limit=args.limit, n_boot=100, protocol="trustmh",
                       base_url=server.openai_base_url, judge_base_url=server.openai_base_url)
        t0 = time.perf_counter()
        run(spec, tmp / "run")
        loaded = load_run(tmp / "run")
        n = sum(mr.tasks[t].n_samples for mr in loaded.results.models.values() for t in mr.tasks)
        print(f"run: {args.models} models, {n} samples, {time.perf_counter() - t0:.1f} s")
        timings, draws = {}, {}
        original = cmp.paired_draws
        for name, batched in (("batched", True), ("per-resample", False)):
            kept: list = []

            def recorded(*a, _b=batched, _kept=kept, **kw):
                kw["batched"] = _b
                out = original(*a, **kw)
                _kept.append(out)
                return out

            cmp.paired_draws = recorded
            t0 = time.perf_counter()
            cmp.compare_runs([loaded], n_boot=args.bootstrap)
            timings[name] = time.perf_counter() - t0
            draws[name] = kept
        cmp.paired_draws = original
        worst = max((float(np.nanmax(np.abs(a[k] - b[k]))) if np.isfinite(a[k] - b[k]).any() else 0.0)
                    for a, b in zip(draws["batched"], draws["per-resample"]) for k in a)
        fast, slow = timings["batched"], timings["per-resample"]
        print(f"\ncompare of {args.models} models ({args.models - 1} comparisons, {args.bootstrap} paired resamples, "
              f"{len(draws['batched'])} task comparisons)")
        print(f"{'batched (aggregate_many)':30}{fast:>10.2f} s")
        print(f"{'per-resample (aggregate)':30}{slow:>10.2f} s")
        print(f"{'ratio per-resample / batched':30}{slow / fast:>10.1f} x")
        print(f"largest difference between the two paths' draws: {worst:.2e}")
        from trustmh.report import write_report
        t0 = time.perf_counter()
        write_report([loaded], tmp / "report.html", paired=True, n_boot=200)
        print(f"trustmh report with paired tie notes (batched draws): {time.perf_counter() - t0:.2f} s, "
              f"{(tmp / 'report.html').stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
