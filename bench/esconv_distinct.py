"""robustness.support's dist-1..3 (ESConv reference metrics, one per perturbation) over the point value and
every block of 1000 bootstrap resamples, as phase 2 computes them after the task's last verdict: the
weight-independent layout memoised on the table (what trustmh does) against rebuilt for every call.

    python bench/esconv_distinct.py [--rows 10400] [--clusters 1300] [--bootstrap 1000]

The replies are 60-160 tokens from a 3,000-word vocabulary (real replies are of that length; the bench
server's "Answer: 1" is 8 tokens, which hides this cost). Both paths' values are checked equal."""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from _common import machine  # noqa: E402
from trustmh.scoring.metrics import Resamples, Table, block_weights, cluster_layout, pick_blocks, whole  # noqa: E402
from trustmh.tasks.esconv_reference import SEP, _distinct  # noqa: E402


def run(table: Table, perts: list[str], n_boot: int, keep: bool) -> tuple[float, list[np.ndarray]]:
    inverse, _order, size, _start = cluster_layout(table.clusters)
    blocks = [whole(table)] + [Resamples(inverse, block_weights(p, len(size)))
                               for p in pick_blocks(len(size), np.random.default_rng(0), n_boot)]
    subs = {key: table.where(table.labels["perturbation"] == key) for key in perts}
    out, t0 = [], time.process_time()
    for r in blocks:
        for key, sub in subs.items():
            if not keep:
                sub.memo.clear()
            rows = r.rows(table.labels["perturbation"] == key)
            out += [_distinct(sub, rows, k) for k in (1, 2, 3)]
    return time.process_time() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_400)
    ap.add_argument("--clusters", type=int, default=1_300)
    ap.add_argument("--bootstrap", type=int, default=1000)
    a = ap.parse_args()
    rnd = random.Random(0)
    words = [f"w{i}" for i in range(3000)]
    texts = [SEP.join(rnd.choice(words) for _ in range(rnd.randint(60, 160))) for _ in range(a.rows)]
    perts = [f"p{i}" for i in range(10)]
    table = Table({}, np.array([f"c{i % a.clusters}" for i in range(a.rows)], dtype=object),
                  {"ref_tokens": np.array(texts, dtype=object),
                   "perturbation": np.array([perts[i % 10] for i in range(a.rows)], dtype=object)})
    print(machine())
    rebuilt, v1 = run(table, perts, a.bootstrap, keep=False)
    memo, v2 = run(table, perts, a.bootstrap, keep=True)
    assert all(np.array_equal(x, y) for x, y in zip(v1, v2))
    print(f"{a.rows} replies, {a.clusters} clusters, 10 perturbations, {a.bootstrap} resamples: dist-1..3 CPU "
          f"rebuilt per call {rebuilt:.2f} s, memoised {memo:.2f} s, ratio {rebuilt / memo:.1f}x (values equal)")


if __name__ == "__main__":
    main()
