"""ESConv's reference metrics as the predecessor computes them (Robustness/ESConv/src/metrics.py, issue 23):
the reply against the ground-truth supporter turn, both lower-cased and tokenised by NLTK's word_tokenize;
length, dist-1..3, corpus BLEU-1..4 (NLTK's corpus_bleu, weights [1/k]*k + [0]*(4-k), SmoothingFunction
method3), unigram F1 and ROUGE-L (beta 1.2), each x100 but length.

Each sample's share is kept as numbers (the n-gram matches and totals BLEU sums over the corpus, the
lengths, F1 and ROUGE-L) and its tokens as a label, so that `reference_metrics(table, resamples)` gives the
corpus values over the whole table and over every bootstrap resample alike.

Tokenisation: word_tokenize splits sentences with NLTK's Punkt model for English (`punkt_tab`, which the
original downloads on first use). trustmh never downloads at run time: with the model installed
(`trustmh data pull punkt`, a local copy in $TRUSTMH_PUNKT, or NLTK's own data path; data/punkt.py) the
tokens are the original's, split by that model exactly as word_tokenize loads it; without it an
untrained Punkt splitter is used, which differs where the model knows an abbreviation ("Dr.", "e.g.").
The callers name the model's folder (`punkt`, None: the untrained splitter), and results.json says which
was used, with the model's sha256 (`tokenizer_used`).

nltk is imported the first time a text is tokenised (or the tokenizer named), never when this module is,
and without the statistics libraries its package would otherwise load (`data.punkt.import_nltk`)."""

from __future__ import annotations

import functools
import math
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..data.punkt import import_nltk
from ..scoring.metrics import Resamples, Table

SEP = "\x1f"  # joins a reply's tokens in its label column (a control character no token holds)
ORDERS = (1, 2, 3, 4)


@functools.lru_cache(maxsize=4)
def _sentence_splitter(punkt: str | None) -> tuple[Callable[[str], list[str]], str]:
    """The sentence splitter for the Punkt English model in folder `punkt` (as PunktTokenizer("english")
    loads it: its load_punkt_params), or an untrained one; and what results.json says of it."""
    import_nltk()
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    if punkt is None:
        return PunktSentenceTokenizer().tokenize, ("nltk word_tokenize over an untrained Punkt splitter: punkt_tab "
                                                   "not found (`trustmh data pull punkt`); it differs from the "
                                                   "original at abbreviations")
    from nltk.tabdata import PunktDecoder

    from ..data.punkt import fingerprint
    # NLTK's load_punkt_params, which PunktTokenizer("english") runs on the folder nltk.data.find gives it,
    # on this folder: the same decoder on the same files (NLTK's own loader reads only under its data path).
    folder, decode, params = Path(punkt), PunktDecoder(), PunktParameters()
    with (folder / "collocations.tab").open(encoding="utf-8") as f:
        params.collocations = set(decode.tab2tups(f))
    with (folder / "sent_starters.txt").open(encoding="utf-8") as f:
        params.sent_starters = decode.txt2set(f)
    with (folder / "abbrev_types.txt").open(encoding="utf-8") as f:
        params.abbrev_types = decode.txt2set(f)
    with (folder / "ortho_context.tab").open(encoding="utf-8") as f:
        params.ortho_context = decode.tab2intdict(f)
    splitter = PunktSentenceTokenizer(params)
    return splitter.tokenize, (f"nltk word_tokenize with the Punkt English model (punkt_tab, sha256 "
                               f"{fingerprint(Path(punkt))[:16]}), as the original")


def tokenizer_used(punkt: str | None = None) -> str:
    return _sentence_splitter(punkt)[1]


@functools.lru_cache(maxsize=1)
def _word_tokenizer() -> Callable[[str], list[str]]:
    import_nltk()
    from nltk.tokenize import NLTKWordTokenizer
    return NLTKWordTokenizer().tokenize


def tokenize(text: str, punkt: str | None = None) -> list[str]:
    """nltk.word_tokenize(text.lower()) with the Punkt model in folder `punkt` (see the module doc)."""
    words = _word_tokenizer()
    return [t for sent in _sentence_splitter(punkt)[0](text.lower()) for t in words(sent)]


def _lcs(a: list[str], b: list[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[-1]))
        prev = cur
    return prev[-1]


# Values computed ahead (`values_ahead`, while the judge still works on the task), each with the number of
# scores it was computed for; `sample_values` takes them. Bounded: past it, a sample is computed when scored.
_AHEAD: dict[tuple[str, str, str | None], list] = {}
AHEAD_MAX = 32_768


def values_ahead(reply: str, reference: str, punkt: str | None = None) -> None:
    """Compute `sample_values(reply, reference, punkt)` now, for a score to come (Method.ahead); left to the
    score while another thread (the run's warm-up) still imports nltk, rather than hold the event loop."""
    if not import_nltk(wait=False):
        return
    key = (reply, reference, punkt)
    held = _AHEAD.get(key)
    if held is not None:
        held[2] += 1
    elif len(_AHEAD) < AHEAD_MAX:
        _AHEAD[key] = [*_sample_values(reply, reference, punkt), 1]


def sample_values(reply: str, reference: str, punkt: str | None = None) -> tuple[dict[str, float], str]:
    """One sample's numbers (columns ref_*) and its tokens (the ref_tokens label): computed ahead, or now.
    A pure function of its two texts and the model, so what was computed ahead is what it would give."""
    key = (reply, reference, punkt)
    held = _AHEAD.get(key)
    if held is None:
        return _sample_values(reply, reference, punkt)
    held[2] -= 1
    if held[2] <= 0:
        del _AHEAD[key]
    return dict(held[0]), held[1]


def _sample_values(reply: str, reference: str, punkt: str | None) -> tuple[dict[str, float], str]:
    import_nltk()
    from nltk.translate.bleu_score import modified_precision
    hyp, ref = tokenize(reply, punkt), tokenize(reference, punkt)
    out = {"ref_hyp_len": float(len(hyp)), "ref_ref_len": float(len(ref))}  # one reference: the closest
    for n in ORDERS:
        p = modified_precision([ref], hyp, n)
        out[f"ref_match{n}"], out[f"ref_total{n}"] = float(p.numerator), float(p.denominator)
    cross = sum((Counter(hyp) & Counter(ref)).values())
    p, r = cross / max(len(hyp), 1e-10), cross / max(len(ref), 1e-10)
    out["ref_f1_sample"] = 2 * p * r / max(p + r, 1e-10)
    lcs = _lcs(ref, hyp)
    prec, rec = lcs / max(len(hyp), 1e-10), lcs / max(len(ref), 1e-10)
    beta = 1.2
    out["ref_rouge_l_sample"] = ((1 + beta ** 2) * prec * rec / (rec + beta ** 2 * prec)) if prec and rec else 0.0
    return out, SEP.join(hyp)


def _bleu(s: np.ndarray, k: int) -> np.ndarray:
    """corpus_bleu from summed statistics (resamples x [match1..4, total1..4, hyp_len, ref_len])."""
    match, total, hyp_len, ref_len = s[:, 0:4], s[:, 4:8], s[:, 8], s[:, 9]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = match / total
        smoothed = np.array(p)
        step = np.ones(len(s))  # method3: the k-th zero-match order gets 1 / (2^k * total)
        for i in range(4):
            zero = match[:, i] == 0
            smoothed[:, i] = np.where(zero, 1.0 / (2.0 ** step * total[:, i]), p[:, i])
            step = step + zero
        logs = np.where(smoothed[:, :k] > 0, np.log(smoothed[:, :k]), 0.0).sum(axis=1) / k
        bp = np.where(hyp_len > ref_len, 1.0, np.where(hyp_len == 0, 0.0, np.exp(1 - ref_len / hyp_len)))
        out = bp * np.exp(logs)
    return np.where(match[:, 0] == 0, 0.0, out)


def _distinct(table: Table, r: Resamples, k: int) -> np.ndarray:
    """dist-k: distinct k-grams of the replies over all k-grams; each resample counts a drawn reply as often
    as it is drawn in the total and once among the distinct, as a resampled table does."""
    totals, layout = table.memoized(("dist", k, r.inverse.tobytes()), lambda: _gram_layout(table, r.inverse, k))
    tot = r.sums(totals)
    distinct = _distinct_counts(layout, r.weights > 0).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, distinct / np.where(tot > 0, tot, 1), 0.0)  # the original's 0.0 when invalid


GramLayout = tuple[np.ndarray, np.ndarray, np.ndarray]  # (columns, starts, n_grams) of _distinct_counts


def _token_codes(table: Table) -> tuple[np.ndarray, np.ndarray, int]:
    """The replies' tokens as integer codes laid end to end, each row's token count (0 for a row without
    a scored reply) and the number of distinct tokens."""
    tokens = table.labels.get("ref_tokens", np.array([], dtype=object))
    vocab: dict[str, int] = {}
    codes: list[int] = []
    lengths = np.zeros(len(tokens), dtype=np.int64)
    for row, text in enumerate(tokens):
        if not isinstance(text, str) or text == "\0" or not text:  # no reply scored here, or no token
            continue
        sen = text.split(SEP)
        codes += [vocab.setdefault(t, len(vocab)) for t in sen]
        lengths[row] = len(sen)
    return np.array(codes, dtype=np.int64), lengths, len(vocab)


def _gram_layout(table: Table, inverse: np.ndarray, k: int) -> tuple[np.ndarray, GramLayout | None]:
    """What dist-k needs of the replies that no resample changes: each row's k-gram count, and the grams
    grouped by the set of clusters holding them (`inverse`: row -> cluster). Built once per table (the
    point value and every block of resamples read the same one), with numpy but for the grams held by
    more than one cluster."""
    codes, lengths, n_vocab = table.memoized("ref_token_codes", lambda: _token_codes(table))
    totals = np.maximum(lengths - k + 1, 0).astype(float)
    row = np.repeat(np.arange(len(lengths)), lengths)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    ok = np.arange(len(codes)) - first + k <= lengths[row]  # a k-gram starts here within its reply
    gram = codes
    for j in range(1, k):  # a (j+1)-gram's code from its j-gram's and the next token's, renumbered densely
        nxt = np.zeros(len(codes), dtype=np.int64)  # the token j places on (0 past the end; masked by `ok`)
        nxt[:max(len(codes) - j, 0)] = codes[j:]  # sliced, not appended: a table of fewer than k tokens
        gram = np.unique(gram * n_vocab + nxt, return_inverse=True)[1].ravel()
    gram = gram[ok]
    if not len(gram):
        return totals, None
    # (gram, cluster) pairs, each once, sorted by gram then cluster: each gram's run of clusters is its
    # holder set. A gram is in resample b when any cluster holding it is drawn, so the grams held by the
    # same set of clusters are counted together: one "any drawn" per distinct holder set
    # (np.logical_or.reduceat over the holders' columns, laid end to end) instead of a union and
    # np.unique per resample, which cost ~2 ms a resample for ESConv's 10,400 replies.
    n_clusters = int(inverse.max()) + 1
    pairs = np.unique(gram * n_clusters + inverse[row[ok]])
    g, c = pairs // n_clusters, pairs % n_clusters
    run_start = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    run_len = np.diff(np.r_[run_start, len(g)])
    single = run_len == 1  # most k-grams for k > 1: grouped by their one cluster, without Python
    by_cluster = np.bincount(c[run_start[single]], minlength=n_clusters)
    held = np.flatnonzero(by_cluster)
    sets = Counter(tuple(c[a:a + n].tolist()) for a, n in zip(run_start[~single], run_len[~single]))
    columns = np.concatenate([held, np.fromiter((x for h in sets for x in h), dtype=np.intp)]).astype(np.intp)
    starts = np.concatenate([np.arange(len(held)), len(held) + np.cumsum([0] + [len(h) for h in sets])[:-1]])
    n_grams = np.concatenate([by_cluster[held], np.fromiter(sets.values(), dtype=np.int64)]).astype(np.int64)
    return totals, (columns, starts.astype(np.intp), n_grams)


_CHUNK_CELLS = 4_000_000  # bytes of the (resamples x holders) boolean block `_distinct_counts` gathers at once


def _distinct_counts(layout: GramLayout | None, drawn: np.ndarray) -> np.ndarray:
    """For each resample b, the number of distinct grams over the clusters drawn in it (`drawn[b, c]`), as
    an integer count: exactly the size of the union of the drawn clusters' grams (`_gram_layout`)."""
    out = np.zeros(len(drawn), dtype=np.int64)
    if layout is None:
        return out
    columns, starts, n_grams = layout
    step = max(1, _CHUNK_CELLS // len(columns))
    for lo in range(0, len(drawn), step):
        block = drawn[lo:lo + step][:, columns]
        out[lo:lo + step] = np.logical_or.reduceat(block, starts, axis=1) @ n_grams
    return out


def reference_metrics(table: Table, r: Resamples) -> dict[str, Any]:
    """Metric.close(): ref_length, ref_dist-1..3, ref_bleu-1..4, ref_f1, ref_rouge-l over the scored replies."""
    ok = ~np.isnan(table.col("ref_hyp_len"))
    cols = [f"ref_match{n}" for n in ORDERS] + [f"ref_total{n}" for n in ORDERS] + ["ref_hyp_len", "ref_ref_len"]
    rows = r.rows(ok)
    sums = rows.sums(np.stack([table.col(c)[ok] for c in cols], axis=1)) if ok.any() else np.zeros((len(r), 10))
    out: dict[str, Any] = {"ref_length": r.mean(table.col("ref_hyp_len"))}
    for k in (1, 2, 3):
        out[f"ref_dist-{k}"] = 100 * _distinct(table, r, k)
    for k in ORDERS:
        out[f"ref_bleu-{k}"] = 100 * _bleu(sums, k)
    out["ref_f1"] = 100 * r.mean(table.col("ref_f1_sample"))
    out["ref_rouge-l"] = 100 * r.mean(table.col("ref_rouge_l_sample"))
    n = rows.sums(np.ones(int(ok.sum()))) if ok.any() else np.zeros(len(r))
    none = n == 0  # no scored reply in this (re)sample
    return {k: np.where(none, math.nan, v) for k, v in out.items()}


PAPER_NAMES = {f"generation_metrics.aggregate.{name}": f"ref_{name}"
               for name in ("length", "dist-1", "dist-2", "dist-3", "bleu-1", "bleu-2", "bleu-3", "bleu-4", "f1",
                            "rouge-l")}
