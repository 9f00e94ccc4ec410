"""`trustmh validate-judge` with many human raters: the bootstrap of one criterion's judge-vs-human agreement and
human ceiling, batched (each rater pair's weighted joint counts once per block of resamples,
`agreement.judge_and_ceiling_many`, what trustmh does) against the per-resample path (every pair recomputed
through the scalar statistics in every resample, as before issue 38), side by side on the same draws, the
intervals checked equal.

    python bench/validate_judge_raters.py [--raters 10,20,40] [--items 200] [--bootstrap 1000] [--slow-boot 50]

The per-resample path is slow (every pair recomputed in every resample), so it is timed on --slow-boot resamples
and its time scaled to --bootstrap; the batched path runs the full count. Both use the same rater pairs
(`agreement.rater_pairs`): every pair up to 11 raters, then 10 partners per rater, so both grow linearly with
raters (issue 47 L2: 80 raters took 8.3 s and 265 MiB when every pair was computed, 1.0-1.2 s and 16 MiB now).
CPU time (time.process_time) of this process, so a loaded machine shifts both columns alike."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from _common import machine  # noqa: E402
from trustmh.scoring.agreement import judge_and_ceiling, judge_and_ceiling_many, rater_pairs  # noqa: E402
from trustmh.scoring.metrics import Table, bootstrap  # noqa: E402

SCALE = (1, 2, 3, 4, 5)


def ratings(n_raters: int, n_items: int, seed: int = 0) -> tuple[Table, list[str]]:
    """Raters who agree moderately (truth +-1, a tenth of their ratings missing), and a judge (truth +-2)."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 6, n_items)
    raters = [f"r{k:02d}" for k in range(n_raters)]
    rows = []
    for i in range(n_items):
        row = {"judge": float(np.clip(truth[i] + rng.integers(-2, 3), 1, 5))}
        for r in raters:
            if rng.random() > 0.1:
                row[f"rater:{r}"] = float(np.clip(truth[i] + rng.integers(-1, 2), 1, 5))
        rows.append(row)
    return Table.from_rows(rows, [f"i{i}" for i in range(n_items)]), raters


def timed(table: Table, raters: list[str], n_boot: int, batched: bool) -> tuple[float, dict]:
    many = (lambda t, rs: judge_and_ceiling_many(t, rs, raters, SCALE)) if batched else None
    t0 = time.process_time()
    cis = bootstrap(table, lambda t: judge_and_ceiling(t, raters, SCALE), seed=1, n_boot=n_boot, aggregate_many=many)
    return time.process_time() - t0, cis


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raters", default="10,20,40")
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--slow-boot", type=int, default=50, help="resamples the per-resample path is timed on")
    args = ap.parse_args()
    print(machine())
    print(f"{args.items} items, scale 1-5, {args.bootstrap} resamples (per-resample path timed on {args.slow_boot}, "
          f"scaled)")
    print(f"{'raters':>6} {'pairs':>6} {'batched s':>10} {'per-resample s':>15} {'ratio':>7}  intervals equal")
    for n in (int(x) for x in args.raters.split(",")):
        table, raters = ratings(n, args.items)
        fast, cis = timed(table, raters, args.bootstrap, True)
        slow, _ = timed(table, raters, args.slow_boot, False)
        slow *= args.bootstrap / args.slow_boot
        _, small_fast = timed(table, raters, args.slow_boot, True)
        _, small_slow = timed(table, raters, args.slow_boot, False)
        equal = small_fast.keys() == small_slow.keys() and all(
            math.isclose(a, b, abs_tol=1e-9) for k in small_fast for a, b in zip(small_fast[k], small_slow[k]))
        pairs = len(rater_pairs(raters)) + n  # rater pairs for the ceiling, and the judge against each rater
        print(f"{n:>6} {pairs:>6} {fast:>10.2f} {slow:>15.1f} {slow / fast:>6.0f}x  {equal} ({len(cis)} intervals)")


if __name__ == "__main__":
    main()
