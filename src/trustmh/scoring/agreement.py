"""Agreement between raters: the statistics `trustmh validate-judge` reports, in one place.

* ICC(C,1) and ICC(A,1), McGraw & Wong (1996), two-way model, single rater: consistency (does the judge
  rank the targets as the humans do, whatever its offset) and absolute agreement (does it give the same
  numbers). From the two-way ANOVA of a complete targets x raters matrix:
  MSR (targets), MSC (raters), MSE (residual);
  ICC(C,1) = (MSR - MSE) / (MSR + (k-1) MSE) and ICC(A,1) = (MSR - MSE) / (MSR + (k-1) MSE + k (MSC - MSE) / n).
* Quadratic-weighted kappa and Spearman rho (`metrics.weighted_kappa`, `metrics.spearman`).

A judge is compared with each human rater on the items both rated, and the comparison is averaged over
the raters. The human ceiling is the same statistic for each human against the other humans (leave one
out), averaged over the humans: what a judge as good as one more human would reach. Every value gets a
percentile bootstrap interval over items, and the difference judge - ceiling a paired one (the same
items drawn for both), from which the verdict is read: "below the human ceiling" when the whole interval
of the difference is under 0, "within the human ceiling" when its lower end is no lower than -MARGIN
(0.1), "inconclusive" otherwise (an interval too wide to say: more items are needed).

A verdict also needs a ceiling that can carry one (INFERENCE.md section 8): at least MIN_CEILING_ITEMS
items rated by two humans (Koo & Li 2016 ask 30 for a reliability study), a ceiling interval that is not
degenerate (a zero-width bootstrap interval from a handful of items says nothing), and humans who agree
beyond chance across that interval (a ceiling at or under 0 is nothing to reach). Otherwise the verdict is
"inconclusive" and says what is missing.

With many raters, each rater is compared with at most 2 * PARTNERS others (a balanced design over a
seeded order of the raters, `rater_pairs`), so the cost grows linearly with raters, not with their pairs;
with up to 2 * PARTNERS + 1 raters every pair is used, and the ceiling is the all-pairs one.

Everything here is numpy on arrays; no file, judge or run is touched. tests/test_agreement.py checks it
against hand computation, Shrout & Fleiss's published example, scipy and scikit-learn."""

from __future__ import annotations

import collections
import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .metrics import Resamples, Table, bootstrap, derived_seed, percentile_interval, spearman, weighted_kappa

if TYPE_CHECKING:  # results.json's models (pydantic) load where a row is made, not with the statistics
    from .results import TaskResult

STATS = ("icc_c1", "icc_a1", "kappa_quadratic", "spearman")
STAT_NAMES = {"icc_c1": "ICC(C,1)", "icc_a1": "ICC(A,1)", "kappa_quadratic": "QW kappa", "spearman": "Spearman rho"}
# How far below the ceiling a judge may be, at the interval's lower end, and still be "within" it: the
# same statistic 0.1 lower (an ICC of 0.75 instead of 0.85) is a difference a user would still accept.
MARGIN = 0.1
WITHIN, BELOW, INCONCLUSIVE, NO_CEILING, UNDEFINED = (
    "within the human ceiling", "below the human ceiling",
    f"inconclusive (judge - ceiling may be 0 or below -{MARGIN}: more items needed)",
    "no human ceiling (fewer than two raters on shared items)", "undefined")
# Two raters who rated the same items but whose ratings (nearly) never vary there: the statistic itself is
# undefined, which is not the same as having one rater (issue 47).
NO_CEILING_NO_VARIANCE = ("no human ceiling: the humans' ratings on the items two of them rated barely vary, so "
                          "their agreement is undefined")
MIN_CEILING_ITEMS = 30
PARTNERS = 5  # each rater's pairs: with offsets 1..PARTNERS in a seeded order, 2 * PARTNERS partners
# Sets on which agreement means nothing: a reason in place of every number and verdict.
MIN_ITEMS = 3
TOO_FEW_ITEMS = f"no verdict: fewer than {MIN_ITEMS} items rated by the humans (agreement needs more)"
CONSTANT = "no verdict: the human ratings do not vary, so agreement with them is undefined"


def icc(ratings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ICC(C,1) and ICC(A,1) of complete targets x raters matrices, shape (..., n, k); NaN where undefined
    (fewer than 2 targets or raters, or no variance at all). Leading axes are independent matrices (a
    block of bootstrap resamples at once)."""
    y = np.asarray(ratings, dtype=float)
    n, k = y.shape[-2], y.shape[-1]
    if n < 2 or k < 2:
        nan = np.full(y.shape[:-2], math.nan)
        return nan, nan.copy()
    grand = y.mean(axis=(-2, -1), keepdims=True)
    rows = y.mean(axis=-1, keepdims=True)
    cols = y.mean(axis=-2, keepdims=True)
    ss_rows = k * ((rows - grand) ** 2).sum(axis=(-2, -1))
    ss_cols = n * ((cols - grand) ** 2).sum(axis=(-2, -1))
    ss_err = ((y - rows - cols + grand) ** 2).sum(axis=(-2, -1))
    msr, msc, mse = ss_rows / (n - 1), ss_cols / (k - 1), ss_err / ((n - 1) * (k - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        c1 = (msr - mse) / (msr + (k - 1) * mse)
        a1 = (msr - mse) / (msr + (k - 1) * mse + k * (msc - mse) / n)
    return np.where(np.isfinite(c1), c1, math.nan), np.where(np.isfinite(a1), a1, math.nan)


def pair_stats(a: np.ndarray, b: np.ndarray, scale: tuple[int, ...]) -> dict[str, float]:
    """Every statistic of rater a against rater b over the rows both rated (NaN marks a missing rating)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = ~(np.isnan(a) | np.isnan(b))
    c1, a1 = icc(np.column_stack([a[ok], b[ok]]))
    return {"icc_c1": float(c1), "icc_a1": float(a1), "kappa_quadratic": weighted_kappa(a, b, scale),
            "spearman": spearman(a, b)}


def _mean_defined(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return float(np.mean(kept)) if kept else math.nan


def _bias(judge: np.ndarray, human: np.ndarray) -> float:
    """Mean of judge - human over the items both rated: how far the judge rates above (or below) a person."""
    ok = ~(np.isnan(judge) | np.isnan(human))
    return float((judge[ok] - human[ok]).mean()) if ok.any() else math.nan


def judge_and_ceiling(table: Table, raters: list[str], scale: tuple[int, ...]) -> dict[str, float]:
    """`judge.<stat>` (the judge column against each rater, averaged), `ceiling.<stat>` (each rater
    against the others, averaged over raters) and `diff.<stat>` = judge - ceiling, for one criterion; and
    `judge.bias`, the judge's mean difference from each rater, averaged.

    A pair that shares too few rows to give a statistic is left out of its average, never counted as 0."""
    judge = table.col("judge")
    cols = {r: table.col(f"rater:{r}") for r in raters}
    vs_judge = [pair_stats(judge, cols[r], scale) for r in raters]
    pairs = {(a, b): pair_stats(cols[a], cols[b], scale) for a, b in rater_pairs(raters)}
    out: dict[str, float] = {"judge.bias": _mean_defined([_bias(judge, cols[r]) for r in raters])}
    for s in STATS:
        out[f"judge.{s}"] = _mean_defined([p[s] for p in vs_judge])
        # each rater's leave-one-out value: its mean agreement with the other raters it is paired with
        loo = [_mean_defined([p[s] for (a, b), p in pairs.items() if r in (a, b)]) for r in raters]
        out[f"ceiling.{s}"] = _mean_defined(loo)
        out[f"diff.{s}"] = out[f"judge.{s}"] - out[f"ceiling.{s}"]
    return out


def rater_pairs(raters: list[str]) -> list[tuple[str, str]]:
    """The rater pairs the ceiling is computed from: every pair up to 2 * PARTNERS + 1 raters; beyond that a
    balanced design, each rater paired with the raters 1..PARTNERS places after it (cyclically) in an order
    shuffled from the raters' names, so every rater has 2 * PARTNERS partners and the pairs (and the cost)
    grow linearly with raters. Each rater's mean over its partners estimates its mean over all others
    without bias: the order does not depend on any rating."""
    import hashlib
    n = len(raters)
    if n <= 2 * PARTNERS + 1:
        return [(a, b) for i, a in enumerate(raters) for b in raters[i + 1:]]
    seed = int(hashlib.sha256("\x1f".join(sorted(raters)).encode()).hexdigest()[:12], 16)
    order = [raters[i] for i in np.random.default_rng(seed).permutation(n)]
    return [(order[i], order[(i + d) % n]) for i in range(n) for d in range(1, PARTNERS + 1)]


def judge_and_ceiling_many(table: Table, resamples: Resamples, raters: list[str],
                           scale: tuple[int, ...]) -> dict[str, np.ndarray] | None:
    """`judge_and_ceiling` for a whole block of bootstrap resamples at once (bootstrap's aggregate_many),
    or None when a rating is off `scale` (then each resample is computed on its own).

    Every statistic here depends on a pair of raters only through how often each pair of categories
    occurs on the rows both rated; in resample b that count is the sum of the rows' multiplicities. So each
    pair is computed once per block: its weighted joint counts (B x K x K, one pass over its rows), then
    ICC(C,1), ICC(A,1), quadratic-weighted kappa and Spearman's rho of every resample from them, instead of
    a scalar computation per pair per resample (raters^2 x resamples calls: 40 raters took over 10
    minutes). tests/test_agreement.py checks it against the per-resample path on the same draws."""
    values = np.asarray(scale, dtype=float)
    cols = {"judge": table.col("judge"), **{r: table.col(f"rater:{r}") for r in raters}}
    codes = {}
    for name, col in cols.items():
        code = np.full(col.shape, -1)
        present = ~np.isnan(col)
        pos = np.searchsorted(values, col[present])
        if (pos >= len(values)).any() or (values[np.minimum(pos, len(values) - 1)] != col[present]).any():
            return None
        code[present] = pos
        codes[name] = code
    weights = resamples.weights[:, resamples.inverse]  # B x rows: each row's multiplicity in each resample

    def pair(a: str, b: str) -> dict[str, np.ndarray]:
        return _pair_stats_many(_joint_counts(codes[a], codes[b], weights, len(values)), values)

    vs_judge = [pair("judge", r) for r in raters]
    index = {r: i for i, r in enumerate(raters)}
    # each rater's sum and count of defined pair values (raters x resamples): memory and time linear in raters
    sums = {s: np.zeros((len(raters), len(weights))) for s in STATS}
    counts = {s: np.zeros((len(raters), len(weights))) for s in STATS}
    for a, b in rater_pairs(raters):
        got = pair(a, b)
        for s in STATS:
            ok = ~np.isnan(got[s])
            for r in (a, b):
                sums[s][index[r]] += np.where(ok, got[s], 0.0)
                counts[s][index[r]] += ok
    out: dict[str, np.ndarray] = {}
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a mean of no defined value is NaN, as _mean_defined's
        out["judge.bias"] = np.nanmean(np.stack([p["bias"] for p in vs_judge]), axis=0)
        for s in STATS:
            out[f"judge.{s}"] = np.nanmean(np.stack([p[s] for p in vs_judge]), axis=0)
            out[f"ceiling.{s}"] = np.nanmean(np.where(counts[s] > 0, sums[s] / counts[s], np.nan), axis=0)
            out[f"diff.{s}"] = out[f"judge.{s}"] - out[f"ceiling.{s}"]
    return out


def _joint_counts(a: np.ndarray, b: np.ndarray, weights: np.ndarray, k: int) -> np.ndarray:
    """B x k x k: in each resample, how often rater a gave category c and rater b category d on one row."""
    both = (a >= 0) & (b >= 0)
    cells = a[both] * k + b[both]
    out = np.zeros((weights.shape[0], k * k))
    if cells.size:
        order = np.argsort(cells, kind="stable")
        cells = cells[order]
        starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
        out[:, cells[starts]] = np.add.reduceat(weights[:, both][:, order], starts, axis=1)
    return out.reshape(-1, k, k)


def _pair_stats_many(joint: np.ndarray, v: np.ndarray) -> dict[str, np.ndarray]:
    """pair_stats of every resample from its joint counts (B x K x K over category values v)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        n = joint.sum(axis=(1, 2))
        na, nb = joint.sum(axis=2), joint.sum(axis=1)  # B x K marginals
        sa, sb = na @ v, nb @ v
        saa, sbb = na @ v ** 2, nb @ v ** 2
        sab = np.einsum("bcd,c,d->b", joint, v, v)
        # ICC from the two-way ANOVA of the n x 2 matrix (McGraw & Wong), its sums of squares from these sums
        grand = (sa + sb) / (2 * n)
        ss_rows = 2 * ((saa + 2 * sab + sbb) / 4 - n * grand ** 2)
        ss_cols = n * ((sa / n - grand) ** 2 + (sb / n - grand) ** 2)
        ss_err = saa + sbb - 2 * n * grand ** 2 - ss_rows - ss_cols
        msr, msc, mse = ss_rows / (n - 1), ss_cols, ss_err / (n - 1)
        c1 = (msr - mse) / (msr + mse)
        a1 = (msr - mse) / (msr + mse + 2 * (msc - mse) / n)
        # quadratic-weighted kappa: observed against the marginals' expected counts
        w = (np.arange(len(v))[:, None] - np.arange(len(v))[None, :]).astype(float) ** 2
        expected = na[:, :, None] * nb[:, None, :] / n[:, None, None]
        chance = np.einsum("bcd,cd->b", expected, w)
        kappa = 1 - np.einsum("bcd,cd->b", joint, w) / chance
        # Spearman: Pearson's r of the average ranks each category holds in the resample
        ra = np.cumsum(na, axis=1) - na + (na + 1) / 2
        rb = np.cumsum(nb, axis=1) - nb + (nb + 1) / 2
        mid = (n + 1) / 2
        da, db = ra - mid[:, None], rb - mid[:, None]
        cov = np.einsum("bcd,bc,bd->b", joint, da, db)
        rho = cov / np.sqrt((na * da ** 2).sum(axis=1) * (nb * db ** 2).sum(axis=1))
        bias = (sa - sb) / n  # the mean of a - b (_bias), defined from one row; nan in a resample of none
    few = n < 2
    out = {"icc_c1": c1, "icc_a1": a1, "kappa_quadratic": np.where(chance > 0, kappa, np.nan), "spearman": rho,
           "bias": bias}
    return {s: np.where((few & (s != "bias")) | ~np.isfinite(x), np.nan, x) for s, x in out.items()}


@dataclass
class CriterionAgreement:
    """One criterion's judge-vs-human and human-vs-human agreement, with intervals and verdicts."""

    criterion: str
    n_items: int  # items with a judge rating and at least one human rating
    raters: list[str]
    values: dict[str, float] = field(default_factory=dict)  # judge.<stat>, ceiling.<stat>, diff.<stat>
    cis: dict[str, tuple[float, float]] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)  # stat -> WITHIN / BELOW / NO_CEILING / UNDEFINED


def ceiling_missing(n_shared: int, ceiling_ci: tuple[float, float] | None) -> str | None:
    """What the human ceiling lacks to carry a verdict (None: nothing): enough items rated by two humans, an
    interval that is not degenerate, and agreement beyond chance across that interval."""
    if n_shared < MIN_CEILING_ITEMS:
        return (f"inconclusive: the human ceiling rests on {n_shared} item{'s' if n_shared != 1 else ''} rated by "
                f"two raters; rate at least {MIN_CEILING_ITEMS} items by two or more raters")
    if ceiling_ci is None or not ceiling_ci[1] > ceiling_ci[0]:
        return ("inconclusive: the human ceiling has no interval of any width (its resamples do not vary); "
                "rate more items, with raters who use more of the scale")
    if ceiling_ci[0] <= 0:
        return (f"inconclusive: the human ceiling's interval [{ceiling_ci[0]:.2f}, {ceiling_ci[1]:.2f}] reaches 0: "
                "the raters may agree no better than chance, so there is nothing to reach; rate more items "
                "or clarify the rubric with the raters")
    return None


def verdict(value: float, ceiling: float, diff_ci: tuple[float, float] | None, *,
            ceiling_ci: tuple[float, float] | None = None, n_shared: int | None = None) -> str:
    """BELOW when the whole interval of judge - ceiling is under 0; WITHIN when its lower end is at least
    -MARGIN (at worst a little below people, at 95%); INCONCLUSIVE otherwise, and without an interval.
    Given the ceiling's interval and the items two humans rated (`n_shared`), a ceiling that cannot carry
    a verdict gives "inconclusive" with what is missing (`ceiling_missing`)."""
    if math.isnan(ceiling):
        return NO_CEILING
    if math.isnan(value):
        return UNDEFINED
    if n_shared is not None and (missing := ceiling_missing(n_shared, ceiling_ci)):
        return missing
    if diff_ci is None:
        return INCONCLUSIVE
    if diff_ci[1] < 0:
        return BELOW
    return WITHIN if diff_ci[0] >= -MARGIN else INCONCLUSIVE


def criterion_agreement(criterion: str, human: dict[str, dict[str, float]], judge: dict[str, float],
                        scale: tuple[int, ...], *, seed: int, n_boot: int) -> CriterionAgreement:
    """human: item -> rater -> rating; judge: item -> rating (items the judge could not rate are absent).
    Items are the bootstrap's unit; the ceiling uses every item two humans rated, the judge the items it
    rated, so a judge failure costs the judge comparison and never the ceiling. A set with fewer than
    MIN_ITEMS items, or whose human ratings never vary, gets its reason (TOO_FEW_ITEMS, CONSTANT) for every
    statistic, and no number."""
    raters = sorted({r for by in human.values() for r in by})
    items = sorted(human)
    n_judged = sum(1 for i in items if i in judge)
    ratings = {v for by in human.values() for v in by.values()}
    degenerate = TOO_FEW_ITEMS if len(items) < MIN_ITEMS else CONSTANT if len(ratings) < 2 else None
    if degenerate:
        values = {"judge.bias": math.nan, **{f"{w}.{s}": math.nan for w in ("judge", "ceiling", "diff") for s in STATS}}
        return CriterionAgreement(criterion, n_judged, raters, values, {}, {s: degenerate for s in STATS})
    rows = [{"judge": judge.get(i, math.nan), **{f"rater:{r}": v for r, v in human[i].items()}} for i in items]
    table = Table.from_rows(rows, items)
    values = judge_and_ceiling(table, raters, scale)
    cis = bootstrap(table, lambda t: judge_and_ceiling(t, raters, scale),
                    seed=derived_seed(seed, f"agreement|{criterion}"), n_boot=n_boot,
                    aggregate_many=lambda t, resamples: judge_and_ceiling_many(t, resamples, raters, scale))
    n_shared = sum(1 for i in items if len(human[i]) >= 2)
    verdicts = {s: verdict(values[f"judge.{s}"], values[f"ceiling.{s}"], cis.get(f"diff.{s}"),
                           ceiling_ci=cis.get(f"ceiling.{s}"), n_shared=n_shared) for s in STATS}
    if n_shared and len(raters) >= 2:  # two raters on shared items: an undefined ceiling is their ratings' doing
        verdicts = {s: NO_CEILING_NO_VARIANCE if v == NO_CEILING else v for s, v in verdicts.items()}
    return CriterionAgreement(criterion, n_judged, raters, values, cis, verdicts)


def icc_bootstrap(ratings: np.ndarray, *, seed: int, n_boot: int = 1000, level: float = 0.95,
                  keep: tuple[float, float] | None = None) -> dict[str, tuple[float, float] | None]:
    """Percentile intervals of ICC(C,1) and ICC(A,1), resampling the targets (rows) of one matrix.

    `keep` drops resamples whose value falls outside a range before taking percentiles: MentalAlign-70k's
    published intervals keep only ICCs in [0, 1], so reproducing them needs the same rule (it narrows
    the lower end); left None, every defined resample counts."""
    y = np.asarray(ratings, dtype=float)
    picks = np.random.default_rng(seed).integers(0, y.shape[0], size=(n_boot, y.shape[0]))
    c1, a1 = icc(y[picks])
    alpha = (1 - level) / 2
    out: dict[str, tuple[float, float] | None] = {}
    for name, draws in (("icc_c1", c1), ("icc_a1", a1)):
        ok = ~np.isnan(draws)
        if keep is not None:
            ok &= (draws >= keep[0]) & (draws <= keep[1])
        kept = draws[ok]
        out[name] = percentile_interval(kept, alpha) if kept.size >= 10 else None
    return out


def agreement_task_result(ca: CriterionAgreement, n_rated: int, failed: collections.Counter,
                 judge_errors: collections.Counter) -> TaskResult:
    """One criterion's agreement as a results.json task row (validate_judge.<criterion>)."""
    from .results import MetricValue, TaskResult
    metrics = {f"{who}.{s}": MetricValue(value=None if math.isnan(v := ca.values[f"{who}.{s}"]) else v,
                                         ci=ca.cis.get(f"{who}.{s}"), n=ca.n_items)
               for who in ("judge", "ceiling", "diff") for s in STATS}
    bias = ca.values.get("judge.bias", math.nan)
    metrics["judge.bias"] = MetricValue(value=None if math.isnan(bias) else bias, ci=ca.cis.get("judge.bias"),
                                        n=ca.n_items)
    head = metrics["judge.icc_a1"]
    return TaskResult(task=f"validate_judge.{ca.criterion}", pillar="judge", status="ok", metric="judge.icc_a1",
                      value=head.value, ci=head.ci, higher_is_better=True, n=ca.n_items, n_samples=n_rated,
                      n_judge_failed=sum(failed.values()), judge_failed_reasons=dict(failed),
                      n_judge_errors=sum(judge_errors.values()), judge_error_kinds=dict(judge_errors),
                      description="ICC(A,1) of the judge against each human rater, averaged; metrics ceiling.* "
                                  "are the humans against each other, diff.* judge - ceiling; the verdicts are "
                                  "in agreement.json", metrics=metrics)


def agreement_json(ca_list: list[CriterionAgreement], **about: Any) -> dict[str, Any]:
    """agreement.json: per criterion and statistic the judge's value, the human ceiling, their difference
    (each with its interval) and the verdict; what the report section shows."""
    def num(v: float) -> float | None:
        return None if math.isnan(v) else v

    return {**about, "criteria": [
        {"criterion": ca.criterion, "n_items": ca.n_items, "raters": ca.raters,
         "bias": {"value": num(ca.values.get("judge.bias", math.nan)), "ci": ca.cis.get("judge.bias")},
         "statistics": {
            s: {**{w: num(ca.values[f"{w}.{s}"]) for w in ("judge", "ceiling", "diff")},
                **{f"{w}_ci": ca.cis.get(f"{w}.{s}") for w in ("judge", "ceiling", "diff")},
                "verdict": ca.verdicts[s]} for s in STATS}} for ca in ca_list]}


# --- judge panels: the panel's verdict and how far its judges agree ---------------------------------


def panel_verdict(verdicts: list[float | None], kind: str) -> tuple[float | None, str | None]:
    """One sample's panel value from its judges' values (None or NaN: that judge gave no usable verdict).

    kind "score": the mean of the usable values; "label": the value a strict majority of the usable
    verdicts gave. Either needs usable verdicts from a strict majority of the panel; a tie, or too few
    usable verdicts, is a judge failure with its reason (never broken by the judges' order)."""
    usable = [float(v) for v in verdicts if v is not None and not math.isnan(v)]
    k = len(verdicts)
    if 2 * len(usable) <= k:
        return None, f"only {len(usable)} of {k} judges gave a usable verdict"
    if kind == "score":
        return float(np.mean(usable)), None
    values, counts = np.unique(usable, return_counts=True)
    best = counts.max()
    if 2 * best <= len(usable):
        leaders = values[counts == best]
        what = ", ".join(f"{x:g}" for x in leaders) + " tied" if len(leaders) > 1 else f"{len(usable)} verdicts"
        return None, f"no strict majority among the judges ({what})"
    return float(values[counts.argmax()]), None


def value_kinds(columns: dict[str, list[float]]) -> dict[str, str]:
    """Each per-sample value's kind for a panel, from every value any judge gave it over a task: "label"
    when they are all 0 or 1 (a yes/no the judges vote on), "score" otherwise (a rating they average)."""
    return {c: "label" if all(v in (0.0, 1.0) for v in vs if not math.isnan(v)) else "score"
            for c, vs in columns.items()}


def combine_values(given: list[dict[str, float]], kinds: dict[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """One sample's panel values from each judge's per-sample values (a value absent: that judge gave no
    usable verdict for it): (values, failure reason by value). A value no judge has is not a judgement and
    is neither combined nor failed; the others go through `panel_verdict` with their kind."""
    values: dict[str, float] = {}
    failed: dict[str, str] = {}
    for c in sorted({c for g in given for c in g}):
        v, why = panel_verdict([g.get(c) for g in given], kinds.get(c, "score"))
        if v is not None:
            values[c] = v
        else:
            failed[c] = why or "no panel verdict"
    return values, failed


def alpha_level(kind: str) -> str:
    """Krippendorff's level of measurement for a value kind: labels are nominal; scores are averaged by the
    panel, which treats their scale as interval, so their agreement is measured at that level too."""
    return "nominal" if kind == "label" else "interval"


def unanimous(matrix: np.ndarray) -> bool:
    """Whether the judges (rows) give one value on every sample (column) where two or more gave a usable
    verdict (NaN: none); a verdict that is missing is missing, never agreement or disagreement."""
    m = np.asarray(matrix, dtype=float)
    shared = m[:, (~np.isnan(m)).sum(axis=0) >= 2]
    return bool(np.array_equal(np.nanmin(shared, axis=0), np.nanmax(shared, axis=0))) if shared.size else True


def judge_alpha(matrix: np.ndarray, level: str, *, seed: int, n_boot: int) -> tuple[float, tuple[float, float] | None]:
    """Krippendorff's alpha of a judges x samples matrix (NaN: no usable verdict) and its percentile
    bootstrap interval over samples (None when too few resamples are defined), over the verdicts that
    exist: a sample with fewer than two usable verdicts pairs with nothing and counts for nothing, and with
    no sample that has two there is no alpha (NaN), never agreement. 1.0 with no interval when the judges
    give each such sample one value: nothing there depends on the judge. The judges' order changes nothing."""
    m = np.asarray(matrix, dtype=float)
    if not ((~np.isnan(m)).sum(axis=0) >= 2).any():
        return math.nan, None
    if unanimous(m):
        return 1.0, None
    alpha = krippendorff_alpha(m, level)
    if n_boot <= 0 or m.shape[1] < 2 or math.isnan(alpha):
        return alpha, None
    rng = np.random.default_rng(seed)
    draws = []
    for start in range(0, n_boot, 100):  # weights of 100 resamples at a time: memory stays small
        picks = rng.integers(0, m.shape[1], size=(min(100, n_boot - start), m.shape[1]))
        weights = np.stack([np.bincount(p, minlength=m.shape[1]) for p in picks]).astype(float)
        draws.append(_alpha_weighted(m, level, weights))
    kept = np.concatenate(draws)
    kept = kept[~np.isnan(kept)]
    if kept.size < max(10, n_boot // 10):
        return alpha, None
    return alpha, percentile_interval(kept, 0.025)


def _alpha_weighted(data: np.ndarray, level: str, weights: np.ndarray) -> np.ndarray:
    """Krippendorff's alpha (nominal or interval) of `data` (judges x units) with each unit counted
    weights[b, u] times, for every row b at once: a bootstrap draw is a row of unit multiplicities. The
    coincidence sums in closed form: within a unit of m values, the ordered pairs of different values are
    m^2 - sum_v c_v^2 (nominal), and sum_{i != j} (x_i - x_j)^2 = 2 (m S2 - S1^2) (interval)."""
    present = ~np.isnan(data)
    m = present.sum(axis=0).astype(float)
    pairable = m >= 2
    x = np.where(present, data, 0.0)[:, pairable]
    m, w = m[pairable], weights[:, pairable]
    if not pairable.any():
        return np.full(weights.shape[0], math.nan)
    n = w @ m
    if level == "nominal":
        values = np.unique(data[present])
        counts = np.stack([((x == v) & present[:, pairable]).sum(axis=0) for v in values], axis=1).astype(float)
        observed = w @ ((m ** 2 - (counts ** 2).sum(axis=1)) / (m - 1))
        n_v = w @ counts
        expected = (n ** 2 - (n_v ** 2).sum(axis=1)) / (n - 1)
    elif level == "interval":
        s1, s2 = x.sum(axis=0), (x ** 2).sum(axis=0)
        observed = w @ (2 * (m * s2 - s1 ** 2) / (m - 1))
        t1, t2 = w @ s1, w @ s2
        expected = 2 * (n * t2 - t1 ** 2) / (n - 1)
    else:
        raise ValueError(f"level must be nominal or interval here, not {level!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 1.0 - observed / expected
    return np.where((expected > 1e-12) & (n > 1), out, math.nan)


def krippendorff_alpha(data: np.ndarray, level: str = "interval") -> float:
    """Krippendorff's alpha of a judges x units matrix (NaN: no value), level "nominal", "ordinal" or
    "interval": 1 - observed / expected disagreement over the coincidence matrix of the pairable values
    (units with at least two values). NaN when undefined (no pairable values, or a single value used)."""
    data = np.asarray(data, dtype=float)
    values = np.unique(data[~np.isnan(data)])
    if values.size < 2:
        return math.nan
    index = {v: i for i, v in enumerate(values)}
    v = len(values)
    coincidence = np.zeros((v, v))
    for unit in data.T:
        present = unit[~np.isnan(unit)]
        m = present.size
        if m < 2:
            continue
        counts = np.bincount([index[x] for x in present], minlength=v).astype(float)
        # every ordered pair of values from two different judges, weighted 1 / (m - 1)
        coincidence += (np.outer(counts, counts) - np.diag(counts)) / (m - 1)
    n_c = coincidence.sum(axis=1)
    n = n_c.sum()
    if n <= 1:
        return math.nan
    if level == "nominal":
        delta = 1.0 - np.eye(v)
    elif level == "interval":
        delta = (values[:, None] - values[None, :]) ** 2
    elif level == "ordinal":
        cum = np.cumsum(n_c)
        lo, hi = np.minimum.outer(np.arange(v), np.arange(v)), np.maximum.outer(np.arange(v), np.arange(v))
        delta = (cum[hi] - np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0) - (n_c[lo] + n_c[hi]) / 2) ** 2
    else:
        raise ValueError(f"level must be nominal, ordinal or interval, not {level!r}")
    observed = (coincidence * delta).sum() / n
    expected = (np.outer(n_c, n_c) * delta).sum() / (n * (n - 1))
    return 1.0 - observed / expected if expected > 0 else math.nan
