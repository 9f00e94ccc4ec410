"""ESConv's reference metrics (Robustness/ESConv/src/metrics.py) on real ESConv turns: each supporter turn
is the reference, the supporter's next turn the hypothesis. BLEU-1..4 against NLTK's own corpus_bleu called
as the original calls it (weights [1/k]*k + [0]*(4-k), SmoothingFunction().method3), dist/F1/ROUGE-L/length
computed here by hand from the same tokens, on the whole set, on subsets and per bootstrap resample."""

import json
import math
from collections import Counter

import numpy as np
import pytest

from conftest import UPSTREAM
from trustmh.scoring import metrics
from trustmh.scoring.metrics import Resamples, Table, point, whole
from trustmh.tasks.esconv_reference import reference_metrics, sample_values, tokenize

pytest.importorskip("nltk")
from nltk.tokenize import NLTKWordTokenizer  # noqa: E402
from nltk.translate.bleu_score import SmoothingFunction, corpus_bleu  # noqa: E402


def pairs(n):
    if not UPSTREAM.is_dir():
        pytest.skip("no upstream data")
    out = []
    for line in (UPSTREAM / "esconv/test.json").read_text(encoding="utf-8").splitlines():
        dialog = json.loads(line)["dialog"]
        sys_turns = [t["text"] for t in dialog if t["speaker"] == "sys"]
        out += list(zip(sys_turns, sys_turns[1:]))[:3]
        if len(out) >= n:
            return out[:n]
    return out


def table_of(ps):
    rows, toks = [], []
    for ref, hyp in ps:
        v, t = sample_values(hyp, ref)
        rows.append(v)
        toks.append(t)
    return Table.from_rows(rows, [str(i // 2) for i in range(len(ps))], {"ref_tokens": toks})


def by_hand(ps):
    """The original's Metric.close() on tokens from trustmh's tokenize (checked on its own below)."""
    refs = [[tokenize(r)] for r, _ in ps]
    hyps = [tokenize(h) for _, h in ps]
    out = {"ref_length": float(np.mean([len(h) for h in hyps]))}
    for k in (1, 2, 3):
        grams = [tuple(s[i:i + k]) for s in hyps for i in range(max(len(s) - k + 1, 0))]
        out[f"ref_dist-{k}"] = 100 * len(set(grams)) / len(grams) if grams else 0.0  # the original's 0.0
    for k in (1, 2, 3, 4):
        out[f"ref_bleu-{k}"] = 100 * corpus_bleu(refs, hyps, weights=[1.0 / k] * k + (4 - k) * [0.0],
                                                 smoothing_function=SmoothingFunction().method3)
    f1s, rls = [], []
    for (ref,), hyp in zip(refs, hyps):
        cross = sum((Counter(hyp) & Counter(ref)).values())
        p, r = cross / max(len(hyp), 1e-10), cross / max(len(ref), 1e-10)
        f1s.append(2 * p * r / max(p + r, 1e-10))
        # LCS by the textbook table
        t = [[0] * (len(hyp) + 1) for _ in range(len(ref) + 1)]
        for i in range(1, len(ref) + 1):
            for j in range(1, len(hyp) + 1):
                t[i][j] = t[i - 1][j - 1] + 1 if ref[i - 1] == hyp[j - 1] else max(t[i - 1][j], t[i][j - 1])
        lcs = t[-1][-1]
        pr, rc = lcs / max(len(hyp), 1e-10), lcs / max(len(ref), 1e-10)
        rls.append((1 + 1.2 ** 2) * pr * rc / (rc + 1.2 ** 2 * pr) if pr and rc else 0.0)
    out["ref_f1"], out["ref_rouge-l"] = 100 * float(np.mean(f1s)), 100 * float(np.mean(rls))
    return out


@pytest.mark.parametrize("n", [1, 3, 40])
def test_reference_metrics_equal_nltk_and_hand_on_real_turns(n):
    ps = pairs(n)
    got = point(reference_metrics(table_of(ps), whole(table_of(ps))))
    want = by_hand(ps)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-9), k


def test_tokens_are_word_tokenizes_on_one_sentence():
    """Within a sentence the tokens are NLTK's word tokenizer's, lower-cased (contractions split, final
    period apart), whatever sentence splitter is installed."""
    text = "I don't think that's what you meant, is it? "
    assert tokenize(text) == NLTKWordTokenizer().tokenize(text.lower().strip()) == \
        ["i", "do", "n't", "think", "that", "'s", "what", "you", "meant", ",", "is", "it", "?"]
    assert tokenize("You are safe. I am here.") == ["you", "are", "safe", ".", "i", "am", "here", "."]


def test_batched_reference_metrics_equal_per_resample():
    table = table_of(pairs(40))
    inverse, order, size, start = metrics._cluster_layout(table.clusters)
    picks = np.random.default_rng(3).integers(0, len(size), (25, len(size)))
    weights = np.stack([np.bincount(p, minlength=len(size)) for p in picks]).astype(float)
    many = reference_metrics(table, Resamples(inverse, weights))
    for b, pick in enumerate(picks):
        sub = table.take(metrics._rows_of(pick, order, size, start))
        one = point(reference_metrics(sub, whole(sub)))
        for k, v in one.items():
            assert many[k][b] == pytest.approx(v, abs=1e-9), (k, b)
        rows = metrics._rows_of(pick, order, size, start)
        ps = pairs(40)
        assert one["ref_bleu-2"] == pytest.approx(by_hand([ps[i] for i in rows])["ref_bleu-2"], abs=1e-9)
    assert not any(math.isnan(v) for v in point(reference_metrics(table, whole(table))).values())


def test_fresh_process_tokenises_without_scipy_and_gives_the_same_values():
    """A run's process that scores ESConv imports nltk without scipy.stats and sklearn (~90 MiB it would
    otherwise load for features these metrics never use); the
    per-sample values there equal this process's, where nltk was imported whole (above)."""
    import subprocess
    import sys
    ps = pairs(40)
    script = ("import json, sys\n"
              "from trustmh.tasks import esconv_reference as m\n"
              "before = 'nltk' in sys.modules\n"
              "ps = json.loads(sys.stdin.read())\n"
              "out = [m.sample_values(h, r) for r, h in ps]\n"
              "print(json.dumps({'before': before, 'out': out, 'tok': m.tokenizer_used(),\n"
              "                  'loaded': [n for n in ('scipy', 'scipy.stats', 'sklearn') if n in sys.modules]}))\n")
    done = subprocess.run([sys.executable, "-c", script], input=json.dumps(ps), capture_output=True, text=True,
                          check=True)
    got = json.loads(done.stdout)
    assert got["before"] is False and got["loaded"] == []
    assert "scipy.stats" in sys.modules  # this process's nltk is the whole package: a real comparison
    assert [list(sample_values(h, r)) for r, h in ps] == got["out"]
    from trustmh.tasks.esconv_reference import tokenizer_used
    assert got["tok"] == tokenizer_used()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distinct_per_resample_equals_the_union_by_hand(seed):
    """dist-k of every resample against counting by hand: the distinct k-grams of the drawn clusters'
    replies over all k-grams drawn (a cluster drawn twice counted twice in the total, once in the
    distinct); small vocabularies so that many grams are held by several clusters, clusters of several
    rows, empty replies, rows without a scored reply, and the same table read for several blocks."""
    from trustmh.tasks.esconv_reference import SEP, _distinct
    rng = np.random.default_rng(seed)
    texts, clusters = [], []
    for i in range(120):
        n = int(rng.integers(0, 9))
        texts.append("\0" if i % 17 == 5 else SEP.join(f"w{t}" for t in rng.integers(0, 6 + seed * 20, n)))
        clusters.append(str(int(rng.integers(0, 40))))
    table = Table({}, np.array(clusters, dtype=object), {"ref_tokens": np.array(texts, dtype=object)})
    inverse, order, size, start = metrics._cluster_layout(table.clusters)
    for block in range(2):  # the second block reads what the first memoised
        picks = rng.integers(0, len(size), (15, len(size)))
        weights = np.stack([np.bincount(p, minlength=len(size)) for p in picks]).astype(float)
        for k in (1, 2, 3):
            got = _distinct(table, Resamples(inverse, weights), k)
            for b, pick in enumerate(picks):
                grams = [tuple(s[i:i + k]) for r in metrics._rows_of(pick, order, size, start)
                         if texts[r] != "\0" for s in [texts[r].split(SEP) if texts[r] else []]
                         for i in range(max(len(s) - k + 1, 0))]
                assert got[b] == (len(set(grams)) / len(grams) if grams else 0.0), (k, b)


@pytest.mark.parametrize("texts", [["w1"], ["w1\1w2"], ["\0", "w1"], ["w1", "w2"], ["", "w1\1w2"]],
                         ids=["one token", "two tokens", "unscored and one", "two rows of one", "empty and two"])
def test_distinct_of_a_table_with_fewer_tokens_than_k(texts):
    """A table whose replies hold fewer tokens in all than k has no k-gram: dist-k is the original's 0.0
    (a one-word reply, "A", to the only item of --limit 1 crashed phase 2 with an IndexError)."""
    from trustmh.tasks.esconv_reference import SEP, _distinct
    texts = [t.replace("\1", SEP) for t in texts]
    table = Table({}, np.array([str(i) for i in range(len(texts))], dtype=object),
                  {"ref_tokens": np.array(texts, dtype=object)})
    inverse, order, size, start = metrics._cluster_layout(table.clusters)
    weights = np.ones((2, len(size)))
    for k in (1, 2, 3):
        grams = [tuple(s[i:i + k]) for t in texts if t != "\0" for s in [t.split(SEP) if t else []]
                 for i in range(max(len(s) - k + 1, 0))]
        want = len(set(grams)) / len(grams) if grams else 0.0
        assert list(_distinct(table, Resamples(inverse, weights), k)) == [want, want], k


def test_values_ahead_are_left_to_the_score_while_another_thread_imports_nltk():
    """A run's warm-up thread imports nltk (~0.25 s); a reply scored ahead meanwhile is not held waiting for
    it on the event loop: its values are left to the score, which gives the same numbers."""
    import threading

    from trustmh.data import punkt
    from trustmh.tasks import esconv_reference as m
    reference, reply = pairs(1)[0]
    expected = sample_values(reply, reference)
    importing, done = threading.Event(), threading.Event()

    def another_thread_importing():
        with punkt._IMPORTING:
            importing.set()
            done.wait(10)
    thread = threading.Thread(target=another_thread_importing)
    thread.start()
    try:
        assert importing.wait(10)
        assert punkt.import_nltk(wait=False) is False
        m._AHEAD.clear()
        m.values_ahead(reply, reference)  # returns at once: nothing computed, nothing held
        assert m._AHEAD == {}
    finally:
        done.set()
        thread.join()
    assert punkt.import_nltk(wait=False) is True  # imported (here, by the tests before), and free again
    m.values_ahead(reply, reference)
    assert len(m._AHEAD) == 1
    assert m.sample_values(reply, reference) == expected and m._AHEAD == {}
