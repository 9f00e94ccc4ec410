"""Does fairness.support's excess-gap interval cover? A simulation with known truth, not a timing.

11 dialogues x 4 groups (ESConv_fair's size; race has 4 groups), each cell a dialogue effect + reply noise
(sd 0.6 on the 0-5 score) + a group effect of S points on one group. For each S, 150 data sets: the excess
gap (observed gap less the permutation null's mean, floored at 0, as trustmh computes it with
`tasks.fairness._gap_null`) and its 95 % percentile bootstrap interval under three choices of the null in a
resample: the dialogues it draws each once (trustmh's), weighted as drawn, and the observed data's. The
truth is the mean excess over the data sets. Prints coverage and mean width per S and choice.

With --sets 150 --boot 400 (about 6 minutes on one core): coverage 1.00, 0.97, 0.97, 0.97 for S = 0, 0.3,
0.6, 1.2 with trustmh's choice; 1.00, 0.96, 0.90, 0.77 weighted as drawn; 0.97, 0.95, 0.99, 0.97 with the
observed null, at widths 0.55-0.85 against 0.43-0.74."""

from __future__ import annotations

import argparse

import numpy as np

from trustmh.tasks.fairness import _gap_null

D, K = 11, 4


def gaps(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    m = w @ x / w.sum(axis=1)[:, None]
    return m.max(axis=1) - m.min(axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=50)
    ap.add_argument("--boot", type=int, default=400)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    names = np.array([f"d{i}" for i in range(D)])
    print(f"{'S':>4} {'truth':>6}  " + "  ".join(f"{c:>22}" for c in ("drawn once (trustmh)", "weighted", "observed")))
    for s in (0.0, 0.3, 0.6, 1.2):
        points, bounds = [], {c: [] for c in ("once", "weighted", "observed")}
        for k in range(args.sets):
            x = rng.normal(0, 0.6, (D, K)) + rng.normal(0, 1, (D, 1))
            x[:, 0] -= s
            null, _ = _gap_null(x, names, np.ones(D), seed=k)
            points.append(max(0.0, float(np.ptp(x.mean(axis=0))) - null))
            picks = rng.integers(0, D, (args.boot, D))
            w = np.stack([np.bincount(p, minlength=D) for p in picks]).astype(float)
            g = gaps(x, w)
            for choice, n in (("once", _gap_null(x, names, (w > 0).astype(float), seed=k)[0]),
                              ("weighted", _gap_null(x, names, w, seed=k)[0]), ("observed", null)):
                bounds[choice].append(np.quantile(np.maximum(g - n, 0.0), [0.025, 0.975]))
        truth = float(np.mean(points))
        cells = []
        for choice, b in bounds.items():
            b = np.array(b)
            cover = np.mean((b[:, 0] <= truth + 1e-12) & (truth <= b[:, 1] + 1e-12))
            cells.append(f"cover {cover:.2f} width {np.mean(b[:, 1] - b[:, 0]):.2f}")
        print(f"{s:>4} {truth:>6.3f}  " + "  ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
