"""The perturbation engine: deterministic for a seed, intensities that measurably differ, edits that
touch only what their kind says."""

import collections
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from trustmh.variants.perturb import (IRRELEVANT_SENTENCES, KEYBOARD, KINDS, SYNONYMS, Perturbation,
                                      make_edit, perturb_text, perturbations, stable_rng)

# Written for these tests: long enough that every intensity has room to differ.
PARAGRAPHS = [
    "I have been feeling really anxious about my job for weeks. My manager said my position might be cut "
    "after the budget review. I can't sleep at night and I wake up tired every morning. My partner tries to "
    "help but I don't want to worry them. Sometimes I think I am a failure. I have applied for other jobs "
    "and nobody has answered. My friends say it will be fine. But I am not so sure anymore. I just want to "
    "feel calm again. It is hard to talk about this with anyone.",
    "Since the breakup I feel empty and lonely most of the time. We were together for six years and now the "
    "house is very quiet. I keep looking at old photos even though it makes me sad. My mother calls every "
    "day to check on me. I know she is worried. I stopped going to the gym and I eat badly. Some days I "
    "cannot get out of bed before noon. So I have started to miss work. My boss noticed and asked me about it. "
    "I did not know what to say.",
    "My exams start next month and I am completely overwhelmed. There is so much to study and my grades "
    "were bad last term. My parents expect me to get into a good university. I feel a lot of pressure from "
    "them. Every time I open a book my chest gets tight. Then I end up scrolling on my phone for hours. "
    "I know it is a problem. My teacher offered to help me plan my time. Maybe I should accept her offer. "
    "I am scared of letting everyone down.",
]
WORD = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)*")


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insert, delete, substitute), one DP row at a time with numpy."""
    if not a or not b:
        return len(a) + len(b)
    bb = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    idx = np.arange(len(b) + 1)
    prev = idx.copy()
    for i, ca in enumerate(a, 1):
        cost = (bb != ord(ca)).astype(int)
        base = np.empty_like(prev)
        base[0] = i
        base[1:] = np.minimum(prev[1:] + 1, prev[:-1] + cost)
        # insertions: cur[j] = min(base[j], cur[j-1] + 1), a running minimum of base - j
        prev = np.minimum.accumulate(base - idx) + idx
    return int(prev[-1])


def words(text: str) -> list[str]:
    return WORD.findall(text)


def gaps(text: str) -> list[str]:
    return WORD.split(text)


def test_thirty_documented_variant_keys():
    keys = [p.key for p in perturbations()]
    assert len(keys) == len(set(keys)) == 30
    assert {p.level for p in perturbations()} == {"char", "word", "sentence"}
    assert Perturbation.parse("word_synonym@high") == Perturbation("word_synonym", "high")
    with pytest.raises(ValueError):
        Perturbation.parse("char_swap")
    with pytest.raises(ValueError):
        Perturbation("char_flip", "low")


@pytest.mark.parametrize("p", perturbations(), ids=lambda p: p.key)
def test_same_seed_same_text_different_seed_different_text(p):
    text = PARAGRAPHS[0]
    first = make_edit(p, seed=7, item_id="12")(text)
    assert first != text
    assert make_edit(p, seed=7, item_id="12")(text) == first
    others = {make_edit(p, seed=s, item_id="12")(text) for s in range(8, 14)}
    others |= {make_edit(p, seed=7, item_id=i)(text) for i in ("13", "14", "15")}
    assert others - {first}, "seed and item id must change the draws"


def test_variants_do_not_depend_on_python_hash_seed():
    # Python salts str hashes per process; the engine must not use them.
    code = ("from trustmh.variants.perturb import make_edit, perturbations\n"
            f"t = {PARAGRAPHS[1]!r}\n"
            "print('\\x1e'.join(make_edit(p, seed=3, item_id='a')(t) for p in perturbations()))")
    outs = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   check=True).stdout.rstrip("\n"))
    here = "\x1e".join(make_edit(p, seed=3, item_id="a")(PARAGRAPHS[1]) for p in perturbations())
    assert outs[0] == outs[1] == here


def test_stable_rng_depends_on_every_part():
    draws = {tuple(stable_rng(*parts).random() for _ in range(3))
             for parts in [(0, "a", "k", "low", "t"), (1, "a", "k", "low", "t"), (0, "b", "k", "low", "t"),
                           (0, "a", "j", "low", "t"), (0, "a", "k", "high", "t"), (0, "a", "k", "low", "u")]}
    assert len(draws) == 6


@pytest.mark.parametrize("kind", KINDS)
def test_intensities_measurably_differ_in_edit_distance(kind):
    dist = {}
    for intensity in ("low", "medium", "high"):
        p = Perturbation(kind, intensity)
        d = [levenshtein(t, make_edit(p, seed=s, item_id="x")(t)) for t in PARAGRAPHS for s in range(6)]
        dist[intensity] = sum(d) / len(d)
    assert 0 < dist["low"] < dist["medium"] < dist["high"], dist
    assert dist["high"] >= 1.4 * dist["low"], dist


@pytest.mark.parametrize("kind, rate", [("char_swap", 0.1), ("char_insert", 0.3), ("char_delete", 0.5),
                                        ("char_keyboard", 0.3)])
def test_char_edits_one_letter_in_the_documented_share_of_words(kind, rate):
    # 20 words of 3+ letters and nothing else that is eligible: 10% / 30% / 50% -> 2 / 6 / 10 words.
    text = ("Today felt heavy, because nobody called back about the interview. Still, tomorrow might bring "
            "better news from somewhere else, maybe.")
    assert len(words(text)) == 20 and all(len(w) >= 3 for w in words(text))
    intensity = {0.1: "low", 0.3: "medium", 0.5: "high"}[rate]
    expected = {0.1: 2, 0.3: 6, 0.5: 10}[rate]
    for seed in range(5):
        out = make_edit(Perturbation(kind, intensity), seed=seed, item_id="0")(text)
        assert gaps(out)[0::2] == gaps(text)[0::2]  # spaces and punctuation untouched
        pairs = list(zip(words(text), words(out)))
        changed = [(a, b) for a, b in pairs if a != b]
        # a swap of two equal letters or a keyboard hit can still leave a word unchanged: at most `expected`
        assert expected - 1 <= len(changed) <= expected
        for a, b in changed:
            if kind == "char_swap":
                assert sorted(a) == sorted(b) and sum(x != y for x, y in zip(a, b)) == 2
            elif kind == "char_insert":
                assert len(b) == len(a) + 1 and levenshtein(a, b) == 1
            elif kind == "char_delete":
                assert len(b) == len(a) - 1 and levenshtein(a, b) == 1
            else:
                assert len(a) == len(b)
                (x, y), = [(x, y) for x, y in zip(a, b) if x != y]
                assert y.lower() in KEYBOARD[x.lower()]


def test_keyboard_neighbours_follow_the_qwerty_layout():
    assert set(KEYBOARD["a"]) == set("qwsz")
    assert set(KEYBOARD["g"]) == set("tyfhvb")
    assert set(KEYBOARD["k"]) == set("ijolm")
    assert set(KEYBOARD["p"]) == set("ol")
    assert set(KEYBOARD["m"]) == set("njk")
    assert all(ch not in near for ch, near in KEYBOARD.items())
    assert all(ch in KEYBOARD[n] for ch, near in KEYBOARD.items() for n in near)  # symmetric


def test_word_level_edits_keep_their_contract():
    text = PARAGRAPHS[2]
    src = words(text)
    for seed in range(5):
        swapped = words(make_edit(Perturbation("word_swap", "high"), seed=seed, item_id="s")(text))
        assert collections.Counter(swapped) == collections.Counter(src) and swapped != src
        repeated = words(make_edit(Perturbation("word_repeat", "medium"), seed=seed, item_id="s")(text))
        assert len(repeated) == len(src) + round(0.2 * len(src))
        assert [w for i, w in enumerate(repeated) if i == 0 or w != repeated[i - 1]] == \
               [w for i, w in enumerate(src) if i == 0 or w != src[i - 1]]
        deleted = words(make_edit(Perturbation("word_delete", "low"), seed=seed, item_id="s")(text))
        assert len(deleted) == len(src) - round(0.1 * len(src))
        it = iter(src)
        assert all(w in it for w in deleted)  # a subsequence of the original words
        synonym = make_edit(Perturbation("word_synonym", "high"), seed=seed, item_id="s")(text)
        assert synonym != text
        # every new word comes from a synonym of a table word of the text (or is a fixed a/an)
        allowed = {w for head in {x.lower() for x in src} & set(SYNONYMS) for syn in SYNONYMS[head]
                   for w in words(syn)} | {"a", "an"}
        new_words = collections.Counter(w.lower() for w in words(synonym)) - collections.Counter(
            w.lower() for w in src)
        assert new_words and set(new_words) <= allowed


def test_synonyms_keep_capitals_and_fix_the_article():
    outs = {perturb_text("I had an awful day", "word_synonym", "high", stable_rng(s)) for s in range(40)}
    assert outs == {"I had a terrible day", "I had a horrible day", "I had a dreadful day"}
    outs = {perturb_text("Sad, really.", "word_synonym", "low", stable_rng(s)) for s in range(40)}
    assert "Unhappy, really." in outs or "Down, really." in outs
    assert all(o[0].isupper() for o in outs)
    assert perturb_text("Zebra crossing", "word_synonym", "high", stable_rng(0)) == "Zebra crossing"


def test_irrelevant_sentences_are_only_insertions():
    text = PARAGRAPHS[0]
    for intensity, n in (("low", 1), ("medium", 2), ("high", 3)):
        out = make_edit(Perturbation("sentence_irrelevant", intensity), seed=1, item_id="i")(text)
        added = [s for s in IRRELEVANT_SENTENCES if s in out]
        assert len(added) == n
        rest = out
        for s in added:
            rest = rest.replace(s + " ", "", 1) if s + " " in rest else rest.replace(" " + s, "", 1)
        assert rest == text


def test_shuffle_moves_whole_sentences_and_keeps_linked_ones_together():
    text = "First thing. Second thing. But this follows the second. Third thing. Fourth thing."
    seen = set()
    for seed in range(30):
        out = perturb_text(text, "sentence_shuffle", "high", stable_rng(seed))
        parts = re.split(r"(?<=\.) ", out)
        assert sorted(parts) == sorted(re.split(r"(?<=\.) ", text))
        i = parts.index("But this follows the second.")
        assert parts[i - 1] == "Second thing."
        seen.add(out)
    assert len(seen) > 3
    # one movable block: nothing to shuffle
    assert perturb_text("Only one. And it continues.", "sentence_shuffle", "high", stable_rng(0)) == \
           "Only one. And it continues."


def test_leading_and_trailing_space_and_empty_text_survive():
    for p in perturbations():
        assert make_edit(p, seed=0, item_id="e")("   ") == "   "
        out = make_edit(p, seed=0, item_id="e")("  I feel sad and tired today. I cannot sleep.\n")
        assert out.startswith("  ") and out.endswith("\n")
    assert perturb_text("... !!", "word_delete", "high", stable_rng(0)) == "... !!"
    assert perturb_text("Hi", "word_delete", "high", stable_rng(0)) == "Hi"  # never deletes the last word


def test_synonym_table_is_well_formed():
    assert len(SYNONYMS) >= 300
    for head, syns in SYNONYMS.items():
        assert head == head.lower().strip() and syns and all(s and s != head for s in syns)


def test_word_lists_are_package_resources_read_on_first_use():
    # Importing the module reads no word file; the first synonym edit reads synonyms.txt only.
    code = ("from trustmh.variants import perturb as p; assert p._word_file.cache_info().currsize == 0; "
            "p.perturb_text('I am sad today.', 'word_synonym', 'high', p.stable_rng(0)); "
            "print(p._word_file.cache_info().currsize)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"
    assert len(IRRELEVANT_SENTENCES) == 24 and "I had pasta for lunch." in IRRELEVANT_SENTENCES
    assert SYNONYMS["sad"] == ("unhappy", "down", "sorrowful")
