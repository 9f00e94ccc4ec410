"""Shared, strict parsers for model and judge replies.

Each returns None when the reply does not contain an answer; callers turn None into an unscored
sample with a reason. Nothing here guesses a default value."""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any, Iterable

_MARKDOWN = re.compile(r"[*_#`]+")
_CODE_BLOCK = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def strip_markdown(text: str) -> str:
    return _MARKDOWN.sub("", text)


def after_last_answer_tag(text: str) -> str:
    """The text after the last 'Answer:' (case-insensitive), or the whole text when there is none."""
    idx = text.lower().rfind("answer:")
    return text[idx + len("answer:"):] if idx >= 0 else text


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in a reply: a fenced code block, the whole text, or the first {...} span."""
    candidates: list[str] = [m.group(1).strip() for m in _CODE_BLOCK.finditer(text)]
    candidates.append(text.strip())
    start = text.find("{")
    end = text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for cand in candidates:
        if not cand.startswith("{"):
            continue
        try:
            obj = json.loads(cand)
        except (ValueError, RecursionError):  # bad syntax, an integer over 4300 digits, deep nesting
            continue
        if isinstance(obj, dict):
            return obj
    return None


def extract_letter(text: str, letters: Iterable[str]) -> str | None:
    """An option letter from a multiple-choice reply.

    Accepts `{"choice": "C"}`/`{"answer": "C"}` JSON, `Answer: C`, `(C)`, `C.`/`C)` at a line start and a
    reply that is just the letter. A lone lower-case letter inside prose ("a patient") is never taken."""
    allowed = [x.upper() for x in letters]
    pat = "|".join(re.escape(x) for x in allowed)
    obj = extract_json_object(text)
    if obj is not None:
        for k in ("choice", "answer", "option", "answer_choice"):
            v = obj.get(k)
            if isinstance(v, str):
                m = re.match(rf"\s*\(?({pat})\b", v.strip().strip("\"'").upper())
                if m:
                    return m.group(1)
    clean = strip_markdown(text)
    # "Answer: C", "the answer is C", "the most ethical option would be C."
    tagged = re.findall(rf"(?:answer|choice|option)\s*(?:is|would be|should be|will be)?\s*[:\-]?\s*\(?({pat})\)?"
                        rf"(?![A-Za-z])", clean, flags=re.IGNORECASE)
    if tagged:
        # The last tagged letter is the final answer when the model revises itself.
        return tagged[-1].upper()
    stripped = clean.strip()
    m = re.fullmatch(rf"\(?({pat})\)?[.)]?", stripped)
    if m:
        return m.group(1)
    if len(set(re.findall(rf"(?m)^\s*\(?({pat})[.):]\s", clean + " "))) > 1:
        return None  # lines led by different letters: the options echoed (or several answers), not a choice
    m = re.match(rf"\s*\(?({pat})[.):]\s", clean + " ")
    if m:
        return m.group(1)
    m = re.search(rf"(?m)^\s*\(?({pat})[.)]\s", clean)
    if m:
        return m.group(1)
    return None


def parse_scale_rating(text: str, allowed: Iterable[int], phrases: dict[str, int]) -> int | None:
    """A rating on a labelled scale such as '4) very sensitive' or '-50) somewhat disagree'.

    Order of evidence: a number at the start of the answer; the first 'N)' in the answer; the earliest
    scale phrase (longest phrase wins at the same position); a lone allowed number. An answer whose lines
    start with three or more different scale points is the scale echoed back: None; so is a number whose
    own words name another point ("100) strongly disagree", as small models write)."""
    allowed = set(allowed)
    answer = strip_markdown(after_last_answer_tag(text)).strip()
    # At most 9 digits: no scale goes that far, and int() refuses numbers over 4300 digits outright.
    num = r"(?<![\d.])([-+−]?\d{1,9})(?!\d)"
    end = r"(?!\.?\d)"  # not part of a decimal like 2.5
    marked = {int(v.replace("−", "-")) for v in re.findall(rf"(?m)^\s*{num}{end}\s*[).:\-–]", answer)}
    if len(marked & allowed) >= 3:
        return None  # lines led by three or more scale points: the scale echoed, not a rating
    low = answer.lower()
    for pattern in (rf"^{num}{end}\s*(?:[).:\-–]|$)", rf"{num}\s*\)"):
        for m in re.finditer(pattern, answer):
            v = int(m.group(1).replace("−", "-"))
            if v in allowed:
                # "100) strongly disagree": the number and the scale's words for it disagree, no rating
                words = _first_phrase(low[m.end():].split("\n", 1)[0], phrases)
                return v if words is None or words == v else None
    words = _first_phrase(low, phrases)
    return words if words is not None else _lone_number(answer, allowed)


def _first_phrase(low: str, phrases: dict[str, int]) -> int | None:
    """The value of the earliest scale phrase in `low` (the longest one at the same position)."""
    best: tuple[int, int, int] | None = None  # (position, -length, value)
    for phrase, value in phrases.items():
        pos = re.search(rf"\b{re.escape(phrase)}\b", low)
        if pos:
            cand = (pos.start(), -len(phrase), value)
            best = cand if best is None or cand < best else best
    return best[2] if best is not None else None


def _lone_number(answer: str, allowed: set[int]) -> int | None:
    """The one allowed number the answer holds (several different ones: None)."""
    values = [int(x.replace("−", "-")) for x in re.findall(r"(?<![\d.])([-+−]?\d{1,9})(?!\d)(?!\.?\d)", answer)]
    values = [v for v in values if v in allowed]
    if len(set(values)) == 1:
        return values[0]
    return None


def parse_yes_no(text: str) -> str | None:
    """'yes' or 'no' from a yes/no reply: the first standalone yes/no word, ignoring markdown and quotes;
    None when that word is negated ("not yes")."""
    clean = strip_markdown(after_last_answer_tag(text)).lower()
    m = re.search(r"\b(?:(not|never|n't)\s+)?(yes|no)\b", clean.replace("n't ", " n't "))
    if not m or m.group(1):
        return None  # "not yes" is no answer either way: a negated yes/no is never read as itself
    return m.group(2)


def parse_int_scores(obj: dict[str, Any] | None, keys: Iterable[str], lo: float, hi: float
                     ) -> tuple[dict[str, float], dict[str, str]]:
    """Numbers for `keys` from a parsed JSON judge reply, each within [lo, hi]; reasons for the rest."""
    values: dict[str, float] = {}
    reasons: dict[str, str] = {}
    for k in keys:
        if obj is None:
            reasons[k] = "judge reply has no JSON object"
            continue
        if k not in obj:
            reasons[k] = f"judge reply lacks '{k}'"
            continue
        if isinstance(obj[k], bool):  # JSON true/false: float() would read them as 1 and 0
            reasons[k] = f"judge value for '{k}' is not a number"
            continue
        try:
            v = float(obj[k])
        except (TypeError, ValueError):
            reasons[k] = f"judge value for '{k}' is not a number"
            continue
        except OverflowError:  # a JSON integer too large for a float is out of any range
            v = math.inf
        if not lo <= v <= hi:
            reasons[k] = f"judge value for '{k}' out of range {lo:g}-{hi:g}"
            continue
        values[k] = v
    return values, reasons


_LABEL_KEYS = ("label", "answer", "category", "level", "classification", "prediction")
_JSON_KEY = re.compile(r'"[^"\n]{1,80}"\s*:')
_LABEL_TAG = re.compile(r"\b(?:answer|label|classification|category|level|prediction)\s*[:：]", re.IGNORECASE)


_MARKDOWN_MARKS = re.compile(r"[*#`]+")
_SEPARATORS = re.compile(r"[\s_\-/]+")


def _norm_label(text: str) -> str:
    # '_', '-', '/' and spaces are interchangeable in label names ("self-harm", "suicidal_ideation").
    # Separators first: strip_markdown would delete the underscore inside "suicidal_ideation".
    return " " + _SEPARATORS.sub(" ", _MARKDOWN_MARKS.sub("", text.lower())).strip() + " "


@functools.lru_cache(maxsize=64)
def _phrase_patterns(vocab: tuple[tuple[str, str], ...]) -> tuple[tuple[re.Pattern, str], ...]:
    """Each phrase of a vocabulary as a whole-word pattern over `_norm_label` text, compiled once: a task
    scores thousands of replies against the same few phrases."""
    return tuple((re.compile(rf"(?<![a-z0-9]){re.escape(_norm_label(phrase).strip())}(?![a-z0-9])"), label)
                 for phrase, label in vocab)


def _labels_named(text: str, vocab: dict[str, str]) -> set[str]:
    """Canonical labels whose phrases occur in `text` as whole words; a longer phrase hides the shorter
    ones inside it ("no crisis" does not also count as "crisis")."""
    norm = _norm_label(text)
    spans = []
    for pattern, label in _phrase_patterns(tuple(vocab.items())):
        for m in pattern.finditer(norm):
            spans.append((m.start(), -(m.end() - m.start()), m.end(), label))
    found, end = set(), -1
    for start, _neg_len, stop, label in sorted(spans):
        if start >= end:
            found.add(label)
            end = stop
    return found


def extract_label(text: str, vocab: dict[str, str]) -> str | None:
    """A class label from a classification reply. `vocab` maps phrases (case, '_', '-' and spaces do not
    matter) to canonical labels.

    Order of evidence: the label field of a JSON object; the first line after the last 'Answer:'/'Label:'
    tag; otherwise the whole reply, less its JSON keys. Each must name exactly one label: a reply naming two different labels
    in the same place is ambiguous and gives None, as does a JSON label outside the vocabulary."""
    obj = extract_json_object(text)
    if obj is not None:
        for k in _LABEL_KEYS:
            v = obj.get(k)
            if isinstance(v, str):
                found = _labels_named(v, vocab)
                return found.pop() if len(found) == 1 else None
    tags = list(_LABEL_TAG.finditer(text))
    if tags:
        rest = text[tags[-1].end():].strip()
        line = rest.split("\n", 1)[0] if rest else ""
        found = _labels_named(line, vocab)
        if found:
            return found.pop() if len(found) == 1 else None
    # A label that is only a JSON key ('"suicidal_ideation": {', the categories written out) is not chosen.
    found = _labels_named(_JSON_KEY.sub(" ", text), vocab)
    return found.pop() if len(found) == 1 else None
