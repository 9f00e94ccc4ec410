"""The drill-down's per (model, task) selection holds a bounded set of candidates while it reads, and
picks exactly what sorting all the rows would: keyed rows by (key, status, order), rows without a key
after them, or every row by (status, order) when the mean check fails; and a bucket that is given only
the rows it `wants` (the others only counted) picks the same."""

import random

from trustmh.report.drilldown import _STATUS_RANK, _Bucket, _Kept
from trustmh.report.leaderboard import TaskMeta


def naive(rows, limit, meta, value):
    """The whole set sorted as the report sorted it before the selection was bounded."""
    vals = [float(pv) for _, _, pv in rows if pv is not None]
    keyed = bool(vals) and value is not None and not abs(sum(vals) / len(vals) - value) > 1e-6 * max(1.0, abs(value))
    lo, hi = (meta.lo, meta.hi) if meta.lo is not None else (min(vals or [0]), max(vals or [0]))

    def key(row):
        i, st, pv = row
        if not keyed or pv is None:
            return (True, 0.0, _STATUS_RANK[st], i)
        frac = 0.5 if hi == lo else (min(max(float(pv), lo), hi) - lo) / (hi - lo)
        return (False, round(frac if meta.higher_is_better else 1 - frac, 4), _STATUS_RANK[st], i)
    return [(k[3], None if k[0] else k[1]) for k in sorted(map(key, rows))][:limit]


def test_bucket_equals_full_sort_and_stays_bounded():
    rnd = random.Random(5)
    for case in range(300):
        limit = rnd.choice([1, 3, 10])
        meta = TaskMeta(id="x", title="x", pillar="p", metric="accuracy", higher_is_better=rnd.random() < 0.5,
                        lo=None if case % 7 == 0 else 0.0, hi=None if case % 7 == 0 else 1.0)
        rows = []
        for i in range(rnd.choice([0, 2, 30, 400])):
            st = rnd.choice(["ok", "ok", "ok", "no_answer", "unscored", "error"])
            # values that tie after rounding to 4 places, and a few out of range (clamped)
            pv = None if rnd.random() < 0.2 else rnd.choice([0, 1, 0.5, 0.12341, 0.12344, 1.5, rnd.random()])
            rows.append((i, st, pv))
        vals = [float(pv) for *_, pv in rows if pv is not None]
        value = rnd.choice([None, 0.3, sum(vals) / len(vals) if vals else 0.3])
        b, lazy = _Bucket(limit, meta), _Bucket(limit, meta)  # lazy: as the report reads, `wants` first
        peak = 0
        for i, st, pv in rows:
            b.add(_Kept(i, st), pv)
            held = {id(r) for rs in (*b.first, *b.first_plain) for r in rs} | {id(e[3]) for e in b.keyed}
            peak = max(peak, len(held))
            if lazy.wants(i, st, pv):
                lazy.add(_Kept(i, st), pv)
            else:
                lazy.count(pv)
        got = [(r.i, r.s) for r in b.worst(value)]
        assert got == naive(rows, limit, meta, value), case
        assert [(r.i, r.s) for r in lazy.worst(value)] == got, case
        if meta.lo is not None:
            assert peak <= 7 * limit  # whatever the number of rows
