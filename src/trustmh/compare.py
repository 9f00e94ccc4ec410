"""Reading finished runs back, and paired comparisons between models.

A comparison pairs two models on the items both of them answered: it rebuilds each task's `Table`
from samples.jsonl (per-sample values, clusters and labels), resamples the shared clusters, and
re-runs the task's own `aggregate` on both sides of every resample. So a difference of any metric a
task reports (a mean, a Pearson r, a macro-F1) gets a bootstrap interval and a p-value without
metric-specific code. Tasks this version of trustmh does not know are compared on their reported
values only, without a test."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .data.loaders import file_sha256
from .errors import UserError
from .metrics import Table, cluster_resamples, derived_seed, trust_score
from .results import RunResults

Key = tuple[str, str]  # (item_id, variant)


# --------------------------------------------------------------------------------------------------
# Runs on disk

@dataclass
class Run:
    dir: Path
    results: RunResults

    @property
    def samples_path(self) -> Path:
        return self.dir / "samples.jsonl"

    @property
    def id(self) -> str:
        return self.results.run_id

    def iter_samples(self) -> Iterator[dict[str, Any]]:
        """samples.jsonl, one record at a time (a large run is never loaded whole)."""
        if not self.samples_path.is_file():
            return
        # Bytes that are not UTF-8 show as U+FFFD instead of stopping the report with a traceback.
        with self.samples_path.open(encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{self.samples_path}:{lineno}: invalid JSON ({e.msg})") from None
                except (ValueError, RecursionError) as e:  # 5,000 digits; nesting past the parser's depth
                    why = "nested too deeply" if isinstance(e, RecursionError) else str(e)[:120]
                    raise UserError(f"{self.samples_path}:{lineno}: unreadable JSON ({why})") from None
                problem = _sample_shape(rec)
                if problem:  # a crafted or damaged file: one line naming it, not a traceback in the report
                    raise UserError(f"{self.samples_path}:{lineno}: {problem}")
                yield rec


# The fields a reader of samples.jsonl walks into, and the JSON type each must have when present.
_SAMPLE_FIELDS = {"values": dict, "judge": dict, "unscored": dict, "messages": list, "notes": list}


def _sample_shape(rec: Any) -> str | None:
    if not isinstance(rec, dict):
        return "not a sample record (expected a JSON object)"
    for name, kind in _SAMPLE_FIELDS.items():
        if rec.get(name) is not None and not isinstance(rec[name], kind):
            return f"field '{name}' must be a JSON {'object' if kind is dict else 'array'}"
    return None


def load_run(path: Path | str) -> Run:
    """A run directory, or the path of its results.json."""
    path = Path(path)
    file = path if path.is_file() else path / "results.json"
    if not file.is_file():
        raise UserError(f"{path}: not a trustmh run (no results.json)")
    try:
        results = RunResults.model_validate_json(file.read_text(encoding="utf-8"))
    except ValueError as e:
        raise UserError(f"{file}: not a valid results.json ({_first_problem(e)})") from None
    run = Run(file.parent, results)
    expected = results.outputs.get("samples_sha256")
    if expected and run.samples_path.is_file() and file_sha256(run.samples_path) != expected:
        raise UserError(f"{run.samples_path} does not belong to {file} (the run was interrupted while writing "
                        f"them); rerun the same trustmh command to rewrite both")
    return run


def _first_problem(e: ValueError) -> str:
    """Where and what, from a pydantic error (`models.m.tasks.t.value: Input should be a finite number`)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"[:300]
        except Exception:  # noqa: BLE001 - fall back to the text
            pass
    return str(e).splitlines()[0][:300]


@dataclass
class Entry:
    """One model of one run: the unit that is ranked and compared."""

    run: Run
    model: str
    label: str

    @property
    def result(self):
        return self.run.results.models[self.model]


def entries(runs: list[Run]) -> list[Entry]:
    """Every model of every run; a model name seen in two runs is labelled with its run id."""
    pairs = [(r, m) for r in runs for m in r.results.models]
    seen: dict[str, int] = {}
    for _, m in pairs:
        seen[m] = seen.get(m, 0) + 1
    out = []
    for r, m in pairs:
        label = m if seen[m] == 1 else f"{m} @ {r.id}"
        if any(e.label == label for e in out):  # the same run given twice
            label = f"{label} ({len(out)})"
        out.append(Entry(r, m, label))
    return out


# --------------------------------------------------------------------------------------------------
# Per-item rows

@dataclass
class Rows:
    """The scored samples of one model on one task, by (item_id, variant), in data order."""

    values: dict[Key, dict[str, float]] = field(default_factory=dict)
    clusters: dict[Key, str] = field(default_factory=dict)
    labels: dict[Key, dict[str, Any]] = field(default_factory=dict)

    def table(self, keys: list[Key]) -> Table:
        label_names = sorted({k for key in keys for k in self.labels.get(key, {})})
        labels = {n: [self.labels.get(key, {}).get(n) for key in keys] for n in label_names}
        return Table.from_rows([self.values[k] for k in keys], [self.clusters[k] for k in keys], labels)


def read_rows(run: Run, models: set[str] | None = None) -> dict[tuple[str, str], Rows]:
    """(model, task) -> Rows, streamed from samples.jsonl. Only numbers and labels are kept, no text.
    Samples that failed with an error have no values and are left out, as they are from the metrics."""
    out: dict[tuple[str, str], Rows] = {}
    for rec in run.iter_samples():
        if models is not None and rec.get("model") not in models:
            continue
        if rec.get("error") or not isinstance(rec.get("values"), dict):
            continue
        rows = out.setdefault((rec["model"], rec["task"]), Rows())
        key = (str(rec.get("item_id")), rec.get("variant") or "")
        rows.values[key] = {k: float(v) for k, v in rec["values"].items() if isinstance(v, (int, float))}
        # Older samples.jsonl lack clusters and labels: resample by item then.
        rows.clusters[key] = str(rec.get("cluster", key[0]))
        rows.labels[key] = rec.get("labels") or {}
    return out


# --------------------------------------------------------------------------------------------------
# Paired differences

@dataclass
class Diff:
    kind: str  # "task", "metric", "pillar" or "overall"
    name: str  # task id, "task:metric", "pillar:<name>" or "overall" (the names `trustmh gate` uses)
    a: float | None  # reference, as reported in its results.json
    b: float | None
    diff: float | None  # b - a on the items both answered
    ci: tuple[float, float] | None = None
    p: float | None = None
    n_shared: int = 0
    higher_is_better: bool = True
    note: str = ""

    def significant(self, alpha: float) -> bool:
        return self.p is not None and self.p < alpha and bool(self.diff)

    def verdict(self, alpha: float) -> str:
        """'better' / 'worse' for b against a, 'n.s.' when not significant, '' when untested."""
        if self.p is None or self.diff is None:
            return ""
        if not self.significant(alpha):
            return "n.s."
        return "better" if (self.diff > 0) == self.higher_is_better else "worse"


@dataclass
class Comparison:
    a: Entry
    b: Entry
    diffs: list[Diff]
    warnings: list[str] = field(default_factory=list)

    def get(self, name: str) -> Diff | None:
        return next((d for d in self.diffs if d.name == name), None)


def _p_value(draws: np.ndarray, point: float) -> float:
    """Two-sided bootstrap test of 'no difference': how often the resampled difference, shifted to be
    centred on zero, lies at least as far from zero as the observed one."""
    if point == 0:
        return 1.0
    extreme = np.abs(draws - point) >= abs(point) - 1e-12
    return float((1 + extreme.sum()) / (1 + draws.size))


def _interval(draws: np.ndarray, level: float) -> tuple[float, float] | None:
    draws = draws[~np.isnan(draws)]
    if draws.size < 10:
        return None
    alpha = (1 - level) / 2
    return float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))


def _ctx(run: Run):
    from .tasks import RunContext
    spec = run.results.spec
    return RunContext(seed=int(spec.get("seed", 0) or 0), upstream_compat=bool(spec.get("upstream_compat")),
                      judge=str(spec.get("judge", "rules")), options=dict(spec.get("options") or {}))


def _clean(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def compare(a: Entry, b: Entry, rows_a: dict[tuple[str, str], Rows], rows_b: dict[tuple[str, str], Rows], *,
            n_boot: int = 1000, seed: int = 0, level: float = 0.95, all_metrics: bool = False) -> Comparison:
    """b against a: every task both ran, their pillars and the overall trust score."""
    from .plugins import load_task_plugins
    from .tasks import TASKS
    load_task_plugins()  # a task from an installed plugin is compared like a built-in one
    ra, rb = a.result, b.result
    diffs: list[Diff] = []
    warnings: list[str] = []
    sha_a, sha_b = a.run.results.data.get("sha256", {}), b.run.results.data.get("sha256", {})
    changed = sorted(f for f in set(sha_a) & set(sha_b) if sha_a[f] != sha_b[f])
    if changed:
        warnings.append(f"data files differ between the runs: {', '.join(changed)}")
    trust_draws: dict[str, np.ndarray] = {}  # task -> draws of its trust-score difference
    trust_point: dict[str, float] = {}
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
        from .pillars import scoring_version
        now = scoring_version(task)
        for side, tr in (("a", ta), ("b", tb)):
            if tr.scoring_version and tr.scoring_version != now:
                warnings.append(f"{task_id}: run {side} was scored by other scoring code ({tr.scoring_version}) than "
                                f"this trustmh's ({now}); its paired interval re-aggregates with the code here")
        keys = [k for k in ka.values if k in kb.values]
        base.n_shared = len(keys)
        if not keys:
            base.note = "no items answered by both"
            diffs.append(base)
            continue
        ctx = _ctx(a.run)
        metric = task.metric
        names = [metric.name] + ([m for m in ta.metrics if m in tb.metrics and m != metric.name] if all_metrics else [])
        tab_a, tab_b = ka.table(keys), kb.table(keys)
        point_a, point_b = task.aggregate(tab_a, ctx), task.aggregate(tab_b, ctx)
        draws = _paired_draws(task, ctx, tab_a, tab_b, names, n_boot, seed, task_id)
        for name in names:
            pa, pb = _clean(point_a.get(name)), _clean(point_b.get(name))
            if name == metric.name:
                d = base
            else:
                ma, mb = ta.metrics[name], tb.metrics[name]
                d = Diff("metric", f"{task_id}:{name}", ma.value, mb.value, None, n_shared=len(keys),
                         higher_is_better=ta.higher_is_better)
            if pa is None or pb is None:
                d.note = "undefined on the shared items"
            else:
                d.diff = pb - pa
                arr = draws[name]
                d.ci = _interval(arr, level)
                ok = arr[~np.isnan(arr)]
                d.p = _p_value(ok, d.diff) if ok.size >= 10 else None
            diffs.append(d)
        ts_a = trust_score(_clean(point_a.get(metric.name)), metric.lo, metric.hi, metric.higher_is_better)
        ts_b = trust_score(_clean(point_b.get(metric.name)), metric.lo, metric.hi, metric.higher_is_better)
        if ts_a is not None and ts_b is not None:
            trust_point[task_id], trust_draws[task_id] = ts_b - ts_a, draws["__trust__"]
            shared_n[task_id] = len(keys)
    diffs += _pillar_diffs(ra, rb, trust_point, trust_draws, shared_n, level)
    return Comparison(a, b, diffs, warnings)


def _paired_draws(task, ctx, tab_a: Table, tab_b: Table, names: list[str], n_boot: int, seed: int,
                  task_id: str) -> dict[str, np.ndarray]:
    """Bootstrap draws of b - a for each metric (and of the trust-score difference under '__trust__'),
    resampling the shared clusters with the same indices on both sides."""
    m = task.metric
    rng = np.random.default_rng(derived_seed(seed, task_id))
    out = {n: np.full(n_boot, np.nan) for n in names + ["__trust__"]}
    for i, idx in enumerate(cluster_resamples(tab_a.clusters, rng, n_boot)):
        ga, gb = task.aggregate(tab_a.take(idx), ctx), task.aggregate(tab_b.take(idx), ctx)
        for n in names:
            va, vb = _clean(ga.get(n)), _clean(gb.get(n))
            if va is not None and vb is not None:
                out[n][i] = vb - va
        sa = trust_score(_clean(ga.get(m.name)), m.lo, m.hi, m.higher_is_better)
        sb = trust_score(_clean(gb.get(m.name)), m.lo, m.hi, m.higher_is_better)
        if sa is not None and sb is not None:
            out["__trust__"][i] = sb - sa
    return out


def _pillar_diffs(ra, rb, trust_point, trust_draws, shared_n, level) -> list[Diff]:
    """Pillar and overall trust-score differences, by the same aggregation as results.json
    (`trustmh.pillars.combine`): each draw combines the tasks' independent draws (their items differ, so
    pairing draw i across tasks adds no dependence)."""
    from .pillars import PAPER_PILLARS, combine
    point_p, point_all = combine(trust_point)
    draws_p, draws_all = combine(trust_draws)
    out = []
    for pillar, rows in PAPER_PILLARS.items():
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
            d.ci = _interval(draws_p[pillar], level)
            ok = draws_p[pillar][~np.isnan(draws_p[pillar])]
            d.p = _p_value(ok, d.diff) if ok.size >= 10 else None
            d.n_shared = sum(shared_n[t] for t in tested)
            if len(tested) < len(members):
                d.note = f"from {len(tested)} of {len(members)} tasks ({', '.join(sorted(set(members) - set(tested)))} untested)"
        out.append(d)
    d = Diff("overall", "overall", ra.trust_score, rb.trust_score, None)
    if point_all is not None:
        d.diff = point_all
        d.ci = _interval(draws_all, level)
        ok = draws_all[~np.isnan(draws_all)]
        d.p = _p_value(ok, d.diff) if ok.size >= 10 else None
        d.n_shared = sum(x.n_shared for x in out if x.p is not None)
    out.append(d)
    return out


def compare_runs(runs: list[Run], *, n_boot: int = 1000, seed: int = 0, all_metrics: bool = False) -> list[Comparison]:
    """Every model against the first one listed (the reference)."""
    ents = entries(runs)
    if len(ents) < 2:
        raise UserError("compare needs at least two models (in one run or across runs)")
    cache: dict[str, dict] = {}

    def rows(e: Entry):
        key = str(e.run.dir)
        if key not in cache:
            cache[key] = read_rows(e.run)
        return cache[key]

    ref = ents[0]
    return [compare(ref, e, rows(ref), rows(e), n_boot=n_boot, seed=seed, all_metrics=all_metrics)
            for e in ents[1:]]


# --------------------------------------------------------------------------------------------------
# Output

COLUMNS = ("a", "b", "name", "kind", "value_a", "value_b", "diff", "ci_low", "ci_high", "p", "n_shared",
           "verdict", "note")


def records(comparisons: list[Comparison], alpha: float = 0.05) -> list[dict[str, Any]]:
    out = []
    for c in comparisons:
        for d in c.diffs:
            out.append({"a": c.a.label, "b": c.b.label, "name": d.name, "kind": d.kind, "value_a": d.a,
                        "value_b": d.b, "diff": d.diff, "ci_low": d.ci[0] if d.ci else None,
                        "ci_high": d.ci[1] if d.ci else None, "p": d.p, "n_shared": d.n_shared,
                        "verdict": d.verdict(alpha), "note": d.note})
    return out


def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _p(p: float | None) -> str:
    return "-" if p is None else ("<0.001" if p < 0.001 else f"{p:.3f}")


def to_json(comparisons: list[Comparison], alpha: float = 0.05) -> str:
    return json.dumps({"alpha": alpha, "warnings": [w for c in comparisons for w in c.warnings],
                       "rows": records(comparisons, alpha)}, indent=2)


def to_csv(comparisons: list[Comparison], alpha: float = 0.05) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(records(comparisons, alpha))
    return buf.getvalue()


def to_markdown(comparisons: list[Comparison], alpha: float = 0.05) -> str:
    lines = []
    for c in comparisons:
        lines += [f"### {c.b.label} vs {c.a.label}", ""]
        lines += [f"> warning: {w}" for w in c.warnings]
        lines += ["| name | a | b | b − a | 95% CI | p | n | verdict |", "|---|---:|---:|---:|---|---:|---:|---|"]
        for d in c.diffs:
            ci = f"[{_num(d.ci[0])}, {_num(d.ci[1])}]" if d.ci else "-"
            verdict = "; ".join(x for x in (d.verdict(alpha), d.note.replace("|", "/")) if x)
            lines.append(f"| {d.name} | {_num(d.a)} | {_num(d.b)} | {_num(d.diff)} | {ci} | {_p(d.p)} | "
                         f"{d.n_shared} | {verdict} |")
        lines.append("")
    return "\n".join(lines)


def rich_tables(comparisons: list[Comparison], alpha: float = 0.05):
    from rich.markup import escape
    from rich.table import Table as RichTable
    for c in comparisons:
        t = RichTable(title=escape(f"{c.b.label}  vs  {c.a.label}  (b − a, paired bootstrap over shared items)"))
        for col in ("name", "a", "b", "b − a", "95% CI", "p", "n", "verdict"):
            t.add_column(col, justify="left" if col in ("name", "verdict") else "right")
        for d in c.diffs:
            ci = f"[{_num(d.ci[0])}, {_num(d.ci[1])}]" if d.ci else "-"
            v = d.verdict(alpha)
            shown = {"better": "[green]better[/]", "worse": "[red]worse[/]"}.get(v, v)
            if d.note:
                shown = f"{shown} [dim]{escape(d.note)}[/]".strip()
            t.add_row(escape(d.name), _num(d.a), _num(d.b), _num(d.diff), ci, _p(d.p), str(d.n_shared), shown)
        yield c, t
