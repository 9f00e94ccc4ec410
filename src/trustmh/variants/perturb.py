"""Seeded text perturbations for the robustness pillar: character, word and sentence level, three intensities.

Why not nlpaug: it was evaluated (1.1.11, the current release). Its character augmenters run offline, but
(1) they draw from the process-global `random`/`numpy.random` state (seeded only through
`Randomness.seed`, which reseeds the whole process), so a variant would depend on what ran before it;
(2) they re-tokenise on every non-word character and join tokens back with spaces, so "I'm fine." comes
back as "I ' m fine." - text the person never wrote, outside the intended edit; (3) importing it needs
pandas. Its synonym augmenter needs NLTK's WordNet, which cannot be downloaded here. What the benchmark
needs is small, so it is written here: every operation draws from its own `random.Random`, seeded by a
stable hash of (run seed, item id, kind, intensity, text) - never Python's salted `hash()` - and leaves
every character it does not edit exactly as it was. Synonyms come from a small project-authored table of
words common in mental-health conversations (`words/synonyms.txt`) instead of WordNet.

Kinds (variant key `<kind>@<intensity>`, e.g. `char_swap@low`):

* character level, applied to words of 3+ letters, one edit per chosen word: `char_swap` (two adjacent
  letters exchanged), `char_insert` (a random letter added), `char_delete` (a letter removed),
  `char_keyboard` (a letter replaced by a neighbouring key on a QWERTY keyboard). Intensity = share of
  eligible words edited: low 10%, medium 30%, high 50%.
* word level: `word_synonym` (a word replaced by a synonym from the table; "a"/"an" before it is fixed),
  `word_delete`, `word_repeat` (a word doubled), `word_swap` (two neighbouring words exchanged). Intensity
  = share of words edited: low 10%, medium 20%, high 40%. Synonym replacement can only touch words in the
  table, so on some texts it edits fewer words than that.
* sentence level: `sentence_irrelevant` (neutral unrelated sentences inserted at random sentence
  boundaries: low 1, medium 2, high 3) and `sentence_shuffle` (the sentences of a random window of
  neighbouring ones are put in a new order; the window covers low 10%, medium 50%, high 100% of the
  sentences, at least two). Shuffling keeps a sentence
  that opens with a linking word ("But", "So", "Because", ...) attached to the one before it, since
  moving it would change what it refers to; a text with a single movable block is left unchanged.

Intensities apply to each piece of text a task hands to the edit (a chat turn, a post, one message of
a list). Every count is at least 1 when the piece has anything eligible, so short pieces (a one-line chat
turn) are still perturbed; the intensities then differ only on longer ones."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
import string
from dataclasses import dataclass
from importlib import resources
from typing import Callable

KINDS = ("char_swap", "char_insert", "char_delete", "char_keyboard",
         "word_synonym", "word_delete", "word_repeat", "word_swap",
         "sentence_irrelevant", "sentence_shuffle")
INTENSITIES = ("low", "medium", "high")

CHAR_RATE = {"low": 0.1, "medium": 0.3, "high": 0.5}
WORD_RATE = {"low": 0.1, "medium": 0.2, "high": 0.4}
IRRELEVANT_COUNT = {"low": 1, "medium": 2, "high": 3}
SHUFFLE_WINDOW = {"low": 0.1, "medium": 0.5, "high": 1.0}


@dataclass(frozen=True)
class Perturbation:
    kind: str
    intensity: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.intensity not in INTENSITIES:
            raise ValueError(f"unknown perturbation {self.kind}@{self.intensity}")

    @property
    def key(self) -> str:
        return f"{self.kind}@{self.intensity}"

    @property
    def level(self) -> str:
        return self.kind.split("_", 1)[0]  # char, word or sentence

    @classmethod
    def parse(cls, key: str) -> "Perturbation":
        kind, sep, intensity = key.partition("@")
        if not sep:
            raise ValueError(f"not a perturbation key: {key!r} (expected kind@intensity)")
        return cls(kind, intensity)


# --- word lists (project-authored package resources in words/, read on first use) ------------------

@functools.cache
def _word_file(name: str) -> tuple[str, ...]:
    """Non-blank, non-comment lines of words/<name>."""
    text = resources.files(__package__).joinpath("words", name).read_text(encoding="utf-8")
    return tuple(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))


@functools.cache
def synonyms() -> dict[str, tuple[str, ...]]:
    """head word -> its synonyms, from lines `word: synonym, synonym, ...`."""
    table = {}
    for line in _word_file("synonyms.txt"):
        head, sep, rest = line.partition(":")
        if not sep:
            raise ValueError(f"variants/words/synonyms.txt: no ':' in {line!r}")
        table[head.strip()] = tuple(w.strip() for w in rest.split(","))
    return table


def irrelevant_sentences() -> tuple[str, ...]:
    return _word_file("irrelevant_sentences.txt")


@functools.cache
def _linking() -> frozenset[str]:
    return frozenset(_word_file("linking_words.txt"))


def __getattr__(name: str):
    # The lists as module constants too (the tests and older callers read them so), still loaded lazily.
    if name == "SYNONYMS":
        return synonyms()
    if name == "IRRELEVANT_SENTENCES":
        return irrelevant_sentences()
    raise AttributeError(name)


def perturbations(kinds: tuple[str, ...] = KINDS, intensities: tuple[str, ...] = INTENSITIES) -> list[Perturbation]:
    return [Perturbation(k, i) for k in kinds for i in intensities]


def stable_rng(*parts: object) -> random.Random:
    """A generator seeded from a sha256 of the parts, so the same inputs give the same draws in any process."""
    blob = json.dumps(parts, ensure_ascii=False, separators=(",", ":"), default=str)
    return random.Random(int.from_bytes(hashlib.sha256(blob.encode("utf-8")).digest()[:8], "big"))


def make_edit(p: Perturbation, *, seed: int, item_id: str) -> Callable[[str], str]:
    """The edit a task's `perturb(item, edit)` applies to each piece of the person's text.

    The text itself is part of the seed, so each turn of a dialogue gets its own draws and the result does
    not depend on the order in which a task edits its pieces."""
    def edit(text: str) -> str:
        return perturb_text(text, p.kind, p.intensity, stable_rng("trustmh.perturb", seed, item_id, p.kind,
                                                                  p.intensity, text))
    return edit


def perturb_text(text: str, kind: str, intensity: str, rng: random.Random) -> str:
    Perturbation(kind, intensity)  # validates
    if not text.strip():
        return text
    if kind.startswith("char_"):
        return _char_level(text, kind, CHAR_RATE[intensity], rng)
    if kind.startswith("word_"):
        return _word_level(text, kind, WORD_RATE[intensity], rng)
    if kind == "sentence_irrelevant":
        return _insert_irrelevant(text, IRRELEVANT_COUNT[intensity], rng)
    return _shuffle_sentences(text, SHUFFLE_WINDOW[intensity], rng)


def _how_many(rate: float, total: int) -> int:
    return 0 if total == 0 else max(1, int(rate * total + 0.5))


# --------------------------------------------------------------------------------------------------
# words: re.split with a capturing group gives [gap, word, gap, word, ..., gap]: words at odd indices

_WORD = re.compile(r"([A-Za-z]+(?:['’][A-Za-z]+)*)")


def _case_like(model: str, word: str) -> str:
    if len(model) > 1 and model.isupper():
        return word.upper()
    if model[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


# --- character level --------------------------------------------------------------------------------

_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


def _keyboard_neighbours() -> dict[str, str]:
    # Staggered rows: a key touches its row neighbours, keys i and i+1 of the row above, i-1 and i below.
    out = {}
    for r, row in enumerate(_ROWS):
        for i, ch in enumerate(row):
            near = [row[j] for j in (i - 1, i + 1) if 0 <= j < len(row)]
            if r > 0:
                near += [_ROWS[r - 1][j] for j in (i, i + 1) if j < len(_ROWS[r - 1])]
            if r < len(_ROWS) - 1:
                near += [_ROWS[r + 1][j] for j in (i - 1, i) if 0 <= j < len(_ROWS[r + 1])]
            out[ch] = "".join(sorted(near))
    return out


KEYBOARD = _keyboard_neighbours()


def _char_edit(word: str, kind: str, rng: random.Random) -> str:
    if kind == "char_swap":
        spots = [i for i in range(len(word) - 1) if word[i] != word[i + 1]]
        if not spots:
            return word
        i = rng.choice(spots)
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == "char_insert":
        i = rng.randrange(len(word) + 1)
        ch = rng.choice(string.ascii_lowercase)
        return word[:i] + (ch.upper() if word.isupper() else ch) + word[i:]
    if kind == "char_delete":
        i = rng.randrange(len(word))
        return word[:i] + word[i + 1:]
    i = rng.randrange(len(word))  # char_keyboard
    ch = rng.choice(KEYBOARD[word[i].lower()])
    return word[:i] + (ch.upper() if word[i].isupper() else ch) + word[i + 1:]


def _char_level(text: str, kind: str, rate: float, rng: random.Random) -> str:
    parts = _WORD.split(text)
    eligible = [i for i in range(1, len(parts), 2) if len(parts[i]) >= 3 and parts[i].isascii()
                and parts[i].isalpha()]
    for i in sorted(rng.sample(eligible, _how_many(rate, len(eligible)))):
        parts[i] = _char_edit(parts[i], kind, rng)
    return "".join(parts)


# --- word level -----------------------------------------------------------------------------------

def _word_level(text: str, kind: str, rate: float, rng: random.Random) -> str:
    parts = _WORD.split(text)
    words = list(range(1, len(parts), 2))
    n = _how_many(rate, len(words))
    if kind == "word_synonym":
        table = synonyms()
        eligible = [i for i in words if parts[i].lower() in table]
        for i in sorted(rng.sample(eligible, min(n, len(eligible)))):
            new = _case_like(parts[i], rng.choice(table[parts[i].lower()]))
            parts[i] = new
            if i >= 3 and parts[i - 2].lower() in ("a", "an") and parts[i - 1].isspace():
                article = "an" if new[0].lower() in "aeiou" else "a"
                parts[i - 2] = _case_like(parts[i - 2], article)
    elif kind == "word_delete":
        # Keep at least one word: an empty message is a different test, not a perturbation.
        for i in sorted(rng.sample(words, max(0, min(n, len(words) - 1))), reverse=True):
            parts[i] = ""
            if parts[i + 1][:1].isspace():
                parts[i + 1] = parts[i + 1][1:]
            elif parts[i - 1][-1:].isspace():
                parts[i - 1] = parts[i - 1][:-1]
    elif kind == "word_repeat":
        for i in rng.sample(words, n):
            parts[i] = f"{parts[i]} {parts[i]}"
    else:  # word_swap: neighbours separated by spaces only
        pairs = [i for i in words[:-1] if parts[i + 1].isspace()]
        rng.shuffle(pairs)
        used: set[int] = set()
        done = 0
        for i in pairs:
            if done == n:
                break
            if i in used or i + 2 in used:
                continue
            parts[i], parts[i + 2] = parts[i + 2], parts[i]
            used.update((i, i + 2))
            done += 1
    return "".join(parts)


# --- sentence level -------------------------------------------------------------------------------

# A sentence ends at . ! ? or an ellipsis followed by whitespace, or at a line break.
_SENTENCE_GAP = re.compile(r"((?<=[.!?…])\s+|\s*\n\s*)")


def _split_sentences(text: str) -> tuple[str, list[str], list[str], str]:
    """(leading space, sentences, the gaps between them, trailing space)."""
    core = text.strip()
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()):]
    pieces = _SENTENCE_GAP.split(core) if core else []
    return lead, pieces[0::2], pieces[1::2], trail


def _insert_irrelevant(text: str, count: int, rng: random.Random) -> str:
    lead, sents, gaps, trail = _split_sentences(text)
    # A text written one sentence per line gets its new sentences on lines of their own.
    joint = "\n" if gaps and all("\n" in g for g in gaps) else " "
    for extra in rng.sample(irrelevant_sentences(), count):
        j = rng.randrange(len(sents) + 1)
        sents.insert(j, extra)
        gaps.insert(min(j, len(gaps)), joint)
    body = "".join(s + g for s, g in zip(sents, gaps + [""]))
    return lead + body + trail


def _shuffle_sentences(text: str, rate: float, rng: random.Random) -> str:
    lead, sents, gaps, trail = _split_sentences(text)
    blocks: list[list[int]] = []
    for i, s in enumerate(sents):
        first = _WORD.search(s)
        if blocks and first is not None and first.start() == 0 and first.group(1).lower() in _linking():
            blocks[-1].append(i)
        else:
            blocks.append([i])
    if len(blocks) < 2:
        return text
    texts = ["".join(sents[i] + (gaps[i] if i != b[-1] else "") for i in b) for b in blocks]
    outer = [gaps[b[-1]] for b in blocks[:-1]]  # gaps between blocks stay where they are
    # A window of neighbouring blocks is put in a new order (never the old one).
    width = min(len(blocks), max(2, math.ceil(rate * len(blocks))))
    start = rng.randrange(len(blocks) - width + 1)
    order = list(range(width))
    while order == sorted(order):
        rng.shuffle(order)
    texts[start:start + width] = [texts[start + i] for i in order]
    return lead + "".join(t + g for t, g in zip(texts, outer + [""])) + trail
