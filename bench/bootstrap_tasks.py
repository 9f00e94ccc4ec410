"""Bootstrap time per task: the batched form (Method.aggregate_many) against the per-resample loop, side by
side on the same table, with the same intervals checked.

    python bench/bootstrap_tasks.py [--data-dir DIR] [--items 400] [--bootstrap 1000] [--tasks a,b]

Each table is what `trustmh score` builds for the task from plausible replies and judgements (the fake
replies of tests/test_bootstrap.py: mostly right, some unscorable), over the first --items items of the
task's data (default: the upstream data next to this checkout, else the shipped sample). Unlike the bench
server's "Answer: 1" to everything, these replies give the judged metrics values, as a real run does."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))
from _common import machine  # noqa: E402

import test_bootstrap as tb  # noqa: E402  (its fake replies and scored_table)
from trustmh.scoring.metrics import bootstrap  # noqa: E402
from trustmh.tasks import TASKS, RunContext  # noqa: E402


def timed(fn) -> tuple[float, dict]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=tb.UPSTREAM if tb.UPSTREAM.is_dir() else tb.SAMPLE_ROOT)
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--tasks", default=",".join(t for t in tb.BATCHED if not t.startswith("robustness.")))
    a = ap.parse_args()
    print(machine())
    print(f"data {a.data_dir}, first {a.items} items, {a.bootstrap} resamples; CPU seconds of this process\n")
    print(f"{'task':<34} {'rows':>6} {'per-resample':>13} {'batched':>9} {'ratio':>8}  intervals equal")
    total = [0.0, 0.0]
    ctx = RunContext(seed=0)
    for task_id in a.tasks.split(","):
        task = TASKS[task_id]()
        try:
            table = tb.scored_table(task_id, a.data_dir, n_items=a.items)
        except BaseException as e:  # pytest.skip: the task's data is not there
            print(f"{task_id:<34} skipped: {e}")
            continue
        agg = lambda t: task.method(ctx).aggregate(t, ctx)  # noqa: E731
        slow, ref = timed(lambda: bootstrap(table, agg, seed=1, n_boot=a.bootstrap))
        fast, got = timed(lambda: bootstrap(table, agg, seed=1, n_boot=a.bootstrap,
                                            aggregate_many=lambda t, r: task.method(ctx).aggregate_many(t, r, ctx)))
        same = set(got) == set(ref) and all(abs(got[k][i] - ref[k][i]) <= 1e-12 for k in ref for i in (0, 1))
        total[0] += slow
        total[1] += fast
        print(f"{task_id:<34} {len(table):>6} {slow:>12.2f}s {fast:>8.3f}s {slow / max(fast, 1e-9):>7.0f}x  {same}",
              flush=True)
    print(f"\n{'all':<34} {'':>6} {total[0]:>12.2f}s {total[1]:>8.3f}s {total[0] / max(total[1], 1e-9):>7.0f}x")


if __name__ == "__main__":
    main()
