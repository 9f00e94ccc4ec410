"""The degenerate-behaviour statistics (scoring/degenerate.py), on replies whose answer is known by
construction: stock replies are caught however they are dressed, replies that follow the item are not."""

import random

import numpy as np
import pytest

from trustmh.scoring.degenerate import NEAR, _shingles, answers, near_duplicates, normalise, similarity

CONSTANT = "That sounds really hard. I'm here for you."
TOPICS = ["my exam results came back and I failed chemistry again", "the fight with my sister about mum's care",
          "losing my job last week after eleven years there", "my dog being sick and the vet bills piling up",
          "moving to a new city where I know nobody", "not sleeping for days because my thoughts race",
          "my father's surgery being postponed twice now", "the breakup in spring that I still replay",
          "money problems at home that my partner hides", "feeling left out at work since the new manager came"]
OPENINGS = ["It makes sense that this weighs on you.", "Thank you for telling me.", "That sounds exhausting."]


def follows(topic: str, k: int) -> str:
    """A reply that takes up the person's own words, as an ordinary model's does (a stock opening, then
    the person's situation and a question about it)."""
    words = topic.split()
    return (f"{OPENINGS[k % 3]} You mentioned {topic}. When you think about {' '.join(words[-4:])}, what goes "
            f"through your mind first, and who knows about {' '.join(words[:3])}?")


def test_a_constant_reply_is_caught_however_it_is_dressed():
    """The item id appended (the exact-digest rule's escape), prepended, case and punctuation changed."""
    items = [f"esconv-{i:04d}" for i in range(20)]
    for dress in (lambda r, i: f"{r} {i}", lambda r, i: f"[{i}] {r}", lambda r, i: f"{r.upper()}!!! ({i})",
                  lambda r, i: f"{r} (ref {i.replace('-', ' ')})"):
        share, _ = near_duplicates([dress(CONSTANT, i) for i in items], items)
        assert share == 1.0, dress(CONSTANT, items[0])


def test_a_handful_of_stock_sentences_is_caught_and_replies_that_follow_the_item_are_not():
    rng = random.Random(0)
    stock = [CONSTANT, "Could you tell me more about that?", "Many people feel this way at times.",
             "Have you thought about talking to someone you trust?"]
    items = [str(i) for i in range(40)]
    share, _ = near_duplicates([rng.choice(stock) for _ in items], items)
    assert share > 0.9
    replies = [follows(TOPICS[i], i) for i in range(10)]
    share, mean = near_duplicates(replies, items[:10])
    assert share == 0.0 and mean < NEAR
    # The replies to one item's variants are alike by design: they are not compared with each other.
    share, _ = near_duplicates([CONSTANT] * 4 + [follows(t, 0) for t in TOPICS[:4]], ["a"] * 4 + list("bcde"))
    assert share == 0.0


def test_similarity_is_shingle_containment_computed_by_hand():
    """'abcdef' has shingles abcde, bcdef; 'abcdefg' adds cdefg: containment 2 / min(2, 3) = 1; 'bcdefx'
    shares bcdef with 'abcdef': 1 / 2."""
    sim = similarity(["abcdef", "abcdefg", "bcdefx", ""])
    assert sim[0, 1] == 1.0 and sim[0, 2] == 0.5 and sim[0, 3] == 0.0 and sim[3, 3] == 1.0


def test_similarity_in_slices_pauses_after_each_reply_and_gives_the_same_values():
    """A run scores a free-text task beside its requests (engine/_slices.py): `pause` is called after each
    reply's shingles and after each part of the intersection counts, and the statistics through `in_slices`
    (which stops at pauses) are those of one plain call."""
    from trustmh.engine._slices import in_slices
    rng = random.Random(3)
    items = [str(i // 2) for i in range(24)]
    replies = [rng.choice([CONSTANT, follows(TOPICS[i % 10], i)]) for i in range(24)]
    paused = []
    assert near_duplicates(replies, items, lambda: paused.append(1)) == near_duplicates(replies, items)
    assert len(paused) > len(replies)  # one a reply, then the counts' parts
    steps = in_slices(lambda pause: near_duplicates(replies, items, pause), slice_s=0.0)  # stops at each pause
    slices = 0
    try:
        while True:
            next(steps)
            slices += 1
    except StopIteration as end:
        value = end.value
    assert slices == len(paused)
    assert value == near_duplicates(replies, items)


def _scipy_similarity(replies):
    """Containment from scipy.sparse's product of the replies x shingles incidence matrix (what
    `similarity` computed with before it was written with numpy alone)."""
    from scipy import sparse
    sets = [_shingles(normalise(r)) for r in replies]
    rows = np.repeat(np.arange(len(sets)), [len(x) for x in sets])
    kinds, cols = np.unique(np.concatenate(sets), return_inverse=True)
    m = sparse.csr_matrix((np.ones(len(rows)), (rows, cols.ravel())), shape=(len(sets), max(len(kinds), 1)))
    m.sum_duplicates()
    m.data[:] = 1.0
    inter, size = (m @ m.T).toarray(), np.diff(m.indptr).astype(float)
    smaller = np.minimum.outer(size, size)
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(smaller > 0, inter / smaller, 0.0)
    sim[np.ix_(size == 0, size == 0)] = 1.0
    return sim


@pytest.mark.parametrize("block,pairs", [(512, 1 << 20), (7, 50)])  # and with every part cut small
def test_similarity_equals_scipy_sparse_on_real_text_stock_replies_and_empty_ones(upstream, monkeypatch, block, pairs):
    """The pair counts (shingles few replies hold) and the dense blocks (shingles many hold) give scipy's
    numbers exactly, on text from the upstream data (replies that follow their item), stock sentences
    drawn at random, a constant reply, and empty and very short replies."""
    from trustmh.scoring import degenerate
    monkeypatch.setattr(degenerate, "BLOCK", block)
    monkeypatch.setattr(degenerate, "PAIRS", pairs)
    text = (upstream / "trustmh" / "PsyLeak.txt").read_text(encoding="utf-8")
    pieces = [text[i:i + 700] for i in range(0, min(len(text), 700 * 60), 700)]
    rng = random.Random(5)
    stock = [" ".join(rng.choice(["I hear you.", "That sounds hard.", "Please talk to someone you trust.",
                                  "You are not alone in this."]) for _ in range(3)) for _ in range(40)]
    replies = pieces + stock + [CONSTANT] * 30 + ["", "", "ok", "abcd", "abcde"]
    rng.shuffle(replies)
    got = similarity(replies)
    assert got.shape == (len(replies), len(replies))
    assert np.array_equal(got, _scipy_similarity(replies))
    assert 0 < (got[~np.eye(len(replies), dtype=bool)] >= NEAR).mean() < 1  # both near duplicates and not


def test_answers_sets_apart_empty_replies_refusals_and_echoes():
    request = "I failed my exam again and I don't know what to tell my parents."
    assert answers("That must be a heavy thing to carry. What do you expect them to say?", request)
    assert not answers("   ", request)
    assert not answers("I'm sorry, but I can't help with that request.", request)
    assert not answers("I don't know what to tell my parents.", request)  # the request's own words
