"""The blocked, batched bootstrap against the one-resample-at-a-time loop it replaced (kept below as
`reference_bootstrap`), on tables scored by the real tasks: same draws, same intervals to 1e-12, and
every task's aggregate_many equal to its aggregate() resample by resample."""

import collections
import json
import math
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score

import trustmh
from conftest import UPSTREAM
from trustmh.scoring import metrics
from trustmh.scoring.metrics import Resamples, Table, bootstrap, macro_f1_many, mean
from trustmh.tasks import TASKS, DataSource, Judged, RunContext, Task, Verdicts
from trustmh.tasks.base import NO_ANSWER
from trustmh.tasks.reliability import INTERVENTION_CRITERIA, SUPPORT_CRITERIA
from trustmh.tasks.sycophancy import DIMENSIONS as SYCOPHANCY_DIMENSIONS

SAMPLE_ROOT = Path(trustmh.__file__).parent / "data" / "sample"
BATCHED = ("robustness.support", "robustness.crisis", "robustness.diagnosis", "privacy.leakage", "safety.jailbreak",
           "safety.over_refusal", "safety.antitoxic", "reliability.knowledge", "reliability.emotion_recognition",
           "fairness.support", "crisis.identification", "crisis.severity", "crisis.escalation",
           "sycophancy.oeq", "sycophancy.aita", "sycophancy.pas", "ethics.reasoning",
           "privacy.awareness_tier1", "privacy.awareness_tier2a", "privacy.awareness_tier2b",
           "reliability.intervention",
           "reliability.diagnosis", "reliability.support", "crisis.conversation")
BATCHED_PRIMARY = ("reliability.support", "crisis.identification", "reliability.diagnosis", "crisis.severity")


def reference_bootstrap(table, aggregate, seed, n_boot, level=0.95):
    """metrics.bootstrap as it was at 45ea93e: one rng.integers call and one aggregate() per resample; plus
    issue 44's few-cluster rule (no interval below 5 clusters, widened around the point value below 30)."""
    rng = np.random.default_rng(seed)
    uniq, inverse = np.unique(table.clusters.astype(str), return_inverse=True)
    if len(uniq) < metrics.MIN_CLUSTERS:
        return {}
    members = [np.flatnonzero(inverse == i) for i in range(len(uniq))]
    draws = {}
    for _ in range(n_boot):
        pick = rng.integers(0, len(uniq), len(uniq))
        for name, v in aggregate(table.take(np.concatenate([members[i] for i in pick]))).items():
            draws.setdefault(name, []).append(v)
    alpha, out = (1 - level) / 2, {}
    for name, vals in draws.items():
        arr = np.array(vals, dtype=float)
        arr = arr[~np.isnan(arr)]
        if arr.size >= max(10, n_boot // 10):
            out[name] = (float(np.quantile(arr, alpha)), float(np.quantile(arr, 1 - alpha)))
    if len(uniq) < metrics.FEW_CLUSTERS:
        from scipy.stats import norm, t
        k = len(uniq)
        factor = t.ppf(0.5 + level / 2, k - 1) / norm.ppf(0.5 + level / 2) * math.sqrt(k / (k - 1))
        point = aggregate(table)
        out = {name: (point[name] - factor * (point[name] - lo), point[name] + factor * (hi - point[name]))
               for name, (lo, hi) in out.items() if point.get(name) is not None and math.isfinite(point[name])}
    return out


def fake_reply(task, sample, rng) -> tuple[str, Judged | None]:
    """A plausible reply (and judgement) for one sample: mostly right, worse when perturbed, some unscorable."""
    perturbed = "@" in sample.variant
    base = getattr(task, "base", task)
    if getattr(base, "label_set", None):  # a classification task
        r = rng.random()
        if r < 0.08:
            return "I cannot tell from this.", None
        return str(sample.item.target if r < (0.5 if perturbed else 0.7) else rng.choice(base.label_set)), None
    if base.id == "reliability.support":
        if rng.random() < 0.06:
            return "ok", Judged(text="I will not rate this.")
        scores = {c: int(max(0, rng.integers(1, 6) - perturbed * rng.integers(0, 2))) for c in SUPPORT_CRITERIA
                  if rng.random() < 0.97}  # a criterion the judge left out: no overall, the others kept
        return "ok", Judged(text=json.dumps(scores))
    if base.id == "privacy.leakage":
        x = sample.item.input
        if x["qtype"] == "control":
            return str(rng.choice(["Yes.", "No.", "Hard to say."], p=[0.3, 0.6, 0.1])), None
        names = [n for n in (x["subject"], x["aware"], x["oblivious"]) if rng.random() < 0.4]
        judged = Judged(text=f"Answer: {x['subject'] if rng.random() < 0.3 else 'nobody'}") \
            if rng.random() < 0.9 else Judged(reason="judge failed")
        return "I would say: " + ", ".join(names), judged
    if base.id in ("safety.jailbreak", "safety.over_refusal"):
        r = rng.random()
        if r < 0.05:
            return "   ", None  # empty: the model's non-answer
        label = "REFUSED" if r < 0.55 else "COMPLIED"
        return "I can't help with that." if label == "REFUSED" else "Sure.", Judged(text=label) \
            if rng.random() < 0.95 else Judged(reason="judge error: timeout")
    if base.id == "safety.antitoxic":
        if rng.random() < 0.05:
            return "", None
        return "Here is some text.", Judged(text=str(rng.choice(["SAFE", "HARMFUL", "unsure"], p=[0.6, 0.35, 0.05])))
    if base.id == "reliability.knowledge":
        r = rng.random()
        letter = sample.item.target if r < 0.6 else "Z" if r < 0.7 else "A"
        return f"Answer: {letter}", None
    if base.id == "reliability.emotion_recognition":
        x = sample.item.input
        r = rng.random()
        if r < 0.1:
            return "I am not sure.", None
        return f"Emotion: {x['emotion_label'] if 'emotion_label' in x else 'a'}; Cause: b", None
    if base.id == "fairness.support":
        r = rng.random()
        if r < 0.01:
            return "", Judged(reason="judge failed")  # empty: no refusal value, no score
        if r < 0.12:
            return "I'm sorry, but I can't help with that.", Judged(text=json.dumps({c: 0 for c in SUPPORT_CRITERIA}))
        words = " ".join(["word"] * int(rng.integers(5, 120)))
        if rng.random() < 0.01:
            return words, Judged(text="I will not rate this.")
        return words, Judged(text=json.dumps({c: int(rng.integers(1, 6)) for c in SUPPORT_CRITERIA}))
    if base.id == "crisis.escalation":
        reply = "Please call 988 or a crisis line now." if rng.random() < 0.4 else "That sounds hard. I'm here."
        r = rng.random()
        if r < 0.05:
            return reply, Judged(reason="judge error: timeout")
        if r < 0.1:
            return reply, Judged(text="I cannot rate this.")
        rating = int(rng.choice([1, 2, 3, 4, 5], p=[.1, .15, .25, .3, .2]))
        return reply, Judged(text=json.dumps({"appropriateness": rating}))
    if base.id in ("sycophancy.oeq", "sycophancy.aita", "sycophancy.pas"):
        r = rng.random()
        if r < 0.04:
            return " ", None  # empty: the metric's worst value
        reply = str(rng.choice(["NTA, you did nothing wrong.", "YTA here.", "NAH.", "It depends.", "ESH, or NTA?"]))
        if r < 0.09:
            return reply, Judged(reason="judge error: timeout")
        if r < 0.13:
            return reply, Judged(text="unclear")
        rating = int(rng.choice(4, p=[0.3, 0.2, 0.3, 0.2]))
        if base.id == "sycophancy.pas":
            return reply, Judged(text=f"Rating: {rating}")
        # one judgement per dimension (OEQ) or the moral reading (AITA), a few missing
        names = SYCOPHANCY_DIMENSIONS if base.id == "sycophancy.oeq" else ("asker_wrong",)
        bits = {d: Judged(text=str(rng.integers(0, 2))) for d in names if rng.random() < 0.95}
        return reply, Verdicts(judge=Judged(text=f"Rating: {rating}"), **bits)
    if base.id == "ethics.reasoning":
        r = rng.random()
        letter = sample.item.target if r < 0.6 else rng.choice(list("ABCD"))
        reply = "I am not sure." if r < 0.07 else f"Answer: {letter}"
        if rng.random() < 0.05:
            return reply, Judged(reason="judge error: timeout")
        scores = {k: int(rng.integers(1, 6)) for k in ("sc1", "sc2", "sc3", "sc4", "sc5") if rng.random() < 0.97}
        return reply, Judged(text=json.dumps(scores))
    if base.id.startswith("privacy.awareness"):
        if rng.random() < 0.08:
            return "I would rather not rate this.", None
        truth = float(sample.item.target)  # the human mean: the model's rating is near it, on its scale
        allowed = np.array(base.allowed, dtype=float)
        step = 0 if rng.random() < 0.7 else int(rng.choice([-1, 1]))  # else one step off
        near = allowed[int(np.clip(np.argmin(np.abs(allowed - truth)) + step, 0, len(allowed) - 1))]
        return f"Answer: {int(near)}", None
    if base.id == "reliability.intervention":
        if rng.random() < 0.05:
            return "好的。", Judged(reason="judge error: timeout")
        scores = {c: int(rng.integers(0, hi + 1)) for c, hi in INTERVENTION_CRITERIA.items()}
        return "好的。", Judged(text=json.dumps(scores))
    if base.id == "crisis.conversation":  # a conversation, and a walk of the rubric with random answers
        from trustmh.tasks.crisis.conversation_common import drive_walk, dumps_walk
        turns = [{"role": ("user", "chatbot")[i % 2], "text": f"message {i}"} for i in range(int(rng.integers(2, 9)))]
        reply = json.dumps({"format": "trustmh-conversation/1", "turns": turns, "ended": "turns"})
        walker = task.method(RunContext(seed=0)).walker()
        _, replies = drive_walk(walker.walk(), lambda q: f"ANSWER: {rng.choice(q.option_texts)}")
        flow = Judged(text=dumps_walk(replies)) if rng.random() < 0.95 else Judged(reason="judge error: timeout")
        n_bot = sum(t["role"] == "chatbot" for t in turns)
        harm = str(int(rng.integers(1, n_bot + 1))) if n_bot and rng.random() < 0.3 else "none"
        return reply, Verdicts(flow=flow, fidelity=Judged(text=f"ANSWER: {'Drifted' if rng.random() < 0.1 else 'Kept'}"),
                               turns=Judged(text=f"FIRST_HARM: {harm}\nFIRST_HELP: none"))
    raise AssertionError(f"no fake replies for {task.id}")


def scored_table(task_id: str, root: Path, n_items: int, seed: int = 0) -> Table:
    """The task's own samples, scores, clusters and labels (as runner.score_task builds them) for fake replies."""
    task, ctx, rng = TASKS[task_id](), RunContext(seed=0), np.random.default_rng(seed)
    source = DataSource(root, "data")
    if task.missing_files(source):
        pytest.skip(f"{task_id} data not in {root}")
    rows, clusters, labels = [], [], collections.defaultdict(list)
    for item in task.method(ctx).load(source, ctx)[:n_items]:
        for s in task.method(ctx).samples(item, ctx):
            reply, judged = fake_reply(task, s, rng)
            sc = task.method(ctx).score(s, reply, judged, ctx)
            rows.append(sc.values)
            clusters.append(task.method(ctx).cluster(s))
            for k, v in task.method(ctx).labels(s, sc).items():
                labels[k].append(v)
    return Table.from_rows(rows, clusters, dict(labels))


def roots():
    return [pytest.param(SAMPLE_ROOT, id="sample"),
            pytest.param(UPSTREAM, id="upstream", marks=pytest.mark.skipif(not UPSTREAM.is_dir(), reason="no upstream data"))]


@pytest.mark.parametrize("k, n_boot, block", [(1, 5, 100), (7, 13, 21), (90, 50, 1000), (101, 40, 303)])
def test_blocked_matrix_draws_are_one_call_per_resample(monkeypatch, k, n_boot, block):
    monkeypatch.setattr(metrics, "_BLOCK_CELLS", block)  # blocks of block // k resamples
    got = np.concatenate(list(metrics._pick_blocks(k, np.random.default_rng(3), n_boot)))
    rng = np.random.default_rng(3)
    assert np.array_equal(got, np.stack([rng.integers(0, k, k) for _ in range(n_boot)]))


def test_resamples_sums_means_and_counts_by_hand():
    # clusters: a = rows 0, 1 (values 1, 2); b = row 2 (4); c = row 3 (NaN)
    r = Resamples(np.array([0, 0, 1, 2]), np.array([[2.0, 0, 1], [0, 1, 1], [0, 0, 3], [1, 1, 1]]))
    got = r.mean(np.array([1.0, 2.0, 4.0, math.nan]))
    assert got[:2].tolist() == [1.5, 4.0] and math.isnan(got[2]) and got[3] == pytest.approx(7 / 3)
    assert r.counts(np.array([1, 0, 1, -1]), 2).tolist() == [[2, 2], [0, 1], [0, 0], [1, 2]]
    assert r.rows(np.array([False, True, True, False])).sums(np.array([2.0, 4.0])).tolist() == [4, 4, 0, 6]


def test_macro_f1_many_equals_sklearn_on_each_resample():
    rng = np.random.default_rng(1)
    labels = ("a", "b", "c", "d")
    gold = rng.choice(labels, 80).astype(object)
    pred = np.where(rng.random(80) < 0.6, gold, rng.choice(labels[:3], 80)).astype(object)
    clusters = np.array([str(i // 2) for i in range(80)], dtype=object)
    inverse = np.unique(clusters.astype(str), return_inverse=True)[1]
    picks = rng.integers(0, 40, (30, 40))
    weights = np.stack([np.bincount(p, minlength=40) for p in picks]).astype(float)
    got = macro_f1_many(gold, pred, labels, Resamples(inverse, weights))
    for b, p in enumerate(picks):
        rows = np.concatenate([np.flatnonzero(inverse == c) for c in p])
        assert got[b] == pytest.approx(f1_score(list(gold[rows]), list(pred[rows]), average="macro"), abs=1e-12)


@pytest.mark.parametrize("root", roots())
@pytest.mark.parametrize("task_id", BATCHED)
def test_batched_aggregate_equals_per_resample_aggregate(task_id, root):
    check_batched_aggregate(task_id, scored_table(task_id, root, n_items=40), RunContext(seed=0))


@pytest.mark.parametrize("root", roots())
@pytest.mark.parametrize("task_id", ("reliability.diagnosis", "reliability.support", "crisis.escalation",
                                     "reliability.intervention"))
def test_batched_aggregate_under_the_paper_protocol(task_id, root):
    """Their aggregate_many has a branch of its own for the paper's metrics (the table is the trustmh
    one: aggregation reads only its columns and labels)."""
    table = scored_table(task_id, root, n_items=40)
    if "pred_strict" in table.labels:  # the paper reads some labels the strict parse does not
        strict = table.labels["pred_strict"]
        table.labels["pred_strict"] = np.where(np.random.default_rng(3).random(len(strict)) < 0.2, NO_ANSWER, strict)
    if task_id == "crisis.escalation":  # the paper keeps any number as a rating; unparsed ones count as 1
        rating = table.columns["rating"]
        odd = np.random.default_rng(4).random(len(rating)) < 0.1
        table.columns["rating"] = np.where(odd & ~np.isnan(rating), rating + 2.5, rating)  # 3.5, 6.5, ...
        table.columns["rating_or_1"] = np.where(np.isnan(rating), 1.0, table.columns["rating"])
    check_batched_aggregate(task_id, table, RunContext(seed=0, protocol="paper"))


def check_batched_aggregate(task_id, table, ctx):
    task = TASKS[task_id]()
    inverse, order, size, start = metrics._cluster_layout(table.clusters)
    picks = np.random.default_rng(7).integers(0, len(size), (60, len(size)))
    weights = np.stack([np.bincount(p, minlength=len(size)) for p in picks]).astype(float)
    many = task.method(ctx).aggregate_many(table, Resamples(inverse, weights), ctx)
    assert many is not None
    point = task.method(ctx).aggregate(table, ctx)
    assert set(many) <= set(point) and task.metric.name in many
    defined = 0
    for b, pick in enumerate(picks):
        one = task.method(ctx).aggregate(table.take(metrics._rows_of(pick, order, size, start)), ctx)
        for name in point:  # a metric a resample does not report counts as NaN, in both paths
            want, got = one.get(name, math.nan), many.get(name, np.full(len(picks), math.nan))[b]
            assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want, abs=1e-12), (name, b)
            defined += not math.isnan(want)
    assert defined > len(picks) * len(point) / 2  # realistic: most metrics are defined in most resamples


def _writes_batched(cls) -> bool:
    """Whether a task has a batched form of its own: on one of its methods, or on the task itself (a
    task without methods; a task with methods inherits Task's hooks, which only hand over to them)."""
    from trustmh.tasks.base import Method
    hooks = ("aggregate_many", "primary_metric_many")
    on_methods = any(getattr(m, h) is not getattr(Method, h) for m in cls.methods.values() for h in hooks)
    return on_methods or any(getattr(cls, h) is not getattr(Task, h) for h in hooks)


def test_every_batched_form_is_checked_here():
    overriding = {tid for tid, cls in TASKS.items() if _writes_batched(cls)}
    builtin = {tid for tid, cls in TASKS.items() if cls.__module__.startswith("trustmh.tasks.")}
    assert len(builtin) >= 19 and builtin <= overriding  # every built-in task has a batched form
    assert overriding <= set(BATCHED) | set(BATCHED_PRIMARY)


@pytest.mark.parametrize("root", roots())
@pytest.mark.parametrize("task_id", BATCHED_PRIMARY)
def test_batched_primary_metric_equals_per_resample_primary_metric(task_id, root):
    table = scored_table(task_id, root, n_items=60)
    task, ctx = TASKS[task_id](), RunContext(seed=0)
    inverse, order, size, start = metrics._cluster_layout(table.clusters)
    picks = np.random.default_rng(8).integers(0, len(size), (80, len(size)))
    weights = np.stack([np.bincount(p, minlength=len(size)) for p in picks]).astype(float)
    many = task.method(ctx).primary_metric_many(table, Resamples(inverse, weights), ctx)
    want = [task.method(ctx).primary_metric(table.take(metrics._rows_of(p, order, size, start)), ctx) for p in picks]
    assert not np.isnan(want).all()
    np.testing.assert_allclose(many, want, rtol=0, atol=1e-12)  # NaN where NaN


@pytest.mark.parametrize("root", roots())
@pytest.mark.parametrize("task_id", BATCHED)
def test_intervals_equal_the_one_resample_at_a_time_loop(task_id, root, monkeypatch):
    # Several blocks, so block edges are crossed: 60 resamples in blocks of 500 // clusters (the upstream's
    # 40 items: 5 blocks, as 120 in blocks of 1000 // clusters were). The two paths must give the same draws
    # and the same intervals, which 60 show as 120 did; the reference loop is most of this file's time.
    monkeypatch.setattr(metrics, "_BLOCK_CELLS", 500)
    monkeypatch.setattr(metrics, "MIN_CLUSTERS", 2)  # the sample suite has tasks of 2-4 items: compare them too
    table = scored_table(task_id, root, n_items=40, seed=1)
    task, ctx = TASKS[task_id](), RunContext(seed=0)
    ref = reference_bootstrap(table, lambda t: task.method(ctx).aggregate(t, ctx), seed=5, n_boot=60)
    got = bootstrap(table, lambda t: task.method(ctx).aggregate(t, ctx), seed=5, n_boot=60,
                    aggregate_many=lambda t, r: task.method(ctx).aggregate_many(t, r, ctx))
    if metrics.n_clusters(table.clusters) < metrics.MIN_CLUSTERS:  # the sample's jailbreak: one intent
        assert got == ref == {}
        return
    assert task.metric.name in ref and set(got) == set(ref)
    for name, (lo, hi) in ref.items():
        assert got[name] == pytest.approx((lo, hi), abs=1e-12), name


def test_without_a_batched_form_the_loop_gives_the_reference_intervals():
    rng = np.random.default_rng(2)
    table = Table.from_rows([{"v": float(v)} for v in rng.normal(size=120)], [str(i % 37) for i in range(120)])
    agg = lambda t: {"m": mean(t.col("v")), "max": float(t.col("v").max())}  # noqa: E731
    got = bootstrap(table, agg, seed=4, n_boot=200, aggregate_many=lambda t, r: None)
    assert got == reference_bootstrap(table, agg, seed=4, n_boot=200)


@pytest.mark.parametrize("root", roots())
def test_leakage_rates_are_the_papers_mean_of_scenario_means(root):
    """The plain means privacy.leakage computes equal the paper's per-scenario means averaged over scenarios."""
    table = scored_table("privacy.leakage", root, n_items=400, seed=2)
    got = TASKS["privacy.leakage"]().method(RunContext()).aggregate(table, RunContext())
    qtype = table.labels["qtype"]
    for name, qt, col in [("free_response_leak_rate_proxy", "free_response", "proxy_leak"),
                          ("info_accessibility_has_z", "info_accessibility", "has_z"), ("control_error", "control", "flagged")]:
        per_scenario = collections.defaultdict(list)
        for c, q, v in zip(table.clusters, qtype, table.col(col)):
            if q == qt and not math.isnan(v):
                per_scenario[c].append(v)
        assert got[name] == pytest.approx(np.mean([np.mean(v) for v in per_scenario.values()]), abs=1e-12)


def test_leakage_counts_a_scenario_drawn_twice_twice():
    # scenarios a (leaks), b and c (do not); a resample drawing a, a, b: 2 of 3 scenarios leak
    rows = [{"flagged": 1.0}, {"flagged": 0.0}, {"flagged": 0.0}]
    table = Table.from_rows(rows, ["a", "b", "c"], {"qtype": ["free_response"] * 3})
    task, ctx = TASKS["privacy.leakage"](), RunContext()
    many = task.method(ctx).aggregate_many(table, Resamples(np.array([0, 1, 2]), np.array([[2.0, 1, 0]])), ctx)
    assert many["free_response_leak_rate_string_match"][0] == pytest.approx(2 / 3)
    assert task.method(ctx).aggregate(table.take(np.array([0, 0, 1])), ctx)["free_response_leak_rate_string_match"] == \
        pytest.approx(2 / 3)


def test_oeq_source_rates_only_where_a_resample_holds_a_source():
    # rows a (source reddit), b and c (no source): a resample of b, c reports no per-source rate, as aggregate
    table = Table.from_rows([{"endorse": 1.0}, {"endorse": 0.0}, {"endorse": 1.0}], ["a", "b", "c"],
                            {"source": ["reddit", "", ""]})
    task, ctx = TASKS["sycophancy.oeq"](), RunContext()
    many = task.method(ctx).aggregate_many(table, Resamples(np.array([0, 1, 2]), np.array([[0.0, 1, 2], [1.0, 1, 1]])), ctx)
    assert "endorsement_rate[source=]" not in task.method(ctx).aggregate(table.take(np.array([1, 2, 2])), ctx)
    assert math.isnan(many["endorsement_rate[source=]"][0]) and math.isnan(many["endorsement_rate[source=reddit]"][0])
    assert many["endorsement_rate[source=]"][1] == pytest.approx(0.5)
    assert many["endorsement_rate[source=reddit]"][1] == 1.0


def test_pearson_many_equals_pearson_on_each_resample_constant_resamples_included():
    # 3 clusters (the last with one usable row): drawing one cluster thrice leaves x constant, r undefined
    rng = np.random.default_rng(4)
    x, y = np.array([0.1, 0.3, math.nan, 0.7]) * 3, np.array([0.2, 1.5, 0.4, -0.7])
    inverse = np.array([0, 1, 2, 2])
    picks = np.concatenate([[[0, 0, 0], [1, 1, 1], [2, 2, 2]], rng.integers(0, 3, (40, 3))])
    weights = np.stack([np.bincount(p, minlength=3) for p in picks]).astype(float)
    got = metrics.pearson_many(x, y, Resamples(inverse, weights))
    want = [metrics.pearson(x[rows], y[rows]) for rows in
            (np.concatenate([np.flatnonzero(inverse == c) for c in p]) for p in picks)]
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)  # NaN where NaN


def test_percentile_interval_is_the_linear_interpolation_of_the_sorted_draws():
    """Both ends from one np.quantile call: by hand on 5 draws (positions 0.1 and 3.9 between sorted values),
    and bit for bit the two separate calls it replaced, on draws with ties, NaN-free as the callers pass them."""
    assert metrics.percentile_interval(np.array([4.0, 0.0, 3.0, 1.0, 2.0]), 0.025) == pytest.approx((0.1, 3.9), abs=1e-15)
    assert metrics.percentile_interval(np.array([10.0, 0.0]), 0.25) == (2.5, 7.5)
    rng = np.random.default_rng(7)
    for n in (10, 11, 999, 1000):
        draws = np.round(rng.normal(size=n), 2)
        assert metrics.percentile_interval(draws, 0.025) == (float(np.quantile(draws, 0.025)),
                                                             float(np.quantile(draws, 0.975)))
