"""results.json's `calibrated` blocks: every judged value of every model anchored to the clinicians' ratings
of the run (`trustmh annotate`), by `calibration` (PPI++ for means, the prediction-powered bootstrap for
other metrics), over the run's own clusters.

For each rated (model, task): the judge's table is the task's per-sample values as samples.jsonl holds them;
the human's is the same table with each rated row scored again by the task's own `score()`, the human's
answers written as the verdict of the rubric the form stands for (rating_forms.py), averaged over raters.
Each metric the form lists gets a block: its value and interval, how many items were rated, lambda, the
effective sample size and the design; or the reason it has none (too few ratings, a draw whose
probabilities no longer hold, a weighted draw for a metric that is not a mean, a judge that gives one
value to everything)."""

from __future__ import annotations

import collections
import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.runs import Run, read_rows
from ..errors import UserError
from ..judges.rubric import Judged, Verdicts
from ..scoring.metrics import Resamples, Table, derived_seed, mean
from ..scoring.results import CalibratedValue, RunResults
from .annotate import Annotation, checked_ratings, frame_of, judged_tasks, read_annotation, read_ratings
from .calibration import MIN_RATED, Estimate, calibrated_mean, ppboot
from .design import frame_items, stratum_of
from .rating_forms import RatingForm

MEAN, PPBOOT = "PPI++ (mean)", "prediction-powered bootstrap"


def _verdicts(rec: dict[str, Any]) -> Verdicts:
    """The judge's verdicts of a sample as samples.jsonl records them."""
    out = Verdicts()
    many = rec.get("verdicts")
    if isinstance(many, dict):
        for k, v in many.items():
            if isinstance(v, dict):
                out[k] = Judged(text=v.get("text"), reason=v.get("reason"))
    elif isinstance(rec.get("judge"), dict):
        out["judge"] = Judged(text=rec["judge"].get("text"), reason=rec["judge"].get("reason"))
    return out


def _frame_check(run: Run, ann: Annotation, forms: dict[str, RatingForm]) -> str | None:
    """Why the draw's inclusion probabilities no longer hold for this run (None: they do): the judged
    samples it was drawn from must be the ones the run has now, stratum by stratum."""
    frame = frame_of(run, forms)
    sizes: collections.Counter = collections.Counter(stratum_of(r, ann.design["kind"]) for r in frame)
    then = {h: v.get("size") for h, v in (ann.design.get("strata") or {}).items() if isinstance(v, dict)}
    if dict(sizes) != then or ann.design.get("n_items", frame_items(frame)) != frame_items(frame):
        return ("the run's judged samples are not those the items were drawn from (re-scored with another judge, "
                "or more samples since): the inclusion probabilities no longer hold; draw again")
    return None


def human_scores(run: Run, ann: Annotation, forms: dict[str, RatingForm]) -> dict[tuple, dict[str, Any]]:
    """(model, task, item_id, variant) -> the human's per-sample values (averaged over raters; each rater's
    kept for the two-way bootstrap) and labels (the raters' majority, `majority`), from the task's own
    scoring of the human's answers."""
    from ..engine.run import context, load_spec
    from ..engine.prepare import prepare, prepare_from_store, samples_except
    from ..engine import Store
    by_unit: dict[str, list[dict]] = collections.defaultdict(list)
    for r in sorted(checked_ratings(ann, forms)[0], key=lambda r: r["rater"]):
        by_unit[r["unit"]].append(r)
    wanted = {(u["model"], u["task"], u["item_id"], u["variant"]): u for u in ann.units if u["id"] in by_unit}
    if not wanted:
        return {}
    records = {}
    for rec in run.iter_samples():
        key = (rec.get("model"), rec.get("task"), str(rec.get("item_id")), str(rec.get("variant") or ""))
        if key in wanted and not rec.get("error"):
            records[key] = rec
    spec = load_spec(run.dir)
    ctx = context(spec)
    store = Store(run.dir / "store.sqlite")
    try:
        found = prepare_from_store(spec, store)
        prepared = found[0] if found is not None else prepare(spec, ctx)[0]
        out: dict[tuple, dict[str, Any]] = {}
        tasks_wanted = {k[1] for k in wanted}
        for p in prepared:
            if p.task.id not in tasks_wanted or p.not_run:
                continue
            keys = {(k[2], k[3]) for k in wanted if k[1] == p.task.id}
            for s in samples_except(p.samples, lambda i, v: (i, v or "") not in keys):
                for model in spec.models:
                    key = (model, p.task.id, s.item.id, s.variant or "")
                    rec, unit = records.get(key), wanted.get(key)
                    if rec is None or unit is None:
                        continue
                    form = forms[p.task.id]
                    values, labels, by_rater = collections.defaultdict(list), collections.defaultdict(list), {}
                    for rating in by_unit[unit["id"]]:
                        verdicts = form.verdicts(rating["answers"], _verdicts(rec))
                        score = p.task.method(ctx).score(s, rec.get("response") or "", verdicts, ctx)
                        for k, v in score.values.items():
                            values[k].append(v)
                        by_rater[rating["rater"]] = dict(score.values)
                        for k, v in (p.task.method(ctx).labels(s, score) or {}).items():
                            labels[k].append(v)
                    out[key] = {"values": {k: float(np.mean(v)) for k, v in values.items()},
                                "labels": {k: majority(v, unit["id"]) for k, v in labels.items()},
                                "by_rater": by_rater, "raters": len(by_unit[unit["id"]]), "pi": unit["pi"]}
        return out
    finally:
        store.close()


def majority(labels: list[Any], unit: str) -> Any:
    """The label most raters gave an item; a tie goes to one of the tied labels picked by a hash of the item's
    opaque id: the label of a rater chosen at random, never the one whose id sorts first."""
    counts = collections.Counter(labels)
    best = max(counts.values())
    tied = sorted((v for v, c in counts.items() if c == best), key=repr)
    return tied[int(hashlib.sha256(unit.encode()).hexdigest()[:8], 16) % len(tied)]


def _block(est: Estimate, method: str, design: str) -> CalibratedValue:
    def num(v):
        return None if v is None or not math.isfinite(v) else float(v)

    def ci(c):
        return c if c is not None and all(math.isfinite(x) for x in c) else None
    return CalibratedValue(value=num(est.value), ci=ci(est.ci), n_human=est.n_human, n_judge_only=est.n_unrated,
                           lam=num(est.lam), effective_n=num(est.effective_n), human_only=num(est.human_only),
                           human_only_ci=ci(est.human_only_ci), method=est.method or method, design=design,
                           reason=est.reason if est.value is None else None, interval=est.interval,
                           n_raters=est.n_raters)


def _many(task, ctx):
    """The task's metrics on a block of resamples (its aggregate_many, else aggregate on each)."""
    def many(table: Table, res: Resamples) -> dict[str, np.ndarray]:
        got = task.method(ctx).aggregate_many(table, res, ctx)
        if got is not None:
            return {k: np.asarray(v, dtype=float) for k, v in got.items()}
        out: dict[str, np.ndarray] = {}
        w = res.weights.astype(int)
        for b in range(len(w)):
            idx = np.repeat(np.arange(len(table)), w[b, res.inverse])
            for k, v in task.method(ctx).aggregate(table.take(idx), ctx).items():
                out.setdefault(k, np.full(len(w), math.nan))[b] = math.nan if v is None else v
        return out
    return many


def calibrate(run: Run, ann: Annotation, *, seed: int, n_boot: int, min_rated: int = MIN_RATED) -> RunResults:
    """The run's results with a `calibrated` block beside every judged value the ratings bear on."""
    from ..analysis.runs import run_context
    from ..tasks import TASKS
    results = run.results.model_copy(deep=True)
    forms, _ = judged_tasks(run)
    ctx = run_context(run)
    design_kind = ann.design["kind"]
    invalid = _frame_check(run, ann, forms)
    humans = human_scores(run, ann, forms) if invalid is None else {}
    rows = read_rows(run, set(results.models))
    usable, left_out = checked_ratings(ann, forms)
    raters = sorted({r["rater"] for r in usable})
    for model, mr in results.models.items():
        for task_id, tr in mr.tasks.items():
            form = forms.get(task_id)
            if form is None or tr.status != "ok" or (model, task_id) not in rows:
                continue
            task = TASKS[task_id]()
            r = rows[(model, task_id)]
            keys = [k for k in r.keys if not math.isnan(r.column(tr.primary_value, [k])[0])]
            judge = r.table(keys)
            rated = np.array([(model, task_id, *k) in humans for k in keys], dtype=bool)
            pis = np.array([humans[(model, task_id, *k)]["pi"] if ok else 1.0 for k, ok in zip(keys, rated)])
            human = Table({c: v.copy() for c, v in judge.columns.items()}, judge.clusters,
                          {c: v.copy() for c, v in judge.labels.items()})
            for i in np.flatnonzero(rated):
                h = humans[(model, task_id, *keys[i])]
                for c in human.columns:
                    human.columns[c][i] = h["values"].get(c, math.nan)
                for c, v in h["labels"].items():
                    if c in human.labels:
                        human.labels[c][i] = v
            raters_here = sorted({r for i in np.flatnonzero(rated) for r in humans[(model, task_id, *keys[i])]["by_rater"]})
            # the judge's verdict on each row: the strata of a stratified draw within this model's task
            strata = (np.array([f"{v:g}" for v in judge.col(tr.primary_value)], dtype=object)
                      if design_kind == "stratified" else None)
            equal = not rated.any() or bool(np.allclose(pis[rated], pis[rated][0]))
            design = f"{design_kind} draw, seed {ann.design['seed']}" + (
                "" if equal else "; rated items weighted 1/pi (unequal inclusion probabilities)")
            label = f"calibrated|{model}|{task_id}"
            for metric, column in form.metrics.items():
                if metric not in tr.metrics and metric != tr.metric:
                    continue
                if invalid:
                    est, method = Estimate(None, None, int(rated.sum()), int((~rated).sum()), reason=invalid), MEAN
                elif column is not None and _is_mean(task, judge, ctx, metric, column):
                    f, y = judge.col(column), human.col(column)
                    ok = ~np.isnan(f) & (~rated | ~np.isnan(y))
                    per_rater = np.array([[humans[(model, task_id, *k)]["by_rater"].get(r, {}).get(column, math.nan)
                                           if is_rated else math.nan for r in raters_here]
                                          for k, is_rated in zip(keys, rated)]).reshape(len(keys), len(raters_here))
                    est = calibrated_mean(f[ok], y[ok], rated[ok], judge.clusters[ok], weights=1 / pis[ok],
                                          seed=derived_seed(seed, f"{label}|{metric}"), n_boot=n_boot,
                                          min_rated=min_rated, strata=None if strata is None else strata[ok],
                                          per_rater=per_rater[ok], bounds=form.bounds(column))
                    method = MEAN
                elif not equal and rated.any():
                    est, method = Estimate(None, None, int(rated.sum()), int((~rated).sum()), reason=(
                        "the rated items were drawn with unequal probabilities: only means can be weighted back; "
                        "draw uniformly to calibrate this metric")), PPBOOT
                else:
                    est = ppboot(judge, human, rated, _many(task, ctx), names=[metric],
                                 seed=derived_seed(seed, f"{label}|{metric}"), n_boot=n_boot, min_rated=min_rated,
                                 judge_value=tr.primary_value)[metric]
                    method = PPBOOT
                block = _block(est, method, design)
                if metric in tr.metrics:
                    tr.metrics[metric].calibrated = block
                if metric == tr.metric:
                    tr.calibrated = block
    results.calibration = {"file": str(ann.path), "sha256": hashlib.sha256(ann.path.read_bytes()).hexdigest(),
                           "design": {k: ann.design[k] for k in ("kind", "seed", "n", "n_frame") if k in ann.design},
                           "n_rated": len({r["unit"] for r in usable}), "n_ratings": len(usable),
                           "ratings_left_out": dict(sorted(left_out.items())),
                           "raters": raters, "min_rated": min_rated, "invalid": invalid}
    return results


def _is_mean(task, table: Table, ctx, metric: str, column: str) -> bool:
    """Whether the task's metric is the plain mean of the per-sample value on this table (a metric the form
    names as a mean but that the task averages per dialogue first, say, goes to the bootstrap instead)."""
    got = task.method(ctx).aggregate(table, ctx).get(metric)
    want = mean(table.col(column))
    return got is not None and math.isfinite(got) and math.isfinite(want) and abs(got - want) <= 1e-9 * max(1.0, abs(want))


def with_ratings(run_dir: Path, results: RunResults, ratings: Path | None = None) -> RunResults:
    """`results` (just written to RUN/results.json) with the calibrated blocks added and written again through
    the one writer, when the run has ratings (RUN/annotation.json, or the annotation file `ratings`)."""
    from ..analysis.runs import Run
    from ..files import atomic_write
    ann = read_ratings(ratings, Path(run_dir)) if ratings is not None else read_annotation(run_dir)
    if ann is None:
        return results
    spec = results.spec
    calibrated = calibrate(Run(Path(run_dir), results), ann, seed=int(spec.get("seed", 0) or 0),
                           n_boot=int(results.bootstrap.get("n_boot", 1000)))
    atomic_write(Path(run_dir) / "results.json", calibrated.model_dump_json(indent=2))
    return calibrated


def calibrated_notes(results: RunResults, label: str) -> list[str]:
    """What a calibrated view of the rank table says under it: that its judged values are calibrated, and, for
    each judged value without one, why (the cell itself shows no value)."""
    out = []
    for model, mr in results.models.items():
        for task_id, tr in sorted(mr.tasks.items()):
            if tr.calibrated is not None and tr.calibrated.value is None:
                out.append(f"no calibrated value for {label or model}, {task_id}: {tr.calibrated.reason}")
    return out


def calibrated_view(results: RunResults) -> RunResults:
    """The run's results as the calibrated values tell them (`--calibrated` for the rank table and the gate):
    every task value and metric with a calibrated block takes its value and interval, a block without a value
    leaves the value undefined with its reason, and the trust, pillar and overall scores are computed again
    from them. Values no judge made (no block) stay as they are."""
    from ..scoring.metrics import trust_score
    from ..scoring.pillars import model_summary
    from .. import tasks  # noqa: F401 - gives scoring load_pillars: model_summary reads every pillar's paper rows
    if results.calibration is None:
        raise UserError("no calibrated values in this run: rate a sample of it with `trustmh annotate RUN`, then "
                        "`trustmh score RUN`")
    view = results.model_copy(deep=True)
    for model, mr in view.models.items():
        for tr in mr.tasks.values():
            for mv in tr.metrics.values():
                if mv.calibrated is not None:
                    mv.value, mv.ci = mv.calibrated.value, mv.calibrated.ci
            cal = tr.calibrated
            if cal is None:
                continue
            tr.value, tr.ci = cal.value, cal.ci
            tr.undefined_by_model = None
            tr.reason = None if cal.value is not None else f"calibrated value: {cal.reason}"
            lo, hi = tr.trust_range if tr.trust_range is not None else (0.0, 1.0)
            tr.trust_score = trust_score(cal.value, min(lo, hi), max(lo, hi), tr.higher_is_better)
        summary = model_summary(model, mr.tasks, seed=int(results.spec.get("seed", 0) or 0))
        summary.identity = mr.identity
        view.models[model] = summary
    view.calibration = {**view.calibration, "view": "calibrated"}  # what the gate's lines and the rank table say
    view.notes = [*view.notes, "calibrated values (--calibrated): judged values anchored to human ratings (PPI++); "
                               "trust, pillar and overall scores computed from them"]
    return view


_HUMANS: dict[tuple[str, str], tuple[Annotation, dict]] = {}


def _humans_of(run: Run) -> tuple[Annotation | None, dict, dict[str, RatingForm]]:
    """A run's annotation (the file its results name) and its human scores, read once per process."""
    forms, _ = judged_tasks(run)
    cal = run.results.calibration or {}
    path = Path(str(cal.get("file") or run.dir / "annotation.json"))
    key = (str(run.dir.resolve()), str(path))
    if key not in _HUMANS:
        ann = read_ratings(path, run.dir) if path.is_file() else None
        _HUMANS[key] = (ann, human_scores(run, ann, forms) if ann is not None and _frame_check(run, ann, forms) is None
                        else {})
    ann, humans = _HUMANS[key]
    return ann, humans, forms


def paired_calibrated(a, b, task_id: str, keys: list[tuple[str, str]], table_a: Table, table_b: Table, *,
                      seed: int, n_boot: int, min_rated: int = MIN_RATED) -> CalibratedValue | None:
    """b - a of a task's primary value anchored to human ratings, on the items both models were rated on:
    PPI++ on D = Y_b - Y_a with the judge's g = f_b - f_a over every shared item (CALIBRATION.md). None when
    neither run has ratings; a block with the reason when it cannot be given."""
    from ..analysis.runs import run_context
    from ..tasks import TASKS
    if a.run.results.calibration is None and b.run.results.calibration is None:
        return None
    ta = a.result.tasks[task_id]
    (ann_a, hum_a, forms), (ann_b, hum_b, _) = _humans_of(a.run), _humans_of(b.run)
    form = forms.get(task_id)
    n_keys = len(keys)

    def no(why: str, n: int = 0) -> CalibratedValue:
        return _block(Estimate(None, None, n, n_keys - n, reason=why), MEAN, "")
    if ann_a is None or ann_b is None:
        return no("only one of the two runs has human ratings")
    if form is None or form.metrics.get(ta.metric) is None:
        return no("a paired calibrated difference is given for judged means only")
    column = form.metrics[ta.metric]
    task = TASKS[task_id]()
    if not (_is_mean(task, table_a, run_context(a.run), ta.metric, column)
            and _is_mean(task, table_b, run_context(b.run), ta.metric, column)):
        return no("a paired calibrated difference is given for judged means only")
    ya, yb = [[h.get((e.model, task_id, *k)) for k in keys] for e, h in ((a, hum_a), (b, hum_b))]
    rated = np.array([x is not None and y is not None for x, y in zip(ya, yb)])
    pis = {x["pi"] for x in ya + yb if x is not None}
    if len(pis) > 1:
        return no("the items were drawn with unequal probabilities: draw uniformly for paired differences",
                  int(rated.sum()))
    fa, fb = table_a.col(column), table_b.col(column)
    d = np.array([yb[i]["values"].get(column, math.nan) - ya[i]["values"].get(column, math.nan) if r else math.nan
                  for i, r in enumerate(rated)])
    g = fb - fa
    # each rater's own difference where they rated both replies: the raters are resampled with the items
    raters = sorted({r for x in ya + yb if x is not None for r in x["by_rater"]})
    per_rater = np.array([[(yb[i]["by_rater"].get(r, {}).get(column, math.nan)
                            - ya[i]["by_rater"].get(r, {}).get(column, math.nan)) if is_rated else math.nan
                           for r in raters] for i, is_rated in enumerate(rated)]).reshape(len(rated), len(raters))
    ok = ~np.isnan(g) & (~rated | ~np.isnan(d))
    est = calibrated_mean(g[ok], d[ok], rated[ok], table_a.clusters[ok], seed=derived_seed(seed, f"calibrated-diff|{task_id}"),
                          n_boot=n_boot, min_rated=min_rated, per_rater=per_rater[ok])
    return _block(est, MEAN, "uniform draw: the items rated for both models")
