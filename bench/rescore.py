"""Re-scoring a finished run from its store with the `rules` judge: samples/s and peak memory.

    python bench/rescore.py [--samples 5000] [--scale 10] [--bootstrap 1000] [--data-dir DIR]

A run of N synthetic samples (generation + judge) is first stored by an in-process model (instant
replies, cacheable, so every reply lands in the store as a real run's would). Then `trustmh score`'s
code path (runner.run with generate=False: the tested model is never called) re-scores it, in a fresh
child process per size so each peak RSS is its own. The same is done at --scale times the samples;
memory is flat when peak RSS at scale x N is within 1.2x of peak at N.

With --data-dir (a data directory holding the upstream datasets) the whole real suite is also stored
and re-scored once, to show how long re-scoring every task takes."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, peak_rss_mb, synthetic_spec  # noqa: E402

from trustmh import engine as runner  # noqa: E402
# The module phase 1 builds its models in (its name is also the function `trustmh.engine.collect`).
collect_mod = importlib.import_module("trustmh.engine.collect")
from trustmh.models.base import Model  # noqa: E402
from trustmh.types import Response  # noqa: E402

MODEL = "openai/stored-model"  # never called while re-scoring; its stored replies are read


class InstantModel(Model):
    async def generate(self, request):
        text = "Answer: 1" if request.purpose == "generate" else "Answer: 2"
        return Response(text, "stop", 10, 2, 0.0)


def _spec(args) -> runner.RunSpec:
    if args.data_dir:
        return runner.RunSpec(models=[MODEL], judge="rules", suite="data", data_dir=args.data_dir, n_boot=args.bootstrap,
                              protocol="trustmh")
    # judge "rules": the re-score reads the stored generations and judges them offline
    return synthetic_spec(args.samples, model=MODEL, judge="rules", n_boot=args.bootstrap)


def child_fill(args) -> None:
    collect_mod.make_model = lambda spec, **kw: InstantModel(spec)
    runner.run(_spec(args), Path(args.dir))


def child_score(args) -> None:
    os.environ.setdefault("OPENAI_API_KEY", "bench-not-a-key")  # the client is built, never used
    spec = runner.load_spec(Path(args.dir))
    t0 = time.perf_counter()
    _, results, calls = runner.run(spec, Path(args.dir), generate=False)
    wall = time.perf_counter() - t0
    n = sum(t.n_samples or 0 for m in results.models.values() for t in m.tasks.values())
    errors = sum(t.n_errors for m in results.models.values() for t in m.tasks.values())
    print(json.dumps({"wall": wall, "samples": n, "errors": errors, "calls": sum(calls.values()),
                      "peak_rss_mb": peak_rss_mb()}))


def measure(args, samples: int | None, data_dir: str | None) -> dict:
    d = Path(tempfile.mkdtemp(prefix="trustmh-rescore-"))
    common = ["--bootstrap", str(args.bootstrap), "--dir", str(d / "run")]
    common += ["--data-dir", data_dir] if data_dir else ["--samples", str(samples)]
    try:
        subprocess.run([sys.executable, __file__, "--child", "fill", *common], check=True)
        out = subprocess.run([sys.executable, __file__, "--child", "score", *common], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--child", choices=("fill", "score"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        (child_fill if a.child == "fill" else child_score)(a)
        return
    print(f"machine: {machine()}")
    print(f"re-score with the rules judge, {a.bootstrap} bootstrap resamples\n")
    print(f"{'run':<22} {'samples':>8} {'seconds':>8} {'samples/s':>10} {'peak RSS MiB':>13}")
    rows = []
    for n in (a.samples, a.samples * a.scale):
        r = measure(a, n, None)
        if r["errors"] or r["calls"]:
            raise SystemExit(f"re-score was not clean: {r}")
        rows.append(r)
        print(f"{'synthetic':<22} {r['samples']:>8} {r['wall']:>8.2f} {r['samples'] / r['wall']:>10.0f} "
              f"{r['peak_rss_mb']:>13.1f}", flush=True)
    print(f"\npeak RSS at {a.scale}x samples / at 1x: {rows[1]['peak_rss_mb'] / rows[0]['peak_rss_mb']:.2f} "
          f"(target <= 1.2)")
    if a.data_dir:
        r = measure(a, None, a.data_dir)
        print(f"\n{'whole suite (' + Path(a.data_dir).name + ')':<22} {r['samples']:>8} {r['wall']:>8.2f} "
              f"{r['samples'] / r['wall']:>10.0f} {r['peak_rss_mb']:>13.1f}")


if __name__ == "__main__":
    main()
