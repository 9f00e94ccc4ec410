"""Judged values anchored to human ratings: prediction-powered inference (PPI++) over a run's items.

A judged metric is the judge's opinion; its bootstrap interval says how the items vary, not how wrong the
judge is. When a random subset of the items also has a human (clinician) rating with known inclusion
probabilities, the rated items measure the judge's error and the estimate is corrected by it:

    theta = mean_rated(Y) + lam * (mean_unrated(f) - mean_rated(f))          (PPI++, arXiv 2311.01453)

Y the human's per-sample value, f the judge's. lam = 0 is the human-only estimate, lam = 1 PPI
(Angelopoulos et al., Science 2023); lam is power-tuned, Cov(Y, f) / ((1 + n/N) Var(f)), clipped to
[0, 1]. The estimate is unbiased however biased the judge is: a judge that is off by a constant, or by a
lot, costs width, never validity. Metrics that are not means (macro-F1, Pearson r, a gap) use the
prediction-powered bootstrap (Zrnic, arXiv 2405.18379): each replicate is
lam * theta(f_unrated*) + theta(Y*) - lam * theta(f*).

Why not `ppi_py` (ppi-python, MIT): its mean estimator is what `ppi_mean` below computes (the tests
check it value for value against `ppi_py.ppi_mean_ci`, a dev dependency), but trustmh's items come in
clusters (a dialogue's turns, a scenario's questions) and its intervals resample clusters; ppi_py's
intervals are Wald intervals for independent rows and its bootstrap (`ppboot`) resamples rows. Its
weights are not inclusion probabilities, and it pulls numba, statsmodels and pandas into the install.
So the run's estimator is written here over the run's own cluster bootstrap (`metrics.Resamples`):

* Clusters holding a rated row and clusters holding none are resampled apart (the two sets keep their
  sizes, as a fixed-size draw does; Zrnic's bootstrap resamples labelled and unlabelled data apart).
  Rated rows travel with their cluster, so the dependence inside a cluster stays in every replicate.
* A stratified draw (by model, task, judge verdict) gives each rated row its weight 1/pi; the means
  over rated rows are then weighted (Hajek) means, and the judge's mean is over every item of the run.
  In that form theta = mean_rated_w(Y) + lam_M * (mean_all(f) - mean_rated_w(f)), with lam_M = lam * M / N
  (M items, N of them unrated): for a uniform draw exactly the PPI++ estimate above.
* lam is estimated again inside each replicate, so its own noise is in the interval.

Three designs the interval must follow (INFERENCE.md sections 7 and 8): rated values that do not vary get an
exact bound (`no_variance_interval`), never the bootstrap's zero width; a draw stratified by the judge's
verdict, whose PPI correction is then identically 0, is the post-stratified mean (`post_stratified`: no
lambda, a bootstrap within strata); several raters are resampled with the items (`_rater_draws`, a two-way
bootstrap), so the interval holds their disagreement.

Degenerate inputs give a reason and no number: fewer rated items than asked for, a judge that gives
every item the same value (nothing to calibrate with), every item rated (nothing for the judge to add),
unknown inclusion probabilities, weights with a metric that is not a mean."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..scoring.metrics import (Resamples, Table, block_weights, cluster_layout, percentile_interval,
                               small_sample_factor)

LEVEL = 0.95
MIN_RATED = 10  # rated items below which a run's calibrated value is not given (an interval needs a few)


@dataclass
class Estimate:
    """One calibrated value, or the reason there is none (`value` None, `reason` set)."""

    value: float | None
    ci: tuple[float, float] | None
    n_human: int  # rated items
    n_unrated: int  # items with the judge's value only
    lam: float | None = None  # PPI++'s lambda: 0 = human-only, 1 = PPI
    effective_n: float | None = None  # human ratings alone that would give the same variance
    human_only: float | None = None  # the rated items' own mean (lambda = 0)
    human_only_ci: tuple[float, float] | None = None
    reason: str | None = None
    method: str | None = None  # set where it is not the caller's estimator (a post-stratified mean)
    interval: str | None = None  # how the interval was made, where it is not the cluster bootstrap's percentiles
    n_raters: int | None = None  # raters resampled with the items (a two-way bootstrap), where more than one

    @property
    def ok(self) -> bool:
        return self.value is not None


def refused(reason: str, n: int, n_unrated: int) -> Estimate:
    return Estimate(None, None, n, n_unrated, reason=reason)


def degenerate(n: int, n_unrated: int, judge: np.ndarray, min_rated: int = 2) -> str | None:
    """Why these inputs give no calibrated value (None: they can)."""
    if n < max(2, min_rated):
        return f"too few human ratings: {n} rated item{'s' if n != 1 else ''}, at least {max(2, min_rated)} needed"
    if n_unrated == 0:
        return "every item is rated: the judge has nothing to add (the human-only value is the estimate)"
    judge = judge[~np.isnan(judge)]
    if judge.size == 0 or np.all(judge == judge[0]):
        return "the judge gives every item the same value: it carries nothing to calibrate with"
    return None


def exact_upper(n: int, level: float = LEVEL) -> float:
    """Clopper-Pearson's upper limit for 0 successes in n: 1 - (alpha/2)^(1/n) (0.116 for n = 30 at 95%)."""
    return 1.0 - ((1 - level) / 2) ** (1.0 / n)


def no_variance_interval(value: float, n: int, bounds: tuple[float, float] | None,
                         level: float = LEVEL) -> tuple[tuple[float, float] | None, str]:
    """The interval of a mean whose n (independent) rated values are all `value` (INFERENCE.md section 7):
    a bootstrap or a sample variance says [value, value], which no sample of n supports. For values in
    [lo, hi], all n equal to c happens with probability P(X = c)^n, so Clopper-Pearson's limit for n of n
    gives P(X != c) <= u = 1 - (alpha/2)^(1/n) and the mean lies in [c - (c - lo) u, c + (hi - c) u]: at a
    bound of the range, Clopper-Pearson's own interval for 0 of n (0.116 for 30 zeros of a 0/1 value); for
    0/1 values exact. Without the value's range nothing bounds the mean: no interval, and the reason."""
    if bounds is None or n < 1 or not bounds[1] > bounds[0] or not bounds[0] <= value <= bounds[1]:
        return None, (f"no interval: all {n} rated values are {value:g} and the value's range is unknown, so a sample "
                      "that does not vary bounds nothing; rate more items")
    u = exact_upper(n, level)
    return ((value - (value - bounds[0]) * u, value + (bounds[1] - value) * u),
            f"Clopper-Pearson exact bound: all {n} rated values are {value:g}")


def _z(level: float) -> float:
    from scipy.stats import norm
    return float(norm.ppf(0.5 + level / 2))


def power_lambda(y: np.ndarray, f: np.ndarray, f_unrated: np.ndarray) -> float:
    """PPI++'s power-tuned lambda for a mean, Cov(Y, f) / ((1 + n/N) Var(f)), clipped to [0, 1]: the
    covariance over the rated items (ddof 0), the variance over every item (ddof 1), as ppi_py's
    `_calc_lam_glm(clip=True)` has them."""
    n, big_n = len(y), len(f_unrated)
    cov = float(np.mean((y - y.mean()) * (f - f.mean())))
    var = float(np.var(np.concatenate([f, f_unrated]), ddof=1))
    if var <= 0:
        return 0.0
    return float(np.clip(cov / ((1 + n / big_n) * var), 0.0, 1.0))


def ppi_mean(y: Any, f: Any, f_unrated: Any, *, lam: float | None = None, level: float = LEVEL,
             ddof: int = 1, min_rated: int = 2) -> Estimate:
    """PPI++ for a mean of independent items in closed form: the estimate above with the Wald interval
    theta +- z sqrt(lam^2 s^2(f_unrated) / N + s^2(Y - lam f) / n). `ddof` 1 (the sample variances) by
    default; ppi_py uses 0. lam given: that lambda (0: the human-only mean and its interval)."""
    y, f, fu = (np.asarray(a, dtype=float) for a in (y, f, f_unrated))
    n, big_n = len(y), len(fu)
    why = degenerate(n, big_n, np.concatenate([f, fu]), min_rated) if lam != 0 else (
        degenerate(n, 1, np.array([0.0, 1.0]), min_rated))
    if why:
        return refused(why, n, big_n)
    if lam is None:
        lam = power_lambda(y, f, fu)
    value = float(y.mean() + lam * ((fu.mean() if big_n else 0.0) - f.mean()))
    var = (lam ** 2 * fu.var(ddof=ddof) / big_n if lam else 0.0) + (y - lam * f).var(ddof=ddof) / n
    half = _z(level) * math.sqrt(var)
    human_var = y.var(ddof=ddof) / n
    return Estimate(value, (value - half, value + half), n, big_n, lam,
                    effective_n=n * human_var / var if var > 0 else None, human_only=float(y.mean()),
                    human_only_ci=(float(y.mean()) - _z(level) * math.sqrt(human_var),
                                   float(y.mean()) + _z(level) * math.sqrt(human_var)))


# --- the run's estimator: clusters, inclusion probabilities, the bootstrap --------------------------

# Replicates per block: the block's weights (replicates x clusters) stay near 4 MB (metrics._BLOCK_CELLS).
_BLOCK_CELLS = 500_000


@dataclass
class Layout:
    """A run's items for calibration: which are rated, their clusters, and the two sets of clusters the
    bootstrap resamples apart."""

    rated: np.ndarray  # bool per row
    weights: np.ndarray  # 1/pi per rated row (1 where unrated; unused there)
    inverse: np.ndarray  # cluster code per row
    n_clusters: int
    with_rated: np.ndarray  # cluster codes holding a rated row (in cluster order)
    without: np.ndarray  # the others

    @classmethod
    def of(cls, rated: np.ndarray, clusters: np.ndarray, weights: np.ndarray | None = None) -> "Layout":
        rated = np.asarray(rated, dtype=bool)
        inverse = cluster_layout(np.asarray(clusters, dtype=object))[0] if len(rated) else np.zeros(0, int)
        k = int(inverse.max()) + 1 if inverse.size else 0
        has = np.bincount(inverse, weights=rated.astype(float), minlength=k) > 0
        w = np.ones(len(rated)) if weights is None else np.where(rated, np.asarray(weights, dtype=float), 1.0)
        return cls(rated, w, inverse, k, np.flatnonzero(has), np.flatnonzero(~has))

    def blocks(self, seed: int, n_boot: int):
        """Replicate weights (replicates x clusters), a block at a time: clusters with a rated row drawn with
        replacement among themselves from one stream, the others from a second. The first stream draws as
        `metrics.bootstrap` draws for a table of the rated clusters alone (one call per replicate, row-major),
        so with lambda = 0 the interval is the human-only bootstrap's, draw for draw."""
        r, u = len(self.with_rated), len(self.without)
        rng_r = np.random.default_rng(seed)
        rng_u = np.random.default_rng([seed, 1])
        block = max(1, min(n_boot, _BLOCK_CELLS // max(self.n_clusters, 1)))
        for done in range(0, n_boot, block):
            m = min(block, n_boot - done)
            picks = np.concatenate([self.with_rated[rng_r.integers(0, r, (m, r))] if r else np.zeros((m, 0), int),
                                    self.without[rng_u.integers(0, u, (m, u))] if u else np.zeros((m, 0), int)],
                                   axis=1)
            yield block_weights(picks, self.n_clusters)


def _mean_parts(layout: Layout, y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Per-row terms whose sums give the estimate, for each series (S, M) -> (M, S, 9): 1, f, f^2 over every
    row; w, wY, wf, wYf, wf^2 and the count over the rated rows."""
    r = layout.rated.astype(float)
    w = layout.weights * r
    yy = np.where(layout.rated, y, 0.0)
    ones = np.ones_like(f)
    return np.stack([ones, f, f * f, w * ones, w * yy, w * f, w * yy * f, w * f * f, r * ones], axis=-1).swapaxes(0, 1)


def _mean_from_sums(s: np.ndarray, lam: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(theta, lambda, human-only mean) from the sums of `_mean_parts` (..., 9)."""
    m, sf, sff, w, wy, wf, wyf, wff, n = np.moveaxis(s, -1, 0)
    big_n = m - n
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_y, mean_f = wy / w, wf / w
        if lam is None:
            cov = wyf / w - mean_y * mean_f
            var = (sff - sf * sf / m) / (m - 1)
            tuned = cov / ((1 + n / big_n) * var)
            lam_ppi = np.where((var > 0) & np.isfinite(tuned), np.clip(tuned, 0.0, 1.0), 0.0)
        else:
            lam_ppi = np.full(m.shape, float(lam))
        lam_m = np.where(big_n > 0, lam_ppi * m / big_n, 0.0)  # the same lambda on the judge's all-item mean
        theta = mean_y + lam_m * (sf / m - mean_f)
    return theta, lam_ppi, mean_y


def _interval(draws: np.ndarray, level: float, n_boot: int, center: float,
              factor: float = 1.0) -> tuple[float, float] | None:
    """The percentile interval of the replicates, widened by `factor` around `center` (the estimate)."""
    draws = draws[~np.isnan(draws)]
    if draws.size < max(10, n_boot // 10):  # too few defined replicates to say anything (as metrics.bootstrap)
        return None
    alpha = (1 - level) / 2
    lo, hi = percentile_interval(draws, alpha)
    return center - factor * (center - lo), center + factor * (hi - center)


def _rater_draws(rng: np.random.Generator, m: int, per_rater: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """m replicates of the rated rows' human values with the raters resampled (the crossed rater effect of a
    two-way bootstrap, INFERENCE.md section 8): raters drawn with replacement, each row's value the mean of
    its drawn raters' values (m x rows). A row none of whose raters was drawn keeps its value over all of
    them (`fallback`): with every rater rating every item, as `trustmh annotate` asks, that never happens."""
    r = per_rater.shape[1]
    picks = np.zeros((m, r))
    np.add.at(picks, (np.repeat(np.arange(m), r), rng.integers(0, r, m * r)), 1.0)
    present = ~np.isnan(per_rater)
    num = picks @ np.where(present, per_rater, 0.0).T
    den = picks @ present.T.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, fallback[None, :])


def _constant_within(values: np.ndarray, strata: np.ndarray) -> bool:
    """Whether `values` is one value within each stratum (the judge's, under a draw stratified by it)."""
    for h in np.unique(strata):
        v = values[strata == h]
        if v.size and not np.all(v == v[0]):
            return False
    return True


def post_stratified(y: np.ndarray, rated: np.ndarray, clusters: np.ndarray, strata: np.ndarray, *, seed: int,
                    n_boot: int, level: float = LEVEL, per_rater: np.ndarray | None = None,
                    bounds: tuple[float, float] | None = None) -> Estimate:
    """The mean under a draw stratified by the judge's verdict: sum_h (M_h / M) * mean of the rated rows of
    stratum h. Within a stratum the judge's value is one value, so PPI's correction mean_all(f) -
    mean_rated_w(f) is identically 0 and the weighted PPI estimate is this mean (INFERENCE.md section 8):
    there is no lambda and no effective n to report. The interval resamples the rated clusters within each
    stratum (n_h of them, as the design drew them), each stratum's deviation rescaled by sqrt(n_h / (n_h -
    1)) (Rao & Wu 1988) and the whole by Student's t on (rated clusters - strata) degrees of freedom; with
    several raters the raters are resampled too. A stratum with no rated row has no mean: no value."""
    m, n_all = len(y), int(rated.sum())
    labels, inv = np.unique(strata.astype(str), return_inverse=True)
    share = np.bincount(inv, minlength=len(labels)) / m
    missing = [labels[h] for h in range(len(labels)) if not rated[inv == h].any()]
    if missing:
        return refused(f"{len(missing)} {'strata' if len(missing) != 1 else 'stratum'} of the draw "
                       f"{'have' if len(missing) != 1 else 'has'} no rated item: the post-stratified mean needs one "
                       "in each", n_all, m - n_all)
    rows = np.flatnonzero(rated)
    yr, hr = y[rows], inv[rows]
    units = cluster_layout(np.array([f"{h}\x1f{c}" for h, c in zip(hr, np.asarray(clusters, dtype=object)[rows])],
                                    dtype=object))[0]
    k = int(units.max()) + 1
    unit_stratum = np.zeros(k, int)
    unit_stratum[units] = hr

    value = float(sum(share[h] * yr[hr == h].mean() for h in range(len(labels))))
    rng, rng_r = np.random.default_rng(seed), np.random.default_rng([seed, 2])
    draws = []
    for done in range(0, n_boot, 200):
        b = min(200, n_boot - done)
        w = np.zeros((b, k))
        for h in range(len(labels)):
            pool = np.flatnonzero(unit_stratum == h)
            picks = pool[rng.integers(0, len(pool), (b, len(pool)))]
            np.add.at(w, (np.repeat(np.arange(b), len(pool)), picks.ravel()), 1.0)
        yv = _rater_draws(rng_r, b, per_rater[rows], yr) if per_rater is not None else np.broadcast_to(yr, (b, len(yr)))
        row_w = w[:, units]
        # Rao-Wu rescaling, stratum by stratum: the plain within-stratum bootstrap's variance is (n_h - 1) / n_h
        # of the unbiased one
        scaled = np.full(b, value)
        for h in range(len(labels)):
            n_h = int((unit_stratum == h).sum())
            sel = hr == h
            mean_h = (row_w[:, sel] * yv[:, sel]).sum(axis=1) / row_w[:, sel].sum(axis=1)
            scaled += share[h] * (mean_h - float(yr[sel].mean())) * (math.sqrt(n_h / (n_h - 1)) if n_h > 1 else 1.0)
        draws.append(scaled)
    d = np.concatenate(draws)
    df = k - len(labels)
    from scipy.stats import t
    widen = float(t.ppf(0.5 + level / 2, df) / _z(level)) if df >= 1 else math.inf
    est = Estimate(value, _interval(d, level, n_boot, value, widen) if math.isfinite(widen) else None, n_all, m - n_all,
                   human_only=value, method=POST_STRATIFIED,
                   interval=f"bootstrap within the {len(labels)} strata" + (
                       f", raters resampled too ({per_rater.shape[1]} raters)" if per_rater is not None else ""),
                   n_raters=None if per_rater is None else per_rater.shape[1])
    if not math.isfinite(widen):
        est.interval = "no interval: one rated cluster in each stratum leaves nothing to resample; rate more items"
    # a stratum whose rated values do not vary adds nothing to the bootstrap's spread: its own exact bound
    # (no_variance_interval, Bonferroni over such strata) widens the interval by its share instead
    flat = [h for h in range(len(labels)) if np.all(yr[hr == h] == yr[hr == h][0])]
    if flat and est.ci is not None:
        lo, hi = est.ci
        for h in flat:
            c = float(yr[hr == h][0])
            got, why = no_variance_interval(c, int((unit_stratum == h).sum()), bounds, 1 - (1 - level) / len(flat))
            if got is None:
                est.ci, est.interval = None, why
                break
            lo, hi = lo - share[h] * (c - got[0]), hi + share[h] * (got[1] - c)
        else:
            est.ci = (lo, hi)
            est.interval += (f"; {len(flat)} stratum's" if len(flat) == 1 else f"; {len(flat)} strata's") + (
                " rated values do not vary: widened by their Clopper-Pearson exact bounds")
    est.human_only_ci = est.ci
    return est


POST_STRATIFIED = "post-stratified mean (stratified draw: the judge's value is constant within each stratum)"


def calibrated_mean(f: Any, y: Any, rated: Any, clusters: Any, *, weights: Any = None, seed: int = 0,
                    n_boot: int = 1000, level: float = LEVEL, lam: float | None = None,
                    min_rated: int = 2, strata: Any = None, per_rater: Any = None,
                    bounds: tuple[float, float] | None = None) -> Any:
    """PPI++ for the mean of a value over a run's M items, with the run's cluster bootstrap.

    f: the judge's value of every item; y: the human's (read where `rated`; the mean over raters); clusters:
    the resampling unit of each item; weights: 1/pi of each rated item under a stratified draw (None:
    uniform). lam None: power-tuned, in the estimate and again in every replicate. f and y of shape (S, M)
    are S values of the same items (a task's criteria), calibrated on the same replicates: a list of S
    estimates.

    strata: each item's stratum under a draw stratified by the judge's verdict; a series whose judge value is
    constant within every stratum is the post-stratified mean (`post_stratified`). per_rater: each item's
    value from each rater (M x R, or S x M x R; NaN where a rater did not rate it): with two or more raters
    they are resampled with the items (a two-way bootstrap). bounds: the value's range; rated values that
    do not vary get the exact interval of `no_variance_interval`, never the bootstrap's zero width."""
    f, y = np.asarray(f, dtype=float), np.asarray(y, dtype=float)
    single = f.ndim == 1
    f, y = np.atleast_2d(f), np.atleast_2d(y)
    rated = np.asarray(rated, dtype=bool)
    if per_rater is not None:
        per_rater = np.asarray(per_rater, dtype=float)
        per_rater = per_rater[None] if per_rater.ndim == 2 else per_rater
        if per_rater.shape[-1] < 2:
            per_rater = None
    n, big_n = int(rated.sum()), int((~rated).sum())
    whys = [degenerate(n, big_n, fs, min_rated) for fs in f]
    out: list[Estimate | None] = [refused(w, n, big_n) if w else None for w in whys]
    if all(whys):
        return out[0] if single else out
    if bounds is None and np.isin(f[~np.isnan(f)], (0.0, 1.0)).all() and np.isin(y[:, rated], (0.0, 1.0)).all():
        bounds = (0.0, 1.0)  # 0/1 values: a proportion
    if strata is not None:
        strata = np.asarray(strata, dtype=object)
        for i in range(len(f)):
            if out[i] is None and _constant_within(f[i], strata):
                out[i] = post_stratified(y[i], rated, np.asarray(clusters, dtype=object), strata,
                                         seed=seed, n_boot=n_boot, level=level, bounds=bounds,
                                         per_rater=None if per_rater is None else per_rater[i])
        if all(e is not None for e in out):
            return out[0] if single else out
    layout = Layout.of(rated, np.asarray(clusters, dtype=object), weights)
    parts = _mean_parts(layout, y, f)  # (M, S, 9)
    series, q = parts.shape[1], parts.shape[2]
    flat = parts.reshape(len(rated), series * q)
    per_cluster = np.stack([np.bincount(layout.inverse, weights=p, minlength=layout.n_clusters) for p in flat.T], axis=1)
    theta, lam_hat, human = _mean_from_sums(parts.sum(axis=0), lam)
    rows = np.flatnonzero(rated)
    rng_r = np.random.default_rng([seed, 2])
    draws, human_draws = [], []
    for block in layout.blocks(seed, n_boot):
        sums = (block @ per_cluster).reshape(len(block), series, q)
        if per_rater is not None:  # the human terms w*Y and w*Y*f again, from the raters drawn in each replicate
            mult = block[:, layout.inverse[rows]] * layout.weights[rows]
            for i in range(series):
                yv = _rater_draws(rng_r, len(block), per_rater[i][rows], y[i][rows])
                sums[:, i, 4] = (mult * yv).sum(axis=1)
                sums[:, i, 6] = (mult * yv * f[i][rows]).sum(axis=1)
        t, _, h = _mean_from_sums(sums, lam)
        draws.append(t)
        human_draws.append(h)
    d, h = np.concatenate(draws), np.concatenate(human_draws)
    widen = small_sample_factor(len(layout.with_rated), level)
    for i in range(series):
        if out[i] is None:
            var_d, var_h = np.nanvar(d[:, i]), np.nanvar(h[:, i])
            est = Estimate(float(theta[i]), _interval(d[:, i], level, n_boot, float(theta[i]), widen), n, big_n,
                           float(lam_hat[i]), effective_n=float(n * var_h / var_d) if var_d > 0 else None,
                           human_only=float(human[i]),
                           human_only_ci=_interval(h[:, i], level, n_boot, float(human[i]), widen))
            if per_rater is not None:
                est.n_raters = per_rater.shape[-1]
                est.interval = (f"two-way bootstrap: rated clusters and the {est.n_raters} raters resampled, "
                                "lambda tuned again in each replicate")
            yr = y[i][rows]
            if lam_hat[i] == 0 and yr.size and np.all(yr == yr[0]):
                # lambda 0: the estimate is the human values' own mean, and they do not vary
                est.ci, est.interval = no_variance_interval(float(yr[0]), len(layout.with_rated), bounds, level)
                est.human_only_ci, est.effective_n = est.ci, None
            out[i] = est
    return out[0] if single else out


# --- metrics that are not means: the prediction-powered bootstrap -----------------------------------

Many = Callable[[Table, Resamples], "dict[str, np.ndarray]"]


def _draws(layout: Layout, tables: tuple[Table, Table, Table], many: Many, seed: int, n_boot: int):
    """The metrics of the three tables (rated rows with the human's values, the same rows with the judge's,
    the unrated rows with the judge's) in every replicate: name -> (replicates, 3)."""
    out: dict[str, list[np.ndarray]] = {}
    masks = (layout.rated, layout.rated, ~layout.rated)
    for block in layout.blocks(seed, n_boot):
        res = Resamples(layout.inverse, block)
        got = [many(t, res.rows(mk)) for t, mk in zip(tables, masks)]
        for name in set(got[0]) & set(got[1]) & set(got[2]):
            out.setdefault(name, []).append(np.stack([np.asarray(g[name], dtype=float) for g in got], axis=1))
    return {k: np.concatenate(v) for k, v in out.items()}


def ppboot(judge: Table, human: Table, rated: Any, many: Many, *, names: list[str] | None = None, seed: int = 0,
           n_boot: int = 1000, n_pilot: int = 100, level: float = LEVEL, lam: float | None = None,
           min_rated: int = 2, judge_value: str | None = None) -> dict[str, Estimate]:
    """The prediction-powered bootstrap of every metric `many` computes (a task's aggregate_many shape:
    a table and a block of resamples -> name -> values per resample).

    judge: every item with the judge's values; human: the same rows with the human's values (read on the
    rated rows); both carry the run's clusters. lam None: Cov*(theta(Y), theta(f)) / (Var*(theta(f)) +
    Var*(theta(f_unrated))) from `n_pilot` replicates of their own, clipped to [0, 1]. A uniform draw
    only: the metric of the rated rows must stand for the run's. `judge_value`: the per-sample value the
    judge gives (a constant one leaves nothing to calibrate with)."""
    rated = np.asarray(rated, dtype=bool)
    n, big_n = int(rated.sum()), int((~rated).sum())
    layout = Layout.of(rated, judge.clusters)
    rows, others = np.flatnonzero(rated), np.flatnonzero(~rated)
    tables = (human.take(rows), judge.take(rows), judge.take(others))
    whole = [many(t, Resamples(layout.inverse[idx], np.ones((1, layout.n_clusters))))
             for t, idx in zip(tables, (rows, rows, others))]
    wanted = names if names is not None else sorted(set(whole[0]) & set(whole[1]) & set(whole[2]))
    draws = _draws(layout, tables, many, seed, n_boot)
    pilot = _draws(layout, tables, many, seed + 7919, n_pilot) if lam is None else {}
    out: dict[str, Estimate] = {}
    for name in wanted:
        point = [float(np.asarray(w.get(name, [math.nan]), dtype=float).reshape(-1)[0]) for w in whole]
        why = degenerate(n, big_n, judge.col(judge_value) if judge_value else np.array([0.0, 1.0]), min_rated)
        if why is None and any(math.isnan(p) for p in point):
            why = ("undefined on the rated items (too few of them, or a group or class they lack)"
                   if math.isnan(point[0]) or math.isnan(point[1]) else "undefined on the items only the judge rated")
        if why is None and name not in draws:
            why = "not computed in the bootstrap"
        if why:
            out[name] = refused(why, n, big_n)
            continue
        d = draws[name]
        if lam is None:
            p = pilot.get(name)
            ok = p is not None and ~np.isnan(p).any(axis=1)
            lam_hat = 0.0
            if p is not None and ok.sum() >= 10:
                p = p[ok]
                denom = p[:, 1].var() + p[:, 2].var()
                lam_hat = float(np.clip(np.cov(p[:, 0], p[:, 1])[0, 1] / denom, 0.0, 1.0)) if denom > 0 else 0.0
        else:
            lam_hat = float(lam)
        theta = lam_hat * point[2] + point[0] - lam_hat * point[1]
        reps = lam_hat * d[:, 2] + d[:, 0] - lam_hat * d[:, 1]
        var_t, var_h = np.nanvar(reps), np.nanvar(d[:, 0])
        widen = small_sample_factor(len(layout.with_rated), level)
        out[name] = Estimate(float(theta), _interval(reps, level, n_boot, theta, widen), n, big_n, lam_hat,
                             effective_n=float(n * var_h / var_t) if var_t > 0 else None,
                             human_only=point[0], human_only_ci=_interval(d[:, 0], level, n_boot, point[0], widen))
    return out
