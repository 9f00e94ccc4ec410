"""Aggregation of per-sample scores into metrics, with seeded bootstrap confidence intervals.

A task aggregates a `Table` (one row per scored sample, NaN where a value is unscored) into named
numbers. Confidence intervals come from resampling the table's clusters (items by default; a
scenario when one scenario yields several samples) and re-running the same aggregation, so every
metric a task reports gets an interval without metric-specific code."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np


@dataclass
class Table:
    columns: dict[str, np.ndarray]
    clusters: np.ndarray
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # string columns (groups, classes)
    # What a metric derives from this table alone, kept while the table lives: the bootstrap aggregates
    # the same table once for its point value and once per block of resamples.
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_rows(cls, rows: list[dict[str, float]], clusters: list[str],
                  labels: dict[str, list[Any]] | None = None) -> "Table":
        names = sorted({k for r in rows for k in r})
        cols = {n: np.array([r.get(n, math.nan) for r in rows], dtype=float) for n in names}
        labs = {k: np.array(v, dtype=object) for k, v in (labels or {}).items()}
        return cls(cols, np.array(clusters, dtype=object), labs)

    def __len__(self) -> int:
        return len(self.clusters)

    def col(self, name: str) -> np.ndarray:
        return self.columns.get(name, np.full(len(self), math.nan))

    def take(self, idx: np.ndarray) -> "Table":
        return Table({k: v[idx] for k, v in self.columns.items()}, self.clusters[idx],
                     {k: v[idx] for k, v in self.labels.items()})

    def where(self, mask: np.ndarray) -> "Table":
        return self.take(np.flatnonzero(mask))

    def memoized(self, key: Any, make: Callable[[], Any]) -> Any:
        """`make()`, once per table and key: for values that depend on the table's rows alone, never on
        the resample weights (a table is not changed once built)."""
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]


Aggregate = Callable[[Table], dict[str, float]]


def mean(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else math.nan


def count(x: np.ndarray) -> int:
    return int((~np.isnan(x)).sum())


def group_mask(groups: np.ndarray, name: str) -> np.ndarray:
    """Rows whose group label holds `name` (labels are '|'-joined when a row is in several groups)."""
    mask = np.zeros(len(groups), bool)
    for u in set(groups):
        if name in u.split("|"):
            mask |= groups == u
    return mask


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r over rows where both are present; NaN when undefined (fewer than 2 rows, a constant)."""
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if x.size < 2 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def pearson_many(x: np.ndarray, y: np.ndarray, resamples: "Resamples") -> np.ndarray:
    """`pearson` in every resample at once, from per-resample sums of x, y, x², y² and xy (each centred on
    its mean over the table first, which leaves r as it is and keeps the sums from cancelling). A resample
    where x or y is constant is NaN, as in `pearson`: that is found from the distinct values it holds,
    not from a variance that rounding may leave just above zero."""
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y, r = x[ok], y[ok], resamples.rows(ok)
    if x.size == 0:
        return np.full(len(resamples), math.nan)
    cx, cy = x - x.mean(), y - y.mean()
    s = r.sums(np.stack([np.ones_like(cx), cx, cy, cx * cx, cy * cy, cx * cy], axis=1))
    n = s[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = s[:, 5] - s[:, 1] * s[:, 2] / n
        vx, vy = s[:, 3] - s[:, 1] ** 2 / n, s[:, 4] - s[:, 2] ** 2 / n
        rho = np.clip(cov / np.sqrt(vx * vy), -1.0, 1.0)
    varies = np.ones(len(resamples), bool)
    for v in (x, y):
        values, codes = np.unique(v, return_inverse=True)
        varies &= (r.counts(codes.ravel(), len(values)) > 0).sum(axis=1) > 1
    return np.where((n >= 2) & varies, rho, math.nan)


def derived_seed(seed: int, name: str) -> int:
    """A seed for one named bootstrap (a task, a rater pair) derived from the run seed, stable in any process."""
    return seed * 1_000_003 + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


class Resamples:
    """A block of bootstrap resamples of a table's clusters, as counts: `weights[b, c]` is how often
    cluster c is drawn in resample b, `inverse[i]` is the cluster of row i.

    A resample holds every row of a drawn cluster as many times as the cluster is drawn, so a statistic
    that is a sum over rows is, in resample b, sum_c weights[b, c] * (its sum over cluster c). Metrics
    built from such sums (means, counts, confusion matrices) are thus computed for every resample with
    one matrix product, instead of building and aggregating a table per resample."""

    def __init__(self, inverse: np.ndarray, weights: np.ndarray):
        self.inverse = inverse
        self.weights = weights

    def __len__(self) -> int:
        return self.weights.shape[0]

    def rows(self, mask: np.ndarray) -> "Resamples":
        """The same resamples seen from `table.where(mask)`."""
        return Resamples(self.inverse[mask], self.weights)

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per-resample sums of per-row values (no NaN): shape (n,) gives (resamples,), (n, m) gives
        (resamples, m)."""
        k = self.weights.shape[1]
        if values.ndim == 1:
            return self.weights @ np.bincount(self.inverse, weights=values, minlength=k)
        per_cluster = np.stack([np.bincount(self.inverse, weights=v, minlength=k) for v in values.T], axis=1)
        return self.weights @ per_cluster

    def counts(self, codes: np.ndarray, n: int) -> np.ndarray:
        """counts[b, j] = rows with code j in resample b (codes outside 0..n-1 are ignored)."""
        k = self.weights.shape[1]
        ok = (codes >= 0) & (codes < n)
        per_cluster = np.bincount(self.inverse[ok] * n + codes[ok], minlength=k * n).reshape(k, n)
        return self.weights @ per_cluster

    def mean(self, values: np.ndarray) -> np.ndarray:
        """`mean` (NaN rows skipped) in every resample; NaN where a resample has no value."""
        ok = ~np.isnan(values)
        total = self.sums(np.stack([np.where(ok, values, 0.0), ok.astype(float)], axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            return total[:, 0] / total[:, 1]


class Means:
    """`mean` of a column (over a row mask) for one table, or for every resample of a block at once, so that
    a task whose metrics are all such means writes them once and gets aggregate() and aggregate_many()
    from the same body: `means("refused", groups == "cot")` is a float or an array over resamples."""

    def __init__(self, table: Table, resamples: Resamples | None = None):
        self.table, self.resamples = table, resamples

    def __call__(self, column: str, mask: np.ndarray | None = None) -> Any:
        return self.of(self.table.col(column), mask)

    def of(self, values: np.ndarray, mask: np.ndarray | None = None) -> Any:
        """The mean of per-row `values` (one per table row, NaN skipped), e.g. a column squared."""
        if mask is not None:
            values = values[mask]
        if self.resamples is None:
            return mean(values)
        return (self.resamples if mask is None else self.resamples.rows(mask)).mean(values)

    def total(self, values: np.ndarray) -> Any:
        """The sum of per-row `values` (NaN as 0), per resample: with an indicator, how many rows hold it
        (each drawn row as often as drawn)."""
        v = np.nan_to_num(np.asarray(values, dtype=float))
        return float(v.sum()) if self.resamples is None else self.resamples.sums(v)

    def count(self, column: str) -> Any:
        """How many rows hold a value of `column` (per resample: counting each drawn row as often as drawn)."""
        present = (~np.isnan(self.table.col(column))).astype(float)
        return float(present.sum()) if self.resamples is None else self.resamples.sums(present)


AggregateMany = Callable[[Table, Resamples], "dict[str, np.ndarray] | None"]

# Resamples per block: the block's weights (resamples x clusters) stay near 4 MB whatever the table's size.
# With 2M cells a block's weights and block_weights' temporaries took ~48 MiB at once, the top of a
# whole-benchmark run's peak RSS (its largest tasks scored last); 500k cells take ~17 MiB, the same draws.
_BLOCK_CELLS = 500_000


def cluster_layout(clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(cluster code per row, rows grouped by cluster, each cluster's row count, its first position in
    that grouping). Stable, so each cluster keeps data order: cluster c is order[start[c] : start[c] + size[c]]."""
    _, inverse = np.unique(clusters.astype(str), return_inverse=True)
    inverse = inverse.ravel()
    order = np.argsort(inverse, kind="stable")
    size = np.bincount(inverse)
    start = np.concatenate(([0], np.cumsum(size)[:-1]))
    return inverse, order, size, start


def pick_blocks(k: int, rng: np.random.Generator, n_boot: int) -> Iterator[np.ndarray]:
    """Cluster picks, one row per resample, in blocks. rng.integers(0, k, (m, k)) consumes the stream
    exactly as m calls of rng.integers(0, k, k) do (numpy draws the cells in row-major order, each from
    the bit generator's running state), so the resamples, and every interval, are those of one call per
    resample; tests/test_bootstrap.py checks it."""
    block = max(1, min(n_boot, _BLOCK_CELLS // max(k, 1)))
    for done in range(0, n_boot, block):
        yield rng.integers(0, k, (min(block, n_boot - done), k))


def rows_of(pick: np.ndarray, order: np.ndarray, size: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Row indices of one resample: all rows of each picked cluster, in pick order. O(rows)."""
    if (size == 1).all():
        return order[pick]
    lengths = size[pick]
    first = np.repeat(start[pick] - np.cumsum(lengths) + lengths, lengths)
    return order[first + np.arange(lengths.sum())]


def block_weights(picks: np.ndarray, k: int) -> np.ndarray:
    """`Resamples.weights` of a block of cluster picks (one row per resample): how often each cluster is drawn."""
    m = len(picks)
    return np.bincount((np.arange(m)[:, None] * k + picks).ravel(), minlength=m * k).reshape(m, k).astype(float)


def cluster_resamples(clusters: np.ndarray, rng: np.random.Generator, n_boot: int) -> Iterator[np.ndarray]:
    """Row indices of `n_boot` resamples drawing clusters with replacement (all rows of a drawn cluster)."""
    inverse, order, size, start = cluster_layout(clusters)
    for picks in pick_blocks(len(size), rng, n_boot):
        for pick in picks:
            yield rows_of(pick, order, size, start)


def per_resample(aggregate: Aggregate, table: Table, picks, order, size, start) -> dict[str, np.ndarray]:
    """`aggregate` run on each resampled table of a block of `picks` (cluster_layout's `order`, `size`,
    `start`): one array per metric, NaN where a resample leaves it undefined (None) or does not report it.
    The path of a task without a batched aggregate_many, for the bootstrap and compare's paired draws."""
    out: dict[str, np.ndarray] = {}
    for b, pick in enumerate(picks):
        for name, v in aggregate(table.take(rows_of(pick, order, size, start))).items():
            out.setdefault(name, np.full(len(picks), math.nan))[b] = math.nan if v is None else v
    return out


# --- how many clusters an interval rests on (INFERENCE.md section 2) --------------------------------
# A cluster bootstrap sees at most G distinct clusters: with G = 1 every resample is the table itself (a
# zero-width interval, p < 0.001 for any difference), and with few clusters a percentile interval under-covers
# (10 personas: 89 % at a nominal 95 %). Cameron, Gelbach & Miller (2008), "Bootstrap-based improvements for
# inference with clustered errors".
MIN_CLUSTERS = 5  # fewer: no interval, no test, no verdict
FEW_CLUSTERS = 30  # fewer: the interval is widened by `small_sample_factor`


def n_clusters(clusters: np.ndarray) -> int:
    """G: the distinct clusters a table's rows fall in."""
    return len(cluster_layout(np.asarray(clusters, dtype=object))[2]) if len(clusters) else 0


def too_few_clusters(g: int) -> str | None:
    """Why an interval or test on G clusters is not given ("too few clusters: 1"), or None when it is."""
    return f"too few clusters: {g}" if g < MIN_CLUSTERS else None


def interval_note(ci: Any, g: int | None) -> str | None:
    """What a view shows where an interval would be, when it is missing for too few clusters; else None."""
    return too_few_clusters(g) if ci is None and g is not None else None


def z_quantile(q: float) -> float:
    """The standard normal's q-quantile (the standard library's: scipy.stats takes seconds to import)."""
    from statistics import NormalDist
    return NormalDist().inv_cdf(q)


POWER = 0.8  # the power at which a detectable difference is stated (Miller 2024, "Adding Error Bars to Evals", s. 5)


def power_multiplier(level: float = 0.95) -> float:
    """z_{1-alpha/2} + z_{POWER}: the smallest difference a two-sided test at alpha = 1 - level detects with 80 %
    power is this many standard errors of the paired difference (2.80 at alpha 0.05)."""
    return z_quantile(0.5 + level / 2) + z_quantile(POWER)


def small_sample_factor(n_clusters: int, level: float) -> float:
    """How much a percentile interval is widened around the estimate when few clusters are drawn:
    (t_{k-1} / z) * sqrt(k / (k - 1)) for k clusters. The bootstrap's spread of a mean over k clusters
    is sqrt((k - 1) / k) of its standard error, and a normal quantile where Student's t belongs under-covers
    at small k: at 20 rated items a 95% percentile interval covered 92.5% in 3,000 simulated runs (Monte
    Carlo error 0.5 points), the widened one 94.6%. It tends to 1 as k grows (1.03 at 100, 1.006 at 500)."""
    if n_clusters < 2:
        return math.inf
    q = 0.5 + level / 2
    return float(t_quantile(n_clusters - 1, q) / z_quantile(q) * math.sqrt(n_clusters / (n_clusters - 1)))


# Student's t 0.975-quantiles for 1 to FEW_CLUSTERS - 2 degrees of freedom, as scipy.special.stdtrit gives
# them (tests/test_inference_gate.py checks each bit for bit): every 95 % interval on few clusters reads one,
# and importing scipy.special for it cost a small run ~0.2 s of CPU (its array-API layer loads numpy.f2py).
_T_975 = (12.706204736174694, 4.302652729749462, 3.1824463052837078, 2.7764451051977934, 2.5705818356363146,
          2.4469118511449786, 2.364624251592784, 2.306004135204166, 2.262157162798205, 2.228138851986274,
          2.200985160091639, 2.1788128296672284, 2.1603686564627913, 2.144786687917804, 2.131449545559776,
          2.1199052992212546, 2.1098155778333156, 2.1009220402410382, 2.0930240544083087, 2.085963447265864,
          2.0796138447276795, 2.0738730679040254, 2.0686576104190486, 2.0638985616280245, 2.0595385527532972,
          2.0555294386428735, 2.0518305164802846, 2.0484071417952454)


def t_quantile(df: int, q: float) -> float:
    """Student's t q-quantile with `df` degrees of freedom: scipy.special's stdtrit (not scipy.stats, which
    takes seconds to import), read from `_T_975` for the 95 % intervals of few clusters."""
    if q == 0.975 and 1 <= df <= len(_T_975):
        return _T_975[df - 1]
    from scipy.special import stdtrit
    return float(stdtrit(df, q))


def cluster_factor(g: int, level: float) -> float:
    """The widening an interval on G clusters gets: `small_sample_factor` below FEW_CLUSTERS, else 1."""
    return small_sample_factor(g, level) if g < FEW_CLUSTERS else 1.0


def widen(draws: np.ndarray, center: float, factor: float) -> np.ndarray:
    """Bootstrap draws spread `factor` times as far from `center` (the estimate): their percentile interval is
    the widened one, and a p-value read from them agrees with it."""
    return draws if factor == 1.0 else center + factor * (np.asarray(draws, dtype=float) - center)


def bootstrap(table: Table, aggregate: Aggregate, *, seed: int, n_boot: int = 1000, level: float = 0.95,
              aggregate_many: AggregateMany | None = None,
              point: dict[str, float] | None = None,
              keep: dict[str, np.ndarray] | None = None) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap intervals for every metric `aggregate` returns, resampling clusters.

    `keep`, when given, receives every metric's draws (NaN where a resample leaves it undefined): the
    pillars bootstrap their composites from the same draws as their rows.

    `aggregate_many(table, resamples)`, when given and not None for this table, returns those same
    metrics for a whole block of resamples at once (an array per metric, NaN where undefined, a metric
    missing where a resample would not report it); otherwise `aggregate` runs on each resampled table.
    With G < MIN_CLUSTERS clusters there is no interval ({}); with G < FEW_CLUSTERS each interval is widened
    around the point value (`point`, else `aggregate(table)`) by `small_sample_factor`."""
    if len(table) == 0 or n_boot <= 0:
        return {}
    inverse, order, size, start = cluster_layout(table.clusters)
    k = len(size)
    if too_few_clusters(k):
        return {}
    draws: dict[str, list[np.ndarray]] = {}
    for picks in pick_blocks(k, np.random.default_rng(seed), n_boot):
        many = None
        if aggregate_many is not None:
            many = aggregate_many(table, Resamples(inverse, block_weights(picks, k)))
        if many is None:
            many = per_resample(aggregate, table, picks, order, size, start)
        for name, values in many.items():
            draws.setdefault(name, []).append(np.asarray(values, dtype=float))
    alpha = (1 - level) / 2
    factor = cluster_factor(k, level)
    if factor != 1.0 and point is None:
        point = aggregate(table)
    out = {}
    for name, parts in draws.items():
        arr = np.concatenate(parts)
        if factor != 1.0:
            center = point.get(name)
            if center is None or not math.isfinite(center):
                continue  # no estimate to widen around: no interval
            arr = widen(arr, center, factor)  # the kept draws too: a composite of them is widened alike
        if keep is not None:
            keep[name] = arr
        arr = arr[~np.isnan(arr)]
        if arr.size < max(10, n_boot // 10):  # too few defined resamples to say anything
            continue
        out[name] = percentile_interval(arr, alpha)
    return out


def percentile_interval(draws: np.ndarray, lower: float) -> tuple[float, float]:
    """The `lower` and `1 - lower` quantiles of the draws (linear interpolation), from one np.quantile call:
    it partitions the draws once for both and gives the values of two calls bit for bit, at half the cost
    (every interval of a run's bootstrap is one of these)."""
    lo, hi = np.quantile(draws, (lower, 1 - lower))
    return float(lo), float(hi)


# The names tests and older callers use.
_cluster_layout, _pick_blocks, _rows_of = cluster_layout, pick_blocks, rows_of


def trust_score(value: float | None, lo: float, hi: float, higher_is_better: bool) -> float | None:
    """Map a metric onto 0-100 where 100 is most trustworthy; values outside [lo, hi] are clipped."""
    if value is None or math.isnan(value):
        return None
    frac = (min(max(value, lo), hi) - lo) / (hi - lo)
    return round(100 * (frac if higher_is_better else 1 - frac), 2)


def to_trust(values: Any, lo: float, hi: float, higher_is_better: bool) -> Any:
    """`trust_score` on a value or an array of draws, unrounded (NaN stays NaN): the one mapping the pillars,
    compare's paired draws and the rank intervals apply to bootstrap draws."""
    frac = (np.clip(np.asarray(values, dtype=float), lo, hi) - lo) / (hi - lo)
    return 100 * (frac if higher_is_better else 1 - frac)


# --- classification and agreement (reliability, crisis, judge validation) ----------------------------
# Confusion counts and F1 are computed from integer codes with numpy because aggregate() runs inside the
# bootstrap, where sklearn's per-call input validation (~1.5 ms) would dominate a run; the tests check
# every value against sklearn.metrics on the same predictions.

def confusion(gold: Any, pred: Any, labels: list[str] | tuple[str, ...]) -> np.ndarray:
    """counts[i, j] = rows with gold labels[i] and prediction labels[j] (rows outside `labels` are ignored),
    the layout of sklearn.metrics.confusion_matrix(gold, pred, labels=labels)."""
    k = len(labels)
    codes = _cell_codes(gold, pred, labels)
    return np.bincount(codes[codes >= 0], minlength=k * k).reshape(k, k)


def _cell_codes(gold: Any, pred: Any, labels: list[str] | tuple[str, ...]) -> np.ndarray:
    """Each row's confusion cell as gold index * len(labels) + predicted index; -1 outside `labels`."""
    index = {lab: i for i, lab in enumerate(labels)}
    g = np.array([index.get(x, -1) for x in gold], dtype=int)
    p = np.array([index.get(x, -1) for x in pred], dtype=int)
    return np.where((g >= 0) & (p >= 0), g * len(labels) + p, -1)


def f1_per_class(cm: np.ndarray) -> np.ndarray:
    """F1 of each class of a confusion matrix: 2TP / (gold count + predicted count). NaN for a class that
    is neither in the gold labels nor predicted (undefined, rather than sklearn's zero_division=0).
    A stack of matrices (..., k, k) gives (..., k)."""
    tp = np.diagonal(cm, axis1=-2, axis2=-1).astype(float)
    denom = cm.sum(axis=-2) + cm.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, 2 * tp / denom, math.nan)


def macro_f1(gold: Any, pred: Any, labels: list[str] | tuple[str, ...]) -> float:
    """Unweighted mean F1 over the classes that occur in the gold labels or the predictions, which is
    what sklearn's f1_score(average='macro') averages over when it is not given a label list."""
    f1 = f1_per_class(confusion(gold, pred, labels))
    return float(np.nanmean(f1)) if (~np.isnan(f1)).any() else math.nan


def macro_f1_many(gold: Any, pred: Any, labels: list[str] | tuple[str, ...], resamples: Resamples,
                  n_classes: int | None = None) -> np.ndarray:
    """`macro_f1` in every resample at once, from the resampled confusion matrices. With `n_classes`, only
    the first n labels are averaged: the rest are columns of their own (a "no answer" prediction, a miss
    for the gold class) that are never classes."""
    f1 = f1_per_class(confusion_many(gold, pred, labels, resamples))
    return macro_of(f1[:, :n_classes] if n_classes is not None else f1)


def confusion_many(gold: Any, pred: Any, labels: list[str] | tuple[str, ...], resamples: Resamples) -> np.ndarray:
    """`confusion` in every resample at once: shape (resamples, k, k)."""
    k = len(labels)
    return resamples.counts(_cell_codes(gold, pred, labels), k * k).reshape(-1, k, k)


def macro_of(f1: np.ndarray) -> np.ndarray:
    """Mean of each row of per-class F1 (resamples, classes) over its defined classes; NaN where none is."""
    defined = (~np.isnan(f1)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(defined > 0, np.nansum(f1, axis=1) / defined, math.nan)


def whole(table: Table) -> Resamples:
    """The table itself as a block of one resample (each cluster drawn once), so that a body written over
    Resamples gives the point value too: one body for aggregate() and aggregate_many(), never two."""
    inverse = np.unique(table.clusters.astype(str), return_inverse=True)[1].ravel().astype(int)
    return Resamples(inverse, np.ones((1, int(inverse.max()) + 1 if inverse.size else 0)))


def point(values: dict[str, Any]) -> dict[str, float]:
    """The point values of a body run over `whole(table)`; a per-class entry (`name[class]`) that is
    undefined there is left out, as the original leaves a class it never saw out of its report."""
    out = {}
    for k, v in values.items():
        x = float(np.asarray(v, dtype=float).reshape(-1)[0])
        if not (math.isnan(x) and k.endswith("]")):
            out[k] = x
    return out


def binary_f1(gold_pos: np.ndarray, pred_pos: np.ndarray) -> float:
    """F1 of the positive class from two boolean arrays; NaN when there is no positive at all."""
    gold_pos, pred_pos = np.asarray(gold_pos, bool), np.asarray(pred_pos, bool)
    denom = gold_pos.sum() + pred_pos.sum()
    return float(2 * (gold_pos & pred_pos).sum() / denom) if denom else math.nan


def binary_f1_many(gold_pos: np.ndarray, pred_pos: np.ndarray, resamples: Resamples) -> np.ndarray:
    """`binary_f1` in every resample at once; rows where neither is set count for nothing."""
    gold_pos, pred_pos = np.asarray(gold_pos, bool), np.asarray(pred_pos, bool)
    s = resamples.sums(np.stack([gold_pos & pred_pos, gold_pos, pred_pos], axis=1).astype(float))
    denom = s[:, 1] + s[:, 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, 2 * s[:, 0] / np.where(denom > 0, denom, 1), math.nan)


def recall_of(gold: np.ndarray, pred: np.ndarray, label: str) -> float:
    """Share of rows with gold `label` that were predicted as `label`; NaN when there are none."""
    mask = gold == label
    return float((pred[mask] == label).mean()) if mask.any() else math.nan


def cluster_mean(values: np.ndarray, clusters: np.ndarray) -> float:
    """Mean over clusters of each cluster's mean (e.g. per dialogue, then over dialogues), ignoring NaN."""
    ok = ~np.isnan(values)
    if not ok.any():
        return math.nan
    _, inv = np.unique(clusters[ok].astype(str), return_inverse=True)
    return float(np.mean(np.bincount(inv, weights=values[ok]) / np.bincount(inv)))


def cluster_mean_many(values: np.ndarray, resamples: "Resamples") -> np.ndarray:
    """`cluster_mean` of every resampled table at once. A resampled table names a cluster drawn twice twice
    with the same label, so cluster_mean sees it as one cluster (with each row twice, the same mean): the
    mean is over the distinct clusters drawn, each counted once."""
    ok = ~np.isnan(values)
    k = resamples.weights.shape[1]
    n = np.bincount(resamples.inverse[ok], minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_cluster = np.bincount(resamples.inverse[ok], weights=values[ok], minlength=k) / n
    drawn = (resamples.weights > 0) & (n > 0)
    total = drawn @ np.where(n > 0, per_cluster, 0.0)
    count = drawn.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, math.nan)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rho over rows where both are present; NaN when undefined (under 2 rows, a constant). Computed
    as scipy.stats.spearmanr computes it (average ranks, then np.corrcoef of the two columns): the same float
    (tests/test_metrics.py), without the ~0.3 ms of checks and p-value of scipy's call, which the per-resample
    agreement path makes thousands of times."""
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(np.corrcoef(np.column_stack([_average_ranks(x), _average_ranks(y)]), rowvar=False)[1, 0])


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 1, tied values sharing the mean of their positions (scipy.stats.rankdata's "average")."""
    order = np.argsort(x, kind="mergesort")
    ordered = x[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]  # where each run of equal values starts
    run = np.empty(len(x), dtype=np.intp)
    run[order] = np.cumsum(first)  # each value's run, from 1
    edges = np.r_[np.flatnonzero(first), len(x)]  # the runs' start positions, and the end
    return 0.5 * (edges[run - 1] + edges[run] + 1)


def weighted_kappa(a: np.ndarray, b: np.ndarray, labels: list[int] | tuple[int, ...],
                   weights: str = "quadratic") -> float:
    """Cohen's weighted kappa over rows where both ratings are present (ratings outside `labels` are
    ignored, as sklearn's cohen_kappa_score does): 1 - sum(w * observed) / sum(w * expected), with the
    disagreement weight w = |i - j| ("linear") or (i - j)^2 ("quadratic") between category positions and
    the expected counts from the two raters' marginals. NaN when undefined (fewer than 2 rows, or no
    expected disagreement because both raters used one category). numpy, not sklearn: sklearn is a test
    dependency only (the tests compare with it and with hand-computed values)."""
    if weights not in ("linear", "quadratic"):
        raise ValueError(f"weights must be 'linear' or 'quadratic', not {weights!r}")
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = ~(np.isnan(a) | np.isnan(b))
    index = {float(lab): i for i, lab in enumerate(labels)}
    i = np.array([index.get(x, -1) for x in a[ok]], dtype=int)
    j = np.array([index.get(x, -1) for x in b[ok]], dtype=int)
    keep = (i >= 0) & (j >= 0)
    i, j = i[keep], j[keep]
    if i.size < 2:
        return math.nan
    k = len(labels)
    observed = np.bincount(i * k + j, minlength=k * k).reshape(k, k).astype(float)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    dist = np.abs(np.arange(k)[:, None] - np.arange(k)[None, :]).astype(float)
    w = dist if weights == "linear" else dist ** 2
    chance = float((w * expected).sum())
    return 1 - float((w * observed).sum()) / chance if chance > 0 else math.nan


# --- paired comparisons across conditions (fairness) ----------------------------------------------

def paired_permutation_test(values: np.ndarray, *, seed: int, n_perm: int = 10_000) -> float:
    """p-value of "the condition makes no difference" for paired data.

    `values[i, j]` is unit i (a dialogue) under condition j (an identity group); every cell is present.
    Under the null hypothesis the condition labels within a unit are exchangeable, so each shuffle
    permutes every row independently. The statistic is the spread of the condition means (their
    population std; for two conditions that is half the absolute mean difference, i.e. a two-sided
    paired test). p = (1 + shuffles at least as extreme) / (1 + n_perm), never 0. NaN for fewer than
    2 units or 2 conditions."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape[0] < 2 or values.shape[1] < 2 or np.isnan(values).any():
        return math.nan
    observed = values.mean(axis=0).std()
    tolerance = 1e-9 * max(1.0, abs(observed))  # equal statistics must tie despite rounding
    rng = np.random.default_rng(seed)
    extreme, done = 0, 0
    while done < n_perm:
        chunk = min(1000, n_perm - done)
        shuffled = rng.permuted(np.broadcast_to(values, (chunk, *values.shape)), axis=2)
        extreme += int((shuffled.mean(axis=1).std(axis=1) >= observed - tolerance).sum())
        done += chunk
    return (1 + extreme) / (1 + n_perm)
