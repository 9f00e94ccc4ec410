"""The originals' rules on every subset (issue 23): on real crisis records and C-SSRS users, subsets that
lack a class (the first few items, as --limit takes them, and bootstrap resamples), every paper number
equals scikit-learn called as the original calls it; a predicted class without a gold item has recall
0.0, never null; and the batched bootstrap path equals the per-resample one."""

import collections
import math

import numpy as np
import pytest
from sklearn.metrics import f1_score, precision_recall_fscore_support, precision_score, recall_score

from conftest import UPSTREAM  # noqa: I001
from trustmh.scoring import metrics
from trustmh.scoring.metrics import Resamples, Table, confusion, whole
from trustmh.tasks import TASKS, DataSource, Judged, RunContext
from trustmh.tasks.paper_rules import class_report
from trustmh.tasks.crisis.common import CRISIS_LABELS, LEVELS

PAPER = RunContext(seed=0, protocol="paper")


def paper_table(task_id, replies, n_items):
    """The task's own paper-protocol samples and scores for `replies(i, item)`, as score.py builds the Table."""
    if not UPSTREAM.is_dir():
        pytest.skip("no upstream data")
    task = TASKS[task_id]()
    rows, clusters, labels = [], [], collections.defaultdict(list)
    items = task.method(PAPER).load(DataSource(UPSTREAM, "data"), PAPER)[:n_items]
    for i, item in enumerate(items):
        for s in [_sample(task, item)]:  # the prompt is not needed to score
            reply, judged = replies(i, item)
            sc = task.method(PAPER).score(s, reply, judged, PAPER)
            rows.append(sc.values)
            clusters.append(task.method(PAPER).cluster(s))
            for k, v in task.method(PAPER).labels(s, sc).items():
                labels[k].append(v)
    return task, items, Table.from_rows(rows, clusters, dict(labels))


def _sample(task, item):
    from trustmh.types import Sample
    return Sample(task.id, item, [], choices=task.method(PAPER).choices(item))


def ident_reply(i, item):
    # mostly one label (so other classes go missing in small subsets), a junk class and an empty label
    return ['{"label": "suicidal_ideation"}', '{"label": "violent_thoughts"}', "I can't say.",
            f'{{"label": "{item.target}"}}', '{"explanation": "?"}', '{"label": "self-harm"}'][i % 6], None


def severity_reply(i, item):
    return ['{"label": "Attempt"}', '{"label": "maybe"}', f'{{"label": "{item.target}"}}',
            '{"explanation": "x"}', '{"label": "indicator"}'][i % 5], None


@pytest.mark.parametrize("n", [5, 11, 206])
def test_identification_on_subsets_equals_sklearn(n):
    task, items, table = paper_table("crisis.identification", ident_reply, n)
    got = task.method(PAPER).aggregate(table, PAPER)
    gold = [it.target for it in items]
    pred = list(table.labels["paper_pred"])
    classes = sorted(set(gold) | set(pred))
    assert got["macro_f1"] == pytest.approx(f1_score(gold, pred, average="macro", zero_division=0), abs=1e-12)
    assert got["macro_precision"] == pytest.approx(precision_score(gold, pred, average="macro", zero_division=0))
    assert got["macro_recall"] == pytest.approx(recall_score(gold, pred, average="macro", zero_division=0))
    assert got["micro_f1"] == got["accuracy"] == pytest.approx(np.mean(np.array(gold) == np.array(pred)))
    assert got["n_classes"] == len(classes)
    p, r, f, s = precision_recall_fscore_support(gold, pred, labels=classes, zero_division=0)
    for lab in CRISIS_LABELS:
        if lab not in classes:  # the original reports no such class
            assert f"recall[{lab}]" not in got
            continue
        i = classes.index(lab)
        assert (got[f"precision[{lab}]"], got[f"recall[{lab}]"], got[f"f1[{lab}]"], got[f"support[{lab}]"]) == \
            pytest.approx((p[i], r[i], f[i], s[i]), abs=1e-12), lab
    if n == 5:  # the first 5 records: predicted classes with no gold item have recall 0.0
        no_gold = [lab for lab in CRISIS_LABELS if lab in pred and lab not in gold]
        assert no_gold and all(got[f"recall[{lab}]"] == 0.0 for lab in no_gold)
    cm = {(g, q): c for (g, q), c in collections.Counter(zip(gold, pred)).items()}
    assert got["confusion[suicidal_ideation->suicidal_ideation]"] == cm.get(("suicidal_ideation",) * 2, 0)
    other = sum(c for (g, q), c in cm.items() if g == "no_crisis" and q not in CRISIS_LABELS)
    assert got["confusion[no_crisis->(other label)]"] == other


@pytest.mark.parametrize("n", [3, 4, 500])
def test_severity_on_subsets_equals_sklearn_called_as_the_original(n):
    task, items, table = paper_table("crisis.severity", severity_reply, n)
    got = task.method(PAPER).aggregate(table, PAPER)
    kept = table.labels["paper_pred"] != ""
    g, q = list(table.labels["gold"][kept]), list(table.labels["paper_pred"][kept])
    present = [lev for lev in LEVELS if lev in set(g) | set(q)]
    assert len(present) < 5 or n == 500
    assert got["macro_f1"] == pytest.approx(f1_score(g, q, labels=present, average="macro", zero_division=0))
    assert got["macro_precision"] == pytest.approx(precision_score(g, q, labels=present, average="macro",
                                                                   zero_division=0))
    assert got["macro_recall"] == pytest.approx(recall_score(g, q, labels=present, average="macro", zero_division=0))
    assert task.method(PAPER).primary_metric(table, PAPER) == got["macro_f1"]
    p, r, _, _ = precision_recall_fscore_support(g, q, labels=present, zero_division=0)
    for i, lev in enumerate(present):
        assert (got[f"precision[{lev}]"], got[f"recall[{lev}]"]) == pytest.approx((p[i], r[i]), abs=1e-12)
    assert got["num_classes"] == len(present)
    risk = {"Ideation", "Behavior", "Attempt"}
    bg = ["With" if x in risk else "Without" for x in g]
    bq = ["With" if x in risk else "Without" for x in q]
    assert got["binary_f1"] == pytest.approx(f1_score(bg, bq, pos_label="With", average="binary", zero_division=0))
    assert got["confusion[Attempt->Attempt]"] == sum(1 for a, b in zip(g, q) if a == b == "Attempt")


def test_class_report_by_hand_and_absent_classes():
    # gold a a b, pred a c c: a P=1 R=.5; b P=0 (never predicted) R=0; c R=0 (no gold item) P=0; d absent
    rep = class_report(confusion(["a", "a", "b"], ["a", "c", "c"], ["a", "b", "c", "d"]))
    assert rep["precision"][:3].tolist() == [1.0, 0.0, 0.0] and rep["recall"][:3].tolist() == [0.5, 0.0, 0.0]
    assert rep["f1"][0] == pytest.approx(2 / 3) and all(math.isnan(rep[k][3]) for k in ("precision", "recall", "f1"))
    assert rep["present"].tolist() == [True, True, True, False]


def test_a_single_class_subset_has_a_value():
    """--limit 1 style: one record, one class present; the original's macro-F1 is defined (1.0 or 0.0)."""
    task, _, table = paper_table("crisis.severity", lambda i, it: (f'{{"label": "{it.target}"}}', None), 1)
    assert task.method(PAPER).aggregate(table, PAPER)["macro_f1"] == 1.0
    task, _, table = paper_table("crisis.identification", lambda i, it: ('{"label": "self-harm"}', None), 1)
    got = task.method(PAPER).aggregate(table, PAPER)
    assert got["macro_f1"] == 0.0 and got["recall[self-harm]"] == 0.0


def escalation_table(n):
    """A real escalation-shaped table: gold labels of the crisis records, ratings 1-5 and 3.5, a few unparsed."""
    if not UPSTREAM.is_dir():
        pytest.skip("no upstream data")
    import json
    recs = [r for r in json.loads((UPSTREAM / "llms-mental-health-crisis/human_label/"
                                   "human-labeled-sampled_dataset_n206_s42-merged_labels.json").read_text())
            if r["label"]][:n]
    rng = np.random.default_rng(5)
    rows = []
    for _ in recs:
        v = float(rng.choice([1, 2, 3, 3.5, 4, 5, math.nan], p=[.1, .1, .2, .1, .2, .2, .1]))
        rows.append({"rating": v, "rating_or_1": 1.0 if math.isnan(v) else v})
    return Table.from_rows(rows, [str(i) for i in range(len(recs))], {"gold": [r["label"] for r in recs]})


def test_escalation_per_label_std_is_the_population_std():
    table = escalation_table(190)
    got = TASKS["crisis.escalation"]().method(PAPER).aggregate(table, PAPER)
    rating, gold = table.col("rating"), table.labels["gold"]
    for lab in set(gold):
        v = rating[(gold == lab) & ~np.isnan(rating)]
        if v.size:
            assert got[f"std_rating[{lab}]"] == pytest.approx(float(np.std(v)), abs=1e-12)
            assert got[f"mean_rating[{lab}]"] == pytest.approx(float(np.mean(v)), abs=1e-12)


@pytest.mark.parametrize("task_id", ["crisis.identification", "crisis.severity", "crisis.escalation"])
def test_paper_batched_equals_per_resample_and_whole(task_id):
    if task_id == "crisis.escalation":
        task, table = TASKS[task_id](), escalation_table(60)
    else:
        replies = ident_reply if task_id == "crisis.identification" else severity_reply
        task, _, table = paper_table(task_id, replies, 40)
    inverse, order, size, start = metrics._cluster_layout(table.clusters)
    picks = np.random.default_rng(7).integers(0, len(size), (60, len(size)))
    weights = np.stack([np.bincount(p, minlength=len(size)) for p in picks]).astype(float)
    resamples = Resamples(inverse, weights)
    many = task.method(PAPER).aggregate_many(table, resamples, PAPER)
    point = task.method(PAPER).aggregate(table, PAPER)
    assert set(point) <= set(many)
    once = task.method(PAPER).aggregate_many(table, whole(table), PAPER)  # the one body over the whole table: the point values
    np.testing.assert_allclose([once[k][0] for k in point], list(point.values()), rtol=0, atol=1e-12)
    primary = task.method(PAPER).primary_metric_many(table, resamples, PAPER)
    for b, pick in enumerate(picks):
        sub = table.take(metrics._rows_of(pick, order, size, start))
        one = task.method(PAPER).aggregate(sub, PAPER)
        for name in many:
            want, got = one.get(name, math.nan), many[name][b]
            assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want, abs=1e-12), (name, b)
        if task_id != "crisis.escalation":
            assert primary[b] == pytest.approx(one["macro_f1"], abs=1e-12)
            gold, pred = list(sub.labels["gold"]), list(sub.labels["paper_pred"])
            if task_id == "crisis.identification":  # and sklearn, as the original calls it, per resample
                assert one["macro_f1"] == pytest.approx(f1_score(gold, pred, average="macro", zero_division=0))


def ethics_table(n, seed=3):
    """An ethics.reasoning table as the paper protocol scores it: a choice right, wrong or missing; the five
    principle scores 1-5, some missing (the judge left them out)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        r = rng.random()
        row = {"correct": float(r < 0.6), "answered": float(r < 0.9)}
        for k in ("sc1", "sc2", "sc3", "sc4", "sc5"):
            if rng.random() < 0.9:
                row[k] = float(rng.integers(1, 6))
        rows.append(row)
    return Table.from_rows(rows, [str(i) for i in range(n)], {"subcategory": ["x"] * n})


@pytest.mark.parametrize("n", [1, 2, 12, 29, 30, 140])
def test_ethics_paper_numbers_as_the_original_computes_them(n):
    import statistics
    table = ethics_table(n)
    got = TASKS["ethics.reasoning"]().method(PAPER).aggregate(table, PAPER)
    correct, answered = table.col("correct"), table.col("answered")
    tp, fp, fn = correct.sum(), (answered * (1 - correct)).sum(), (1 - correct).sum()
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    assert (got["precision"], got["recall"]) == pytest.approx((precision, recall), abs=1e-12)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    assert got["f1"] == pytest.approx(f1, abs=1e-12)
    t_table = dict(enumerate([12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
                              2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                              2.060, 2.056, 2.052, 2.048, 2.045], start=1))  # the original's table, by df
    for k in ("sc1", "sc2", "sc3", "sc4", "sc5"):
        v = [x for x in table.col(k) if not math.isnan(x)]
        if len(v) < 2:
            want = 0.0 if v else math.nan
        else:
            t = 1.96 if len(v) >= 30 else t_table.get(len(v) - 1, 2.0)
            want = t * statistics.stdev(v) / math.sqrt(len(v))
        assert (math.isnan(want) and math.isnan(got[f"{k}_ci_margin"])) or \
            got[f"{k}_ci_margin"] == pytest.approx(want, abs=1e-12), (k, len(v))


def test_ethics_paper_batched_equals_per_resample():
    table, task = ethics_table(60), TASKS["ethics.reasoning"]()
    inverse, order, size, start = metrics._cluster_layout(table.clusters)
    picks = np.random.default_rng(2).integers(0, len(size), (40, len(size)))
    weights = np.stack([np.bincount(p, minlength=len(size)) for p in picks]).astype(float)
    many = task.method(PAPER).aggregate_many(table, Resamples(inverse, weights), PAPER)
    for b, pick in enumerate(picks):
        one = task.method(PAPER).aggregate(table.take(metrics._rows_of(pick, order, size, start)), PAPER)
        for name in ("precision", "recall", "f1", "sc1_ci_margin", "sc5_ci_margin"):
            assert many[name][b] == pytest.approx(one[name], abs=1e-12), (name, b)


@pytest.mark.needs_methods
def test_results_paper_block_names_the_originals_numbers(tmp_path):
    """--limit 5 under the paper protocol: results.json's `paper` block holds the predecessor's names, each
    the value, n and interval of the metric behind it, and a class predicted without gold reads 0.0."""
    from conftest import run_quiet, run_spec, write_replay
    if not UPSTREAM.is_dir():
        pytest.skip("no upstream data")
    replies = ['{"label": "suicidal_ideation"}', '{"label": "violent_thoughts"}', "I can't say.",
               '{"label": "anxiety_crisis"}', '{"label": "no_crisis"}']
    replay = write_replay(tmp_path / "r.jsonl", [{"task": "crisis.identification", "item_id": str(i),
                                                  "response": replies[i % 5]} for i in range(206)])
    spec = run_spec(models=[f"replay/{replay}"], tasks="crisis.identification", suite="data",
                    data_dir=str(UPSTREAM), protocol="paper", limit=5)
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models[f"replay/{replay}"].tasks["crisis.identification"]
    assert t.paper["macro_f1"] == t.metrics["macro_f1"] and t.paper["macro_f1"].ci is not None
    assert t.paper["per_class_metrics.violent_thoughts.recall"].value == 0.0
    assert t.paper["per_class_metrics.violent_thoughts.precision"].n == 1  # one reply predicted it
    assert t.paper["summary.class_count"].value == t.metrics["n_classes"].value
    assert t.paper["confusion_matrix.no_crisis.no_crisis"] == t.metrics["confusion[no_crisis->no_crisis]"]
    assert "per_class_metrics.self-harm.recall" not in t.paper  # neither gold nor predicted in 5 records


SWMH = ("Anxiety", "SuicideWatch", "bipolar", "depression", "offmychest")


@pytest.mark.parametrize("n", [6, 300])
def test_diagnosis_paper_report_equals_sklearn(n):
    """SWMH's score_classification (the test split is user-supplied: a realistic table, predictions biased
    towards two classes so that small subsets miss some)."""
    rng = np.random.default_rng(n)
    gold = rng.choice(SWMH, n, p=[.3, .3, .1, .2, .1]).astype(object)
    pred = np.where(rng.random(n) < 0.5, gold, rng.choice(["depression", "offmychest"], n)).astype(object)
    rows = [{"correct": float(g == p), "answered": 1.0} for g, p in zip(gold, pred)]
    table = Table.from_rows(rows, [str(i) for i in range(n)], {"gold": list(gold), "pred": list(pred),
                                                                "pred_strict": list(pred)})
    got = TASKS["reliability.diagnosis"]().method(PAPER).aggregate(table, PAPER)
    g, q = list(gold), list(pred)
    present = sorted(set(g) | set(q))
    assert got["macro_f1"] == pytest.approx(f1_score(g, q, average="macro", zero_division=0), abs=1e-12)
    assert got["macro_precision"] == pytest.approx(precision_score(g, q, average="macro", zero_division=0))
    assert got["macro_recall"] == pytest.approx(recall_score(g, q, average="macro", zero_division=0))
    assert got["num_classes"] == len(present)
    p, r, f, s = precision_recall_fscore_support(g, q, labels=present, zero_division=0)
    for i, lab in enumerate(present):
        assert [got[f"{k}[{lab}]"] for k in ("precision", "recall", "f1", "support")] == \
            pytest.approx([p[i], r[i], f[i], s[i]], abs=1e-12)
        assert got[f"pred_count[{lab}]"] == q.count(lab)
    assert got["confusion[Anxiety->depression]"] == sum(a == "Anxiety" and b == "depression" for a, b in zip(g, q))


def test_support_paper_criterion_min_max_std():
    """The ESConv predecessor's judge_<criterion> mean/min/max/std (population), a criterion a judge left
    out not counted; the paper block names them as it does."""
    from trustmh.tasks.paper_names import paper_block
    rng = np.random.default_rng(9)
    crit = ("fluency", "professionalism", "empathy", "helpfulness")
    rows = [{c: float(rng.choice([0, 1, 2, 2.5, 3, 4, 5])) for c in crit if rng.random() < 0.9} for _ in range(70)]
    table = Table.from_rows(rows, [str(i // 2) for i in range(70)])
    task = TASKS["reliability.support"]()
    got = task.method(PAPER).aggregate(table, PAPER)
    for c in crit:
        v = np.array([r[c] for r in rows if c in r])
        assert (got[c], got[f"min[{c}]"], got[f"max[{c}]"], got[f"std[{c}]"]) == \
            pytest.approx((v.mean(), v.min(), v.max(), v.std()), abs=1e-12)
    block = paper_block(task.paper_names, got)
    assert block["judge_empathy.std"] == got["std[empathy]"] and block["judge_fluency.mean"] == got["fluency"]
