"""Does the calibrated (PPI++) interval cover, and what does it buy? A simulation with known truth, not a timing.

For n rated items out of 3n (N = 2n judged only), human values Y ~ N(0, 1) and a judge f = rho Y +
sqrt(1 - rho^2) e + 0.5 (half a standard deviation too high), R simulated runs per cell: the share of 95%
calibrated intervals (validation.calibration.calibrated_mean, the run's estimator: cluster bootstrap,
lambda re-tuned per replicate, small-sample widening) holding the true mean 0; the same share for the
judge-only interval (the judge's mean over every item); the calibrated interval's width against the
human-only one (lambda = 0); the mean lambda; and the effective sample size against n / (1 - rho^2), which
assumes N >> n (here N = 2n bounds it by 3n). Monte Carlo standard error of a coverage: sqrt(p (1 - p) / R),
0.0069 at R = 1000.

    python bench/calibration_coverage.py [--reps 1000] [--boot 400]
"""

import argparse
import math

import numpy as np

from trustmh.validation.calibration import calibrated_mean

RHOS = (0.0, 0.3, 0.6, 0.9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--boot", type=int, default=400)
    a = ap.parse_args()
    if a.boot < 10:  # the estimator gives no interval from fewer defined replicates (calibration.py)
        ap.error("--boot must be at least 10: fewer replicates give no interval to cover anything")
    print(f"R={a.reps} simulated runs per cell, {a.boot} bootstrap replicates, 95%, judge +0.5 sd, N = 2n; "
          f"Monte Carlo s.e. of a coverage {math.sqrt(0.95 * 0.05 / a.reps):.4f}")
    print("  n  rho  calibrated  judge-only  width/human-only  lambda  n_eff  n/(1-rho^2)")
    undefined = 0
    for n in (20, 50, 200):
        m = 3 * n
        rng = np.random.default_rng(100 + n)
        rated = np.arange(m) < n
        hit, judge_hit, width, lam, neff = (np.zeros(len(RHOS)) for _ in range(5))
        for r in range(a.reps):
            y, e = rng.normal(size=m), rng.normal(size=m)
            f = np.stack([rho * y + math.sqrt(1 - rho * rho) * e + 0.5 for rho in RHOS])
            for i, est in enumerate(calibrated_mean(f, np.broadcast_to(y, f.shape), rated, np.arange(m), seed=r,
                                                    n_boot=a.boot)):
                if est.ci is None or est.human_only_ci is None:  # too few defined replicates: counted, not covered
                    undefined += 1
                    continue
                hit[i] += est.ci[0] <= 0 <= est.ci[1]
                width[i] += (est.ci[1] - est.ci[0]) / (est.human_only_ci[1] - est.human_only_ci[0])
                lam[i] += est.lam
                neff[i] += est.effective_n
                judge_hit[i] += abs(f[i].mean()) <= 1.96 * f[i].std(ddof=1) / math.sqrt(m)
        for i, rho in enumerate(RHOS):
            print(f"{n:3d}  {rho:.1f}  {hit[i] / a.reps:10.3f}  {judge_hit[i] / a.reps:10.3f}  "
                  f"{width[i] / a.reps:16.3f}  {lam[i] / a.reps:6.2f}  {neff[i] / a.reps:5.1f}  {n / (1 - rho * rho):11.1f}")
    if undefined:
        print(f"{undefined} estimates had no interval (too few defined bootstrap replicates): counted as not covering")


if __name__ == "__main__":
    main()
