"""The perturbations of the paper's predecessor code, for `--protocol paper` of robustness.support and
robustness.diagnosis (PAPER_PROTOCOL.md §2; `PW/Robustness/{ESConv,SWMH}/src/perturbation.py`).

Only the *rules* are here, rewritten from reading the original functions (apply_character_perturbation,
apply_word_perturbation, apply_sentence_perturbation, apply_perturbation, perturb_samples,
save_perturbed_data). The *tables* they use (rates per intensity, trigger probabilities, look-alike and
homoglyph maps, stop words, misspellings, contractions, filler words, irrelevant sentences) are not: the
task reads them from the authors' file at run time (tasks/robustness/paper.py) and passes them in as
`Tables`. The short word lists that sit inside the original functions (suffixes, passive and negation
markers, punctuation marks) are part of those rules and are written below.

Randomness. The original draws from the module-global `random` and is unseeded by default. Here every
draw goes to the `random.Random` the caller passes, one per item and intensity, in the order the original
functions make their draws, so a sample's perturbation is fixed by its seed alone (see
`perturbation_seed`).

Behaviour kept as the original has it, flaws included (PAPER_PROTOCOL.md §2 robustness.support):
* type `all` is cumulative: character stage on every piece, then word stage on every piece, then the
  sentence stage on the whole list;
* the sentence stage changes meaning: every piece is repeated, irrelevant sentences are added after each,
  a passive marker is deleted as a *substring* (the "is" inside "this" goes too) or a "by" is inserted, a
  negation is removed or added, every piece is cut to 75% + "..." whenever the list has more than two
  pieces, punctuation is removed and inserted at fixed places;
* speaker prefixes ("Seeker: ") are text like any other and can be perturbed."""

from __future__ import annotations

import hashlib
import random
import re
import string
from dataclasses import dataclass
from typing import Any

TYPES = ("character", "word", "sentence", "all")
CHAR_EDITS = ("deletion", "insertion", "replacement", "swap", "case_change", "homoglyph", "repetition")
WORD_RATES = ("word_deletion", "word_insertion", "word_replacement", "spelling_errors", "morphological_changes",
              "abbreviation", "stopword_removal")
SENTENCE_RATES = ("sentence_repetition", "sentence_insertion", "voice_conversion", "negation_perturbation",
                  "punctuation_perturbation")

# Lists written inside the original functions (not module tables).
_SUFFIXES = ("ing", "ed", "er", "est", "ly", "s", "es")  # tried in this order; the first that fits goes
_PASSIVE = ("by", "was", "were", "is", "are", "been", "being")
_NEGATIONS = ("not", "no", "never", "nothing", "nobody", "nowhere", "none", "neither", "nor")
_MARKS = (".", ",", "!", "?", ";", ":", "-", "'", '"')
_SENTENCE_END = r"[.!?。！？]+"
_LETTERS_DIGITS = string.ascii_letters + string.digits


@dataclass(frozen=True, eq=False)
class Tables:
    """The module tables of one perturbation.py, as read from the file (the task checks their shape)."""

    intensity: dict[str, dict[str, dict[str, Any]]]  # PERTURBATION_INTENSITY[level][stage][rule]
    trigger: dict[str, float]  # CHAR_METHOD_TRIGGER_PROB[level]
    homoglyph: dict[str, str]  # HOMOGLYPH_MAP
    similar: dict[str, str]  # SIMILAR_CHAR_MAP
    stop_words: frozenset[str]  # STOP_WORDS
    spelling: dict[str, str]  # SPELLING_ERRORS
    abbreviations: dict[str, str]  # ABBREVIATIONS, in the file's order (it is walked in order)
    insert_words: tuple[str, ...]  # INSERT_WORDS
    irrelevant: tuple[str, ...]  # IRRELEVANT_SENTENCES


def perturbation_seed(run_seed: int, task_id: str, item_id: str, key: str) -> int:
    """The seed of one item's perturbation at one intensity: the first 8 bytes (big-endian) of
    sha256("<run seed>|<task id>|<item id>|<type>@<intensity>"). Stable across processes and machines
    (never Python's salted hash()); every other item and intensity draws independently."""
    digest = hashlib.sha256(f"{run_seed}|{task_id}|{item_id}|{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def perturb_pieces(pieces: list[str], level: str, kind: str, tables: Tables, rng: random.Random) -> list[str]:
    """apply_perturbation on a list (the formatted turns of a dialogue, or a post's inputs list): the
    stages `kind` names, in order, at intensity `level` (low, medium or high)."""
    if kind not in TYPES:
        raise ValueError(f"unknown perturbation type {kind!r}")
    out = list(pieces)
    if kind in ("character", "all"):
        out = [character_stage(str(p), level, tables, rng) for p in out]
    if kind in ("word", "all"):
        out = [word_stage(p, level, tables, rng) for p in out]
    if kind in ("sentence", "all"):
        out = sentence_stage(out, level, tables, rng)
    return out


def csv_round_trip(perturbed: list[str], text: str) -> str | None:
    """What SWMH's robustness run asks about after save_perturbed_data and load_dataset: only the first
    piece is written (the clean text when that piece is empty), and it is read back stripped; a row whose
    text is then empty is dropped (None). Every other piece the sentence stage made is lost."""
    first = str(perturbed[0]) if perturbed and perturbed[0] else text
    return first.strip() or None


# --- character stage ---------------------------------------------------------------------------------

def character_stage(text: str, level: str, tables: Tables, rng: random.Random) -> str:
    """Seven edits in a fixed order; each runs only when a draw falls under the level's trigger
    probability, and then acts on each character at its own rate."""
    if not text:
        return text
    rates, fire = tables.intensity[level]["character"], tables.trigger[level]
    for name, edit in zip(CHAR_EDITS, (_delete_chars, _insert_chars, _lookalike_chars, _swap_chars, _flip_case,
                                       _homoglyphs, _repeat_chars)):
        if rng.random() < fire:
            text = edit(text, rates[name], tables, rng)
    return text


def _delete_chars(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    if not text or rate <= 0:
        return text
    kept = "".join(c for c in text if rng.random() >= rate)
    return kept or text  # never deletes everything


def _insert_chars(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    if not text or rate <= 0:
        return text
    out = []
    for c in text:
        out.append(c)
        if rng.random() < rate:
            out.append(rng.choice(_LETTERS_DIGITS))
    return "".join(out)


def _lookalike_chars(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    """A chosen character becomes its SIMILAR_CHAR_MAP look-alike; a letter not in the map a random ASCII
    letter; anything else stays."""
    if not text or rate <= 0:
        return text
    out = []
    for c in text:
        if rng.random() >= rate:
            out.append(c)
        elif c in tables.similar:
            out.append(tables.similar[c])
        else:
            out.append(rng.choice(string.ascii_letters) if c.isalpha() else c)
    return "".join(out)


def _swap_chars(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    """Left to right over neighbouring positions, each pair exchanged at `rate` (a character moved right
    can be moved again by the next pair)."""
    if not text or rate <= 0 or len(text) < 2:
        return text
    chars = list(text)
    for i in range(len(chars) - 1):
        if rng.random() < rate:
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
    return "".join(chars)


def _flip_case(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    if not text or rate <= 0:
        return text
    return "".join(c.swapcase() if c.isalpha() and rng.random() < rate else c for c in text)


def _homoglyphs(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    if not text or rate <= 0:
        return text
    return "".join(tables.homoglyph[c] if c in tables.homoglyph and rng.random() < rate else c for c in text)


def _repeat_chars(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    """After a chosen character, 1 to 3 more copies of it (the original checks no rate here)."""
    if not text:
        return text
    out = []
    for c in text:
        out.append(c)
        if rng.random() < rate:
            out.append(c * rng.randint(1, 3))
    return "".join(out)


# --- word stage --------------------------------------------------------------------------------------

def _chance(p: float, rng: random.Random) -> bool:
    """True with probability p; no draw at all when p <= 0 or p >= 1."""
    if p <= 0:
        return False
    return True if p >= 1 else rng.random() < p


def word_stage(text: str, level: str, tables: Tables, rng: random.Random) -> str:
    """Eight edits, always all of them, in this order. Words are whitespace-split pieces, joined back by
    single spaces (so line breaks and runs of spaces inside a piece become one space)."""
    if not text:
        return text
    r = tables.intensity[level]["word"]
    text = _delete_words(text, r["word_deletion"], rng)
    text = _insert_words(text, r["word_insertion"], tables, rng)
    text = _random_words(text, r["word_replacement"], rng)
    text = _jitter_order(text, rng)
    text = _misspell(text, r["spelling_errors"], tables, rng)
    text = _chop_suffix(text, r["morphological_changes"], rng)
    text = _contractions(text, r["abbreviation"], tables, rng)
    return _delete_stop_words(text, r["stopword_removal"], tables, rng)


def _delete_words(text: str, rate: float, rng: random.Random) -> str:
    if not text or rate <= 0 or not text.split():
        return text
    kept = [w for w in text.split() if not _chance(rate, rng)]
    return " ".join(kept) if kept else text


def _insert_words(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    if not text or rate <= 0 or not text.split():
        return text
    out = []
    for w in text.split():
        out.append(w)
        if _chance(rate, rng):
            out.append(rng.choice(tables.insert_words))
    return " ".join(out)


def _random_words(text: str, rate: float, rng: random.Random) -> str:
    """A chosen word of 3+ letters (letters only) becomes random lower-case letters of the same length;
    the draw is made for every word, eligible or not."""
    if not text or rate <= 0 or not text.split():
        return text
    out = []
    for w in text.split():
        if _chance(rate, rng) and w.isalpha() and len(w) > 2:
            w = "".join(rng.choices(string.ascii_lowercase, k=len(w)))
        out.append(w)
    return " ".join(out)


def _jitter_order(text: str, rng: random.Random) -> str:
    """Local reordering: word i is sorted by i + uniform(0, 3), so a word moves at most a few places."""
    words = text.split() if text else []
    if len(words) < 2:
        return text
    keys = [i + rng.uniform(0, 3) for i in range(len(words))]
    return " ".join(words[i] for i in sorted(range(len(words)), key=keys.__getitem__))


def _misspell(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    if not text or rate <= 0 or not text.split():
        return text
    out = []
    for w in text.split():
        if w.lower() in tables.spelling and _chance(rate, rng):
            wrong = tables.spelling[w.lower()]
            w = wrong.capitalize() if w[0].isupper() else wrong
        out.append(w)
    return " ".join(out)


def _chop_suffix(text: str, rate: float, rng: random.Random) -> str:
    """A chosen word of 5+ letters (letters only) loses the first suffix of _SUFFIXES it ends with, if at
    least two letters remain."""
    if not text or rate <= 0 or not text.split():
        return text
    out = []
    for w in text.split():
        if _chance(rate, rng) and w.isalpha() and len(w) > 4:
            suffix = next((s for s in _SUFFIXES if w.lower().endswith(s) and len(w) > len(s) + 1), None)
            if suffix is not None:
                w = w[:-len(suffix)]
        out.append(w)
    return " ".join(out)


def _contractions(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    """Walk the contraction table in order, expanding every occurrence (as a substring, anywhere) of a
    contraction found; then walk it again, contracting every expansion found. One draw per entry found."""
    if not text or rate <= 0:
        return text
    for short, long in tables.abbreviations.items():
        if short in text and _chance(rate, rng):
            text = text.replace(short, long)
    for short, long in tables.abbreviations.items():
        if long in text and _chance(rate, rng):
            text = text.replace(long, short)
    return text


def _delete_stop_words(text: str, rate: float, tables: Tables, rng: random.Random) -> str:
    if not text or rate <= 0 or not text.split():
        return text
    kept = [w for w in text.split() if w.lower() not in tables.stop_words or not _chance(rate, rng)]
    return " ".join(kept) if kept else text


# --- sentence stage ----------------------------------------------------------------------------------

def sentence_stage(pieces: list[str], level: str, tables: Tables, rng: random.Random) -> list[str]:
    """Seven edits of the list of pieces, in this order."""
    if not pieces:
        return pieces
    r = tables.intensity[level]["sentence"]
    out = _repeat_pieces(list(pieces), r["sentence_repetition"])
    out = [_swap_sentences(p, rng) for p in out]
    out = _add_irrelevant(out, r["sentence_insertion"], tables, rng)
    out = _voice(out, r["voice_conversion"])
    out = _negation(out, r["negation_perturbation"], rng)
    if len(out) > 2:
        out = [p[:int(len(p) * 0.75)] + "..." if len(p) > 4 else p for p in out]
    return _punctuation(out, r["punctuation_perturbation"])


def _repeat_pieces(pieces: list[str], repetition: int) -> list[str]:
    """Each piece followed by `repetition + 1` copies of itself."""
    return [p for piece in pieces for p in [piece] * (repetition + 2)]


def _swap_sentences(piece: str, rng: random.Random) -> str:
    """Split a piece after runs of sentence-ending marks; walking left to right, each neighbouring pair
    is exchanged with probability 1/2 (an exchanged pair is skipped). Pieces with fewer than two sentences
    are left as they were; otherwise whitespace-only fragments between sentences are dropped."""
    if not piece or not piece.strip():
        return piece
    parts = [p for p in re.split(f"({_SENTENCE_END})", piece) if p]
    if len(parts) < 3:
        return piece
    sentences, i = [], 0
    while i < len(parts):
        if i + 1 < len(parts) and re.match(_SENTENCE_END, parts[i + 1]):
            sentences.append(parts[i] + parts[i + 1])
            i += 2
        else:
            if parts[i].strip():
                sentences.append(parts[i])
            i += 1
    if len(sentences) < 2:
        return piece
    i = 0
    while i < len(sentences) - 1:
        if rng.random() < 0.5:
            sentences[i], sentences[i + 1] = sentences[i + 1], sentences[i]
            i += 2
        else:
            i += 1
    return "".join(sentences)


def _add_irrelevant(pieces: list[str], rate: float, tables: Tables, rng: random.Random) -> list[str]:
    """After every piece, int(rate * 10) (at least 1) sentences drawn from IRRELEVANT_SENTENCES."""
    if not pieces or rate <= 0:
        return pieces
    count = max(1, int(rate * 10))
    out = []
    for p in pieces:
        out.append(p)
        out.extend(rng.choice(tables.irrelevant) for _ in range(count))
    return out


def _voice(pieces: list[str], rate: float) -> list[str]:
    """A piece containing a passive marker anywhere (as a substring, any case) loses every occurrence of
    the first such marker, spaces then collapsed; a piece without one of 3+ words gets "by" before its
    second-to-last word."""
    if not pieces or rate <= 0:
        return pieces
    out = []
    for p in pieces:
        words = p.split()
        found = next((m for m in _PASSIVE if m in p.lower()), None) if words else None
        if found is not None:
            p = " ".join(re.sub(re.escape(found), "", p, flags=re.IGNORECASE).split())
        elif len(words) > 2:
            words.insert(max(1, len(words) - 2), "by")
            p = " ".join(words)
        out.append(p)
    return out


def _negation(pieces: list[str], rate: float, rng: random.Random) -> list[str]:
    """A piece containing a negation word as a substring loses that word wherever it stands alone (the
    first in _NEGATIONS's order; spaces collapsed); any other piece gets a random one after its first
    word (drawn even for an empty piece)."""
    if not pieces or rate <= 0:
        return pieces
    out = []
    for p in pieces:
        found = next((n for n in _NEGATIONS if n in p.lower()), None)
        if found is not None:
            p = " ".join(re.sub(r"\b" + re.escape(found) + r"\b", "", p, flags=re.IGNORECASE).split())
        else:
            word, words = rng.choice(_NEGATIONS), p.split()
            if words:
                words.insert(min(1, len(words) - 1), word)
                p = " ".join(words)
        out.append(p)
    return out


def _punctuation(pieces: list[str], rate: float) -> list[str]:
    """n = int(rate * 5) (at least 1): the first n marks removed, taken in _MARKS's order; then n marks
    inserted at evenly spaced positions, cycling through _MARKS. No randomness."""
    if not pieces or rate <= 0:
        return pieces
    n = max(1, int(rate * 5))
    out = []
    for p in pieces:
        removed = 0
        for mark in _MARKS:
            while mark in p and removed < n:
                p = p.replace(mark, "", 1)
                removed += 1
            if removed >= n:
                break
        if p:
            for i in range(n):
                at = int(len(p) * (i + 1) / (n + 1))
                if at < len(p):
                    p = p[:at] + _MARKS[i % len(_MARKS)] + p[at:]
        out.append(p)
    return out
