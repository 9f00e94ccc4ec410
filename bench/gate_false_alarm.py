"""How often does `trustmh gate --baseline` fail a model that did not change? A simulation, not a timing.

The same stochastic model (`baseline/random`: each reply drawn from a hash of seed, task, item and variant,
so replies are independent across items and seeds) is run with K seeds on the real data's offline tasks
(those the rules judge scores whole), trustmh's protocol. A pair of runs of one unchanged model is then
simulated cheaply from the stored per-sample results instead of running the engine twice per pair: for every
task and every cluster (an item, an attack intent, a dialogue), side a takes that cluster's scored samples
from one of the K runs drawn at random and side b from another, distinct one. Each side is then distributed
as a run of its own (clusters are independent, and a cluster's samples come whole from one run), and the
two sides share no reply. Every pair goes through the gate's own code: `compare` (paired cluster bootstrap,
few-cluster rule) and `gate.regression_checks` (margins, correction), and fails when any task, pillar or
overall check fails. The K(K-1)/2 real pairs of the K runs are checked the same way beside it, and through
the whole of `gate.check_baseline` (which also fails a value one run has and the other lost: a rule about
values, not noise, that the simulated pairs do not exercise since their results.json values are not rebuilt).

Printed: the false-alarm rate (share of pairs failing) under the gate's default (Holm, default margins),
under Holm with every margin 0 (a test for any regression), and with no correction and margin 0 (the gate
before issue 44), each with its Monte Carlo standard error sqrt(p (1 - p) / pairs).

    python bench/gate_false_alarm.py [--data-dir ../shared/data/upstream] [--seeds 5] [--pairs 120]
                                     [--limit 100] [--bootstrap 500]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = ("crisis.identification,crisis.severity,ethics.reasoning,privacy,reliability.emotion_recognition,"
           "reliability.knowledge,robustness.crisis,safety.jailbreak,safety.over_refusal")
SETTINGS = (("holm, default margins (the gate's default)", "holm", None),
            ("holm, every margin 0", "holm", {"task": 0.0, "pillar": 0.0, "overall": 0.0}),
            ("no correction, every margin 0 (before issue 44)", "none", {"task": 0.0, "pillar": 0.0, "overall": 0.0}))


def run_seeds(data_dir: Path, seeds: int, limit: int | None, out: Path, tasks: str = OFFLINE) -> list[Path]:
    from trustmh.engine import RunSpec, run
    dirs = []
    for s in range(1, seeds + 1):
        spec = RunSpec(models=["baseline/random"], tasks=tasks, suite="data", data_dir=str(data_dir), seed=s,
                       judge="rules", protocol="trustmh", n_boot=200, limit=limit)
        run(spec, out / f"seed{s}")
        dirs.append(out / f"seed{s}")
    return dirs


def mixed_pair(rows: list[dict], rng: np.random.Generator) -> tuple[dict, dict]:
    """Two simulated runs: each cluster's samples from two distinct runs drawn at random."""
    from trustmh.analysis.runs import Rows
    k = len(rows)
    a_side, b_side = {}, {}
    for key, first in rows[0].items():
        pick: dict[str, tuple[int, int]] = {}
        for c in dict.fromkeys(first.clusters):
            i = int(rng.integers(k))
            pick[c] = (i, (i + 1 + int(rng.integers(k - 1))) % k)
        for side, out in ((0, a_side), (1, b_side)):
            r = Rows()
            for sample in first.keys:
                src = rows[pick[first.cluster_of(sample)][side]][key]
                r.add(sample, src.values_of(sample), src.cluster_of(sample), src.labels_of(sample))
            out[key] = r
    return a_side, b_side


def failed(a, b, rows_a: dict, rows_b: dict, n_boot: int, seed: int) -> list[bool]:
    """Whether the gate fails b against a under each of SETTINGS (one comparison, its draws reused)."""
    from trustmh.analysis.compare import compare
    from trustmh.analysis.gate import regression_checks
    c = compare(a, b, rows_a, rows_b, n_boot=n_boot, seed=seed, level=0.95)
    return [any(not x.passed for x in regression_checks([("m", c)], alpha=0.05, correction=corr,
                                                         margins=margins)[0])
            for _, corr, margins in SETTINGS]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "upstream")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=120)
    ap.add_argument("--limit", type=int, default=100, help="items per task (0: all)")
    ap.add_argument("--bootstrap", type=int, default=500)
    args = ap.parse_args()
    if args.seeds < 2 or not args.data_dir.is_dir():
        sys.exit("needs --seeds of at least 2 and --data-dir with the upstream data")
    from trustmh.analysis.gate import check_baseline
    from trustmh.analysis.runs import entries, load_run, read_rows
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [load_run(d) for d in run_seeds(args.data_dir, args.seeds, args.limit or None, Path(tmp))]
        rows = [read_rows(r) for r in runs]
        ents = [entries([r])[0] for r in runs]
        t_runs = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        sim = np.array([failed(ents[0], ents[1], *mixed_pair(rows, rng), args.bootstrap, seed=i)
                        for i in range(args.pairs)])
        real = np.array([failed(ents[i], ents[j], rows[i], rows[j], args.bootstrap, seed=0)
                         for i in range(len(runs)) for j in range(i + 1, len(runs))])
        # the real pairs through the whole of check_baseline too (also its rule for a value one run lost)
        whole = [not all(c.passed for c in check_baseline(runs[j], runs[i], n_boot=args.bootstrap)[0])
                 for i in range(len(runs)) for j in range(i + 1, len(runs))]
    print(f"baseline/random, {args.seeds} seeds on the offline tasks ({OFFLINE}), --limit {args.limit or 'none'}, "
          f"trustmh protocol, rules judge; {args.bootstrap} paired bootstrap draws, alpha 0.05; runs "
          f"{t_runs:.0f} s, pairs {time.perf_counter() - t0 - t_runs:.0f} s")
    print(f"{'gate setting':50} {'simulated pairs':>22} {'real pairs':>14}")
    for i, (name, _, _) in enumerate(SETTINGS):
        p = sim[:, i].mean()
        print(f"{name:50} {p:6.3f} ± {math.sqrt(p * (1 - p) / len(sim)):.3f} of {len(sim):<4} "
              f"{int(real[:, i].sum()):>5} of {len(real)} failed")
    print(f"real pairs through the whole `gate --baseline` check (default settings): {sum(whole)} of {len(whole)} "
          f"failed")


if __name__ == "__main__":
    main()
