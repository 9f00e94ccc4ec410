"""Paired comparisons between models of finished runs (read back by `trustmh.analysis.runs`).

A comparison pairs two models on the items both of them answered: it rebuilds each task's `Table`
from samples.jsonl (per-sample values, clusters and labels), resamples the shared clusters, and
computes the task's own metrics on both sides of every resample (its `aggregate_many`, a block of
resamples at once, as the bootstrap does; `aggregate` per resample for a task without one). So a
difference of any metric a task reports (a mean, a Pearson r, a macro-F1) gets a bootstrap interval and
a p-value without metric-specific code, both read from the same draws: the interval is the percentile
interval, the p-value the two-sided share of draws on the far side of 0, so the interval excludes 0
exactly when p < 1 - level. The verdict reads the p-value adjusted over every difference of one call
(`adjust_family`, Holm by default). A difference on fewer than MIN_CLUSTERS shared clusters gets no interval,
test or verdict, and one on fewer than FEW_CLUSTERS has its draws widened by the t-correction
(scoring/metrics.py). Tasks this version of trustmh does not know are compared on their reported values
only, without a test."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from ..errors import UserError
from ..scoring.metrics import (Resamples, Table, block_weights, cluster_factor, cluster_layout, derived_seed,
                               n_clusters, per_resample, pick_blocks, power_multiplier, to_trust, too_few_clusters,
                               widen)
from .runs import Entry, Rows, Run, entries, read_rows, run_context


# --------------------------------------------------------------------------------------------------
# Paired differences

@dataclass
class Diff:
    kind: str  # "task", "metric", "pillar" or "overall"
    name: str  # task id, "task:metric", "pillar:<name>" or "overall" (the names `trustmh gate` uses)
    a: float | None  # reference, as reported in its results.json
    b: float | None
    diff: float | None  # b - a on the items (and, for pillars and overall, the tasks) both have
    ci: tuple[float, float] | None = None
    p: float | None = None
    n_shared: int = 0
    higher_is_better: bool = True
    note: str = ""
    n_tasks: int = 0  # pillar and overall: the shared tasks the difference rests on
    calibrated: Any = None  # b - a anchored to human ratings (validation/calibrated.py), when the runs have them
    n_clusters: int | None = None  # G: shared clusters resampled (pillar and overall: summed over their tasks)
    p_adj: float | None = None  # p adjusted over the comparisons of one call (`adjust_family`); None: not adjusted
    q: float | None = None  # Benjamini-Hochberg q-value over the same family
    detectable: float | None = None  # smallest |b - a| detectable at 80 % power: (z_{1-alpha/2} + z_0.8) SE
    draws: np.ndarray | None = field(default=None, repr=False, compare=False)  # bootstrap draws of b - a

    def significant(self, alpha: float) -> bool:
        p = self.p_adj if self.p_adj is not None else self.p
        return p is not None and p < alpha and bool(self.diff)

    def verdict(self, alpha: float) -> str:
        """'better' / 'worse' for b against a, 'n.s.' when not significant (by the adjusted p when the family was
        adjusted), '' when untested."""
        if self.p is None or self.diff is None:
            return ""
        if not self.significant(alpha):
            return "n.s."
        return "better" if (self.diff > 0) == self.higher_is_better else "worse"

    def reading(self, alpha: float) -> str:
        """The verdict as every view prints it: a non-significant one says what the run could have seen."""
        v = self.verdict(alpha)
        if v == "n.s." and self.detectable is not None:
            return f"n.s.: no difference larger than {self.detectable:.3g} (80% power)"
        return v


@dataclass
class Comparison:
    a: Entry
    b: Entry
    diffs: list[Diff]
    warnings: list[str] = field(default_factory=list)
    correction: str = "none"  # how p_adj was adjusted (multiplicity.py), over `family` tested differences
    family: int = 0

    def get(self, name: str) -> Diff | None:
        return next((d for d in self.diffs if d.name == name), None)


MIN_DRAWS = 10  # fewer defined draws than this: no interval and no test


def detectable(draws: np.ndarray, level: float) -> float | None:
    """The smallest difference the comparison detects with 80 % power at two-sided alpha = 1 - level:
    (z_{1-alpha/2} + z_{0.8}) times the paired difference's standard error, read from its bootstrap draws
    (2.80 SE at alpha 0.05)."""
    d = _defined(draws)
    if d.size < MIN_DRAWS:
        return None
    return float(power_multiplier(level) * d.std(ddof=1))


def _defined(draws: np.ndarray) -> np.ndarray:
    return draws[~np.isnan(draws)]


def _p_value(draws: np.ndarray) -> float | None:
    """Two-sided percentile-bootstrap p-value of 'no difference': twice the share of draws on the far side
    of 0 (capped at 1). It is the smallest alpha whose (1 - alpha) percentile interval of the same draws
    (`_interval`) still holds 0, so interval, p and verdict never disagree."""
    d = _defined(draws)
    if d.size < MIN_DRAWS:
        return None
    return min(1.0, 2 * min(int((d <= 0).sum()), int((d >= 0).sum())) / d.size)


def _interval(draws: np.ndarray, level: float) -> tuple[float, float] | None:
    """Percentile interval: the j-th smallest and j-th largest draw, j = ceil(n (1 - level) / 2) (the
    inverted-CDF quantile; no interpolation, so that it excludes 0 exactly when `_p_value` < 1 - level)."""
    d = np.sort(_defined(draws))
    if d.size < MIN_DRAWS:
        return None
    j = max(1, math.ceil(round(d.size * (1 - level) / 2, 9)))
    return float(d[j - 1]), float(d[d.size - j])


def _clean(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _trust_many(values: np.ndarray, metric, undefined_by_model: bool) -> np.ndarray:
    """`metrics.trust_score` of an array of metric values (unrounded). A side whose metric the model made
    undefined (`pillars.undefined_by_model`) is 0 wherever it is undefined, as in results.json."""
    trust = to_trust(values, metric.lo, metric.hi, metric.higher_is_better)
    return np.where(np.isnan(trust), 0.0, trust) if undefined_by_model else trust


def compare(a: Entry, b: Entry, rows_a: dict[tuple[str, str], Rows], rows_b: dict[tuple[str, str], Rows], *,
            n_boot: int = 1000, seed: int = 0, level: float = 0.95, all_metrics: bool = False) -> Comparison:
    """b against a: every task both ran, their pillars and the overall trust score."""
    from ..scoring.pillars import flagged, undefined_by_model
    from ..tasks.versions import scoring_version
    from ..plugins import load_task_plugins
    from ..tasks import TASKS
    load_task_plugins()  # a task from an installed plugin is compared like a built-in one
    ra, rb = a.result, b.result
    diffs: list[Diff] = []
    warnings: list[str] = []
    sha_a, sha_b = a.run.results.data.get("sha256", {}), b.run.results.data.get("sha256", {})
    changed = sorted(f for f in set(sha_a) & set(sha_b) if sha_a[f] != sha_b[f])
    if changed:
        warnings.append(f"data files differ between the runs: {', '.join(changed)}")
    sides: dict[str, Sides] = {}  # task -> each side's trust, point and draws, for its pillar and the overall
    shared_n: dict[str, int] = {}
    for task_id in [t for t in ra.tasks if t in rb.tasks]:
        ta, tb = ra.tasks[task_id], rb.tasks[task_id]
        base = Diff("task", task_id, ta.value, tb.value, None, higher_is_better=ta.higher_is_better)
        if ta.status != "ok" or tb.status != "ok":
            base.note = "not run in " + ("both" if ta.status == tb.status else ("a" if ta.status != "ok" else "b"))
            diffs.append(base)
            continue
        task_cls = TASKS.get(task_id)
        ka, kb = rows_a.get((a.model, task_id)), rows_b.get((b.model, task_id))
        if task_cls is None or ka is None or kb is None:
            base.diff = None if ta.value is None or tb.value is None else tb.value - ta.value
            base.note = ("task unknown to this trustmh version" if task_cls is None
                         else "no samples.jsonl rows") + ": reported values only, no paired test"
            diffs.append(base)
            continue
        task = task_cls()
        now = scoring_version(task)
        for side, tr in (("a", ta), ("b", tb)):
            if tr.scoring_version and tr.scoring_version != now:
                warnings.append(f"{task_id}: run {side} was scored by other scoring code ({tr.scoring_version}) than "
                                f"this trustmh's ({now}); its paired interval re-aggregates with the code here")
        keys = [k for k in ka.keys if k in kb]
        base.n_shared = len(keys)
        if not keys:
            base.note = "no items answered by both"
            diffs.append(base)
            continue
        ctx = run_context(a.run)
        metric, counted = task.metric, task.counted
        names = [metric.name] + ([m for m in ta.metrics if m in tb.metrics and m != metric.name] if all_metrics else [])
        own_cap = counted.metric if counted is not None else None  # what the pillar counts, when not the metric
        tab_a, tab_b = ka.table(keys), kb.table(keys)
        method = task.method(ctx)
        point_a, point_b = method.aggregate(tab_a, ctx), method.aggregate(tab_b, ctx)
        pa_primary, pb_primary = _clean(point_a.get(metric.name)), _clean(point_b.get(metric.name))
        zero = (undefined_by_model(task, tab_a, pa_primary), undefined_by_model(task, tab_b, pb_primary))
        g = n_clusters(tab_a.clusters)
        # Under MIN_CLUSTERS the task's own row gets no interval, test or verdict; its draws (widened where 2 to 4
        # clusters allow) still carry its part of its pillar's and the overall difference, which says so.
        draws = paired_draws(task, ctx, tab_a, tab_b, names, n_boot, seed, task_id,
                             zero=(zero[0] is not None, zero[1] is not None), keep=[own_cap] if own_cap else ())
        factor = cluster_factor(g, level) if g > 1 else 1.0
        ts = [_trust_many(np.array([v if v is not None else math.nan]), metric, z is not None)[0]
              for v, z in ((pa_primary, zero[0]), (pb_primary, zero[1]))]
        if factor != 1.0:  # few clusters: every draw spread around its estimate (metrics.widen)
            for name in names:
                pa, pb = _clean(point_a.get(name)), _clean(point_b.get(name))
                if pa is not None and pb is not None:
                    draws[name] = widen(draws[name], pb - pa, factor)
            for side, t, point in (("a", ts[0], point_a), ("b", ts[1], point_b)):
                draws[f"{side}:__trust__"] = widen(draws[f"{side}:__trust__"], float(t), factor)
                if own_cap and _clean(point.get(own_cap)) is not None:
                    draws[f"{side}:{own_cap}"] = widen(draws[f"{side}:{own_cap}"], float(point[own_cap]), factor)
            draws["__trust__"] = draws["b:__trust__"] - draws["a:__trust__"]
        for name in names:
            pa, pb = _clean(point_a.get(name)), _clean(point_b.get(name))
            if name == metric.name:
                d = base
            else:
                ma, mb = ta.metrics[name], tb.metrics[name]
                d = Diff("metric", f"{task_id}:{name}", ma.value, mb.value, None, n_shared=len(keys),
                         higher_is_better=ta.higher_is_better)
            d.n_clusters = g
            if pa is None or pb is None:
                d.note = "undefined on the shared items"
                if name == metric.name and any(zero):
                    d.note += "; " + "; ".join(f"{side}: {why} (trust 0)" for side, why in zip("ab", zero) if why)
            else:
                d.diff = pb - pa
                _tested(d, draws[name], level)  # under MIN_CLUSTERS: no interval, no test, and the note says why
            if name == metric.name:
                _calibrated_diff(d, a, b, task_id, keys, tab_a, tab_b, seed, n_boot)
                degenerate = [f"{side} {why}" for side, (why, _) in zip("ab", (flagged(ta, ra.tasks), flagged(tb, rb.tasks)))
                              if why]
                if degenerate:  # a gap of 0 from refusing everyone is no better fairness (said even when
                    d.p = None  # too few clusters already leave it untested)
                    d.note = "; ".join(x for x in (d.note, "no verdict: " + "; ".join(degenerate)) if x)
            diffs.append(d)
        if not np.isnan(ts).any():
            caps = [None, None]
            if own_cap:  # the counted construct on the shared items and in each draw, on each side
                caps = [(_cap_many(point.get(own_cap), counted), _cap_many(draws[f"{side}:{own_cap}"], counted))
                        for side, point in (("a", point_a), ("b", point_b))]
            sides[task_id] = Sides(counted, (flagged(ta, ra.tasks), flagged(tb, rb.tasks)),
                                   [(float(t), draws[f"{side}:__trust__"]) for t, side in zip(ts, "ab")], caps)
            shared_n[task_id] = (len(keys), g)
    trust_point, trust_draws, notes = _credited_differences(sides)
    for d in diffs:
        if d.kind == "task" and d.name in notes:
            d.note = "; ".join(x for x in (d.note, notes[d.name]) if x)
    diffs += _pillar_diffs(ra, rb, trust_point, trust_draws, {t: shared_n[t] for t in trust_point}, level)
    return Comparison(a, b, diffs, warnings)


def adjust_family(comparisons: list[Comparison], correction: str = "holm") -> None:
    """Adjust the p-values of every tested difference of these comparisons as one family (one `compare` call):
    `p_adj` by `correction` (the verdict's), `q` by Benjamini-Hochberg. Untested differences stay None."""
    from .multiplicity import adjust
    tested = [d for c in comparisons for d in c.diffs if d.p is not None and d.diff is not None]
    raw = [d.p for d in tested]
    for d, p_adj, q in zip(tested, adjust(raw, correction), adjust(raw, "bh")):
        d.p_adj, d.q = float(p_adj), float(q)
    for c in comparisons:
        c.correction, c.family = correction, len(tested)


@dataclass
class Sides:
    """A task's trust on each side of a comparison (a, b): the point on the shared items and its draws, the
    counted construct's trust likewise (robustness: the score on perturbed inputs), and each side's
    degenerate-behaviour flag as results.json's statistics give it (pillars.flagged: a property of its
    replies, not of the shared items)."""

    counted: Any  # tasks.base.Counted or None
    flags: tuple[tuple[str | None, str | None], tuple[str | None, str | None]]  # per side (flagged, missing)
    trust: list[tuple[float, np.ndarray]]
    caps: list[Any]  # per side (point, draws) of the counted construct's trust, or None


def _cap_many(values: Any, counted) -> Any:
    """A counted metric's value(s) mapped to trust (unrounded); None for an undefined point value."""
    if values is None or (np.ndim(values) == 0 and math.isnan(values)):
        return None
    return to_trust(values, counted.lo, counted.hi, counted.higher_is_better)


def _credited_differences(sides: dict[str, Sides]) -> tuple[dict[str, float], dict[str, np.ndarray], dict[str, str]]:
    """Each task's difference of counted trust (b - a), point and draws, by the rule results.json's pillars
    apply (pillars.counted): a flagged side counts 0, a robustness row its perturbed-input score; a task
    whose degenerate check cannot be made on both sides is left out, and says so."""
    point: dict[str, float] = {}
    draws: dict[str, np.ndarray] = {}
    notes: dict[str, str] = {}
    for task_id, s in sides.items():
        missing = [m for _, m in s.flags if m]
        if missing:
            notes[task_id] = f"not in the pillar difference: {missing[0]}"
            continue
        got = []
        for i in range(2):
            if s.flags[i][0]:
                got.append((0.0, s.trust[i][1] * 0.0))
            elif s.counted is not None:
                got.append(None if s.caps[i] is None else (float(s.caps[i][0]), s.caps[i][1]))
            else:
                got.append(s.trust[i])
        if None in got:
            notes[task_id] = f"not in the pillar difference: {s.counted.why} is undefined on a side"
            continue
        (pa, da), (pb, db) = got
        point[task_id], draws[task_id] = pb - pa, db - da
        if (pa, pb) != (s.trust[0][0], s.trust[1][0]):
            why = "; ".join(f"{side}: {f}" for side, (f, _) in zip("ab", s.flags) if f) or s.counted.why
            notes[task_id] = f"counted in its pillar: a {pa:.1f}, b {pb:.1f} of trust {s.trust[0][0]:.1f}, " \
                             f"{s.trust[1][0]:.1f} ({why})"
    return point, draws, notes


def _calibrated_diff(d: Diff, a: Entry, b: Entry, task_id: str, keys, tab_a: Table, tab_b: Table, seed: int,
                     n_boot: int) -> None:
    """With human ratings of the runs (`trustmh annotate`): the difference anchored to them, in `d.calibrated`
    and, in words, in its note (so every output format shows it)."""
    from ..validation.calibrated import paired_calibrated
    cal = paired_calibrated(a, b, task_id, keys, tab_a, tab_b, seed=seed, n_boot=n_boot)
    if cal is None:
        return
    d.calibrated = cal
    if cal.value is not None:
        ci = f" [{cal.ci[0]:.3f}, {cal.ci[1]:.3f}]" if cal.ci else ""
        text = f"calibrated b - a {cal.value:.3f}{ci} ({cal.n_human} items rated for both)"
    else:
        text = f"no calibrated difference: {cal.reason}"
    d.note = "; ".join(x for x in (d.note, text) if x)


def paired_draws(task, ctx, tab_a: Table, tab_b: Table, names: list[str], n_boot: int, seed: int, task_id: str, *,
                 zero: tuple[bool, bool] = (False, False), batched: bool = True,
                 keep: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Bootstrap draws of b - a for each metric (and of the trust-score difference under '__trust__'),
    resampling the shared clusters with the same draws on both sides; each side's trust draws under
    'a:__trust__' and 'b:__trust__', and each side's draws of the metrics `keep` under 'a:<name>' and
    'b:<name>'. The tables hold the same keys in the same order, so one set of cluster weights serves
    both. Blocks of resamples go through the task's `aggregate_many` (`batched`); a task without one, or
    `batched=False`, runs `aggregate` per resample on the very same draws."""
    m, method = task.metric, task.method(ctx)
    inverse, order, size, start = cluster_layout(tab_a.clusters)
    k = len(size)
    keep = list(keep)
    each = [f"{side}:{name}" for side in "ab" for name in ("__trust__", *keep)]
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names + ["__trust__"] + each}
    for picks in pick_blocks(k, np.random.default_rng(derived_seed(seed, task_id)), n_boot):
        n = len(picks)
        sides = None
        if batched:
            resamples = Resamples(inverse, block_weights(picks, k))
            sides = [method.aggregate_many(t, resamples, ctx) for t in (tab_a, tab_b)]
        if sides is None or None in sides:
            sides = [per_resample(lambda tt: method.aggregate(tt, ctx), t, picks, order, size, start)
                     for t in (tab_a, tab_b)]
        ga, gb = ({name: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for name, v in g.items()} for g in sides)
        nan = np.full(n, math.nan)
        for name in names:
            parts[name].append(gb.get(name, nan) - ga.get(name, nan))
        trust_a, trust_b = _trust_many(ga.get(m.name, nan), m, zero[0]), _trust_many(gb.get(m.name, nan), m, zero[1])
        parts["__trust__"].append(trust_b - trust_a)
        parts["a:__trust__"].append(trust_a)
        parts["b:__trust__"].append(trust_b)
        for name in keep:
            parts[f"a:{name}"].append(ga.get(name, nan))
            parts[f"b:{name}"].append(gb.get(name, nan))
    return {name: np.concatenate(v) if v else np.array([]) for name, v in parts.items()}


def _pillar_diffs(ra, rb, trust_point, trust_draws, shared_n, level) -> list[Diff]:
    """Pillar and overall trust-score differences on the tasks both models have, by the same aggregation as
    results.json (`trustmh.scoring.pillars.combine`): each draw combines the tasks' independent draws (their items
    differ, so pairing draw i across tasks adds no dependence). The a and b columns are results.json's own
    (every task each has); the note says how many shared tasks the difference rests on."""
    from ..scoring.pillars import combine
    from ..tasks import paper_pillars
    paper = paper_pillars()
    point_p, point_all = combine(trust_point)
    draws_p, draws_all = combine(trust_draws)
    out = []
    for pillar, rows in paper.items():
        pa, pb = ra.pillars.get(pillar), rb.pillars.get(pillar)
        if pa is None or pb is None:
            continue
        d = Diff("pillar", f"pillar:{pillar}", pa.trust_score, pb.trust_score, None)
        members = [t for ts in rows.values() for t in ts if t in pa.tasks and t in pb.tasks]
        tested = [t for t in members if t in trust_point]
        if pillar not in point_p:
            d.note = "no task of this pillar could be tested"
        else:
            d.diff = point_p[pillar]
            d.n_shared, d.n_tasks = sum(shared_n[t][0] for t in tested), len(tested)
            d.n_clusters = sum(shared_n[t][1] for t in tested)
            _tested(d, draws_p[pillar], level)
            d.note = "; ".join(x for x in (d.note, _shared_note(tested, members, pa.partial, pb.partial),
                                           _few_note(tested, shared_n)) if x)
        out.append(d)
    d = Diff("overall", "overall", ra.trust_score, rb.trust_score, None)
    if point_all is not None:
        d.diff = point_all
        every = sorted({t for x in (ra, rb) for p in x.pillars.values() if p.pillar in paper for t in p.tasks})
        counted = sorted(t for t in trust_point if t in every)
        d.n_shared = sum(x.n_shared for x in out if x.n_tasks)
        d.n_clusters = sum(shared_n[t][1] for t in counted)
        d.n_tasks = len(trust_point)
        _tested(d, draws_all, level)
        d.note = "; ".join(x for x in (d.note, _shared_note(counted, every, ra.partial, rb.partial),
                                       _few_note(counted, shared_n)) if x)
    out.append(d)
    return out


def _tested(d: Diff, draws: np.ndarray, level: float) -> None:
    """A difference's interval, p-value and detectable difference, all from the same draws; none of them on
    fewer than MIN_CLUSTERS clusters (`d.n_clusters`), which the note says."""
    if d.n_clusters is not None and (few := too_few_clusters(d.n_clusters)):
        d.note = "; ".join(x for x in (d.note, f"{few} (no interval, no test)") if x)
        return
    d.draws = draws
    d.ci, d.p, d.detectable = _interval(draws, level), _p_value(draws), detectable(draws, level)


def _few_note(tasks: list[str], shared_n: dict[str, tuple[int, int]]) -> str:
    """A composite's tasks on fewer than MIN_CLUSTERS clusters: their spread in its interval is understated."""
    few = [f"{t} (G={shared_n[t][1]})" for t in tasks if too_few_clusters(shared_n[t][1])]
    return f"rests in part on tasks with too few clusters, whose spread it understates: {', '.join(few)}" if few else ""


def _shared_note(tested: list[str], members: list[str], partial_a: bool, partial_b: bool) -> str:
    note = f"b − a on {len(tested)} shared task{'s' if len(tested) != 1 else ''}"
    if len(tested) < len(members):
        note += f" of {len(members)} ({', '.join(sorted(set(members) - set(tested)))} untested)"
    partial = [s for s, p in (("a", partial_a), ("b", partial_b)) if p]
    if partial:
        note += f"; {' and '.join(partial)} partial: the a, b columns rest on other rows than the difference"
    return note


def compare_runs(runs: list[Run], *, n_boot: int = 1000, seed: int = 0, all_metrics: bool = False,
                 level: float = 0.95, progress: Callable[[int, int, str], None] | None = None,
                 correction: str = "holm") -> list[Comparison]:
    """Every model against the first one listed (the reference), the p-values of all of them adjusted as one
    family (`adjust_family`). `progress(done, total, label)` is called after each comparison."""
    ents = entries(runs)
    if len(ents) < 2:
        raise UserError("compare needs at least two models (in one run or across runs)")
    cache: dict[str, dict] = {}

    def rows(e: Entry):
        key = str(e.run.dir)
        if key not in cache:
            cache[key] = read_rows(e.run)
        return cache[key]

    ref, out = ents[0], []
    for i, e in enumerate(ents[1:], 1):
        out.append(compare(ref, e, rows(ref), rows(e), n_boot=n_boot, seed=seed, level=level,
                           all_metrics=all_metrics))
        if progress is not None:
            progress(i, len(ents) - 1, e.label)
    adjust_family(out, correction)
    return out

