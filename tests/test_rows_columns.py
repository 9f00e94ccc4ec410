"""runs.Rows holds a model's scored samples of a task as columns; its tables must be exactly what the
per-sample dicts gave (Table.from_rows over the rows of the keys asked for): the values and labels that
any of those rows has (a value some rows lack is NaN there, a missing label None), a key seen again
replacing its row in place, and the rows read back from a real samples.jsonl; and one row's values,
labels and cluster, and one value over keys, read back as they were added (the panel reads them so)."""

import math
import random

import numpy as np

from trustmh.scoring.metrics import Table
from trustmh.analysis.runs import Rows


def reference(records, keys):
    """The per-sample dicts, last record of a key winning, turned into the table as before."""
    values, clusters, labels = {}, {}, {}
    for key, vals, cluster, labs in records:
        values[key], clusters[key], labels[key] = vals, cluster, labs
    names = sorted({n for k in keys for n in labels[k]})
    return Table.from_rows([values[k] for k in keys], [clusters[k] for k in keys],
                           {n: [labels[k].get(n) for k in keys] for n in names})


def same(a: Table, b: Table) -> bool:
    return (list(a.columns) == list(b.columns) and list(a.labels) == list(b.labels)
            and all(np.array_equal(a.columns[n], b.columns[n], equal_nan=True) for n in a.columns)
            and all(list(a.labels[n]) == list(b.labels[n]) for n in a.labels)
            and list(a.clusters) == list(b.clusters))


def test_tables_equal_the_per_sample_dicts():
    rnd = random.Random(7)
    for case in range(60):
        rows, records = Rows(), []
        for _ in range(rnd.choice([1, 5, 40])):
            key = (f"i{rnd.randrange(25)}", rnd.choice(["", "v1", "v2"]))  # repeats: a later record replaces
            vals = {n: rnd.choice([0.0, 1.0, rnd.random(), math.nan]) for n in ("a", "b", "c", "d")
                    if rnd.random() < (0.9 if n == "a" else 0.3)}  # "a" nearly always; the others now and then
            labs = {n: rnd.choice(["x", "y", None, 3]) for n in ("g", "h") if rnd.random() < 0.4}
            cluster = f"c{rnd.randrange(6)}"
            records.append((key, vals, cluster, labs))
            rows.add(key, vals, cluster, labs)
        held = list(dict.fromkeys(k for k, *_ in records))
        assert rows.keys == held and all(k in rows for k in held) and ("nope", "") not in rows
        last = {k: (vals, cluster, labs) for k, vals, cluster, labs in records}
        for k, (vals, cluster, labs) in last.items():  # one row read back, as the panel reads them
            got = rows.values_of(k)
            assert got.keys() == vals.keys() and all(got[n] == v or math.isnan(v) and math.isnan(got[n])
                                                     for n, v in vals.items()), case
            assert rows.labels_of(k) == labs and rows.cluster_of(k) == cluster, case
        asked = held + [("nope", "")]
        want = [last[k][0].get("b", math.nan) if k in last else math.nan for k in asked]
        assert np.array_equal(rows.column("b", asked), np.array(want, dtype=float), equal_nan=True), case
        for keys in (held, rnd.sample(held, max(1, len(held) // 2)), held[::-1]):
            assert same(rows.table(keys), reference(records, keys)), case


def test_rows_read_back_from_a_real_run_equal_the_per_sample_dicts(tmp_path):
    import json

    from conftest import run_quiet, run_spec
    from trustmh.analysis.runs import load_run, read_rows
    run_dir, _, _ = run_quiet(run_spec(models=["baseline/random", "baseline/counselor"], judge="rules"), tmp_path / "run")
    by_model_task = read_rows(load_run(run_dir))
    records: dict = {}
    for line in (run_dir / "samples.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("error") or not isinstance(rec.get("values"), dict):
            continue
        key = (str(rec["item_id"]), rec.get("variant") or "")
        records.setdefault((rec["model"], rec["task"]), []).append(
            (key, {k: float(v) for k, v in rec["values"].items()}, str(rec.get("cluster", key[0])),
             rec.get("labels") or {}))
    assert set(by_model_task) == set(records) and len(records) > 10
    for mt, recs in records.items():
        keys = list(dict.fromkeys(k for k, *_ in recs))
        assert same(by_model_task[mt].table(keys), reference(recs, keys)), mt
