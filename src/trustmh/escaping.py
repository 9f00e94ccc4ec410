"""One escaping layer for every text trustmh shows but did not write: model names, labels, groups, judge
specs, criteria and task ids from runs, files and flags, on the terminal, in CSV and Markdown, and in
HTML. What a person sees is that text, made visible, never something that acts on the reader:

* `printable`: the C0 controls but tab and newline, DEL, the C1 controls and the bidirectional
  overrides, embeddings, isolates and marks become escapes (`\\x1b`, `\\u202e`). Raw, they drive the
  reader's terminal (ESC sequences, CR overwrites, BEL) or make a line read other than it is (a name that
  shows as "gpt-4" while it sorts and gates as another). Every other layer starts with it.
* `csv_cell`: a text cell that a spreadsheet would read as a formula (OWASP's rule: a first character
  = + - @, tab or carriage return, here also after leading spaces) gets a leading apostrophe; numbers
  are written as numbers.
* `markdown_cell`: one line, with Markdown's own characters escaped (a `|` no longer adds a column, a
  `[x](javascript:…)` no longer links).
* Terminal output goes through cli/_base's consoles, which apply `printable` to every string they
  render and never read rich markup or emoji codes in one: `[/x]` and `:cat:` in a name are text.
* report.html: the page's template applies `printable` to every value it renders, and the names the page's
  script shows come from JSON made `printable` (report/html.py)."""

from __future__ import annotations

import csv
import io
import re
from typing import Any, Iterable

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|&])")  # what could make a name a link, emphasis, HTML or a new cell


def printable(text: str) -> str:
    """`text` with its control characters shown as escapes (\\x1b, \\u202e), never sent anywhere raw."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)


def styled(*parts: str | tuple[str, str]):
    """A rich Text from plain strings and (string, style) pairs, each made printable: how a table cell or
    line is coloured without rich markup, which would read a bracket in a name as a tag."""
    from rich.text import Text
    return Text.assemble(*((printable(p[0]), p[1]) if isinstance(p, tuple) else printable(p) for p in parts))


def csv_cell(value: Any) -> Any:
    """A CSV cell: text made printable, and neutralised when a spreadsheet would run it as a formula;
    anything else (numbers, None) as it is."""
    if not isinstance(value, str):
        return value
    text = printable(value)
    return "'" + text if text.startswith(_FORMULA) or text.lstrip(" ").startswith(_FORMULA) else text


def csv_text(fieldnames: list[str], records: Iterable[dict[str, Any]]) -> str:
    """Records as CSV text (a header row, then one row a record: the fields named, others left out), every
    cell through `csv_cell`."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fieldnames, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    w.writerows({k: csv_cell(v) for k, v in r.items()} for r in records)
    return buf.getvalue()


def markdown_cell(text: str) -> str:
    """Text for a Markdown table cell or heading: printable, on one line, Markdown's characters escaped."""
    return _MARKDOWN.sub(r"\\\1", " ".join(printable(str(text)).split()))
