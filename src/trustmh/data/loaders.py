"""Readers for the upstream file formats and their quirks.

Every failure is a DataError naming `file:line` so a user sees where a file is broken, never a traceback."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from pathlib import Path
from typing import Any, Iterator

from ..errors import DataError
from ..redaction import scrub

# EthicMH was saved through a GBK round trip: UTF-8 punctuation became these CJK sequences. Mapping
# them back restores the original text (see MANIFEST §1b).
ETHICMH_REPAIRS = {
    "鈥檚": "’s",
    "鈥檛": "’t",
    "鈥榯": "‘t",
    "鈥攇": "—g",
    "鈥攎": "—m",
}


def excerpt(value: Any, limit: int = 40) -> str:
    """File content quoted in an error message: without any API key in the environment, then cut to
    `limit` characters, in that order so no part of a key is left at the cut. A data file may be
    anything, /proc/self/environ included, and error messages are printed and logged."""
    text = scrub(value if isinstance(value, str) else repr(value))
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB chunks (data files and run outputs can be large)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def read_user_text(path: Path, what: str, max_bytes: int) -> str:
    """A small text file the user names on the command line (a gate config, a system prompt): a regular
    file (a FIFO would block, /dev/zero never end), at most `max_bytes`, UTF-8. Every problem is a
    UserError naming the file."""
    import os
    import stat
    from ..errors import UserError
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a folder with its own error
        os.close(fd)
        raise UserError(f"{path}: the {what} must be a regular file")
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(max_bytes + 1)
    if len(raw) > max_bytes:
        size = f"{max_bytes >> 20} MiB" if max_bytes >= 1 << 20 else f"{max_bytes:,} bytes"
        raise UserError(f"{path}: {what} larger than {size}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not valid UTF-8 text (byte {e.start})") from None


MAX_DEPTH = 32  # tables and arrays inside each other in a file a user writes; deeper is a crafted file
MAX_KEY_PARTS = 32  # parts of one dotted key or table header (tomllib's cost grows with their square)
# a dotted key of more than MAX_KEY_PARTS parts, bare or quoted, anywhere in the text
_LONG_KEY = re.compile(r"""(?:[A-Za-z0-9_-]+|"[^"\n]{0,300}"|'[^'\n]{0,300}')"""
                       r"""(?:[ \t]*\.[ \t]*(?:[A-Za-z0-9_-]+|"[^"\n]{0,300}"|'[^'\n]{0,300}')){%d}""" % MAX_KEY_PARTS)


def read_user_toml(path: Path, what: str, max_bytes: int) -> dict[str, Any]:
    """A TOML file the user names (--prices, --models, a gate config), read by `read_user_text` and parsed
    with bounded effort: a dotted key or header of more than MAX_KEY_PARTS parts, or tables and arrays
    nested more than MAX_DEPTH deep, is refused before it is used (tomllib recurses without a limit of its
    own and takes quadratic time over a key's parts). Every problem is a UserError naming the file."""
    import tomllib
    from ..errors import UserError
    text = read_user_text(path, what, max_bytes)
    if _LONG_KEY.search(text):
        raise UserError(f"{path}: {what} has a dotted key of more than {MAX_KEY_PARTS} parts")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML ({str(e).splitlines()[0][:200]})") from None
    except RecursionError:
        raise UserError(f"{path}: not valid TOML (nested too deeply)") from None
    if nested_deeper_than(doc, MAX_DEPTH):
        raise UserError(f"{path}: {what} nested more than {MAX_DEPTH} deep")
    return doc


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` holds dicts and lists more than `limit` deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return True
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        stack.extend((x, depth + 1) for x in children if isinstance(x, (dict, list)))
    return False


def read_text(path: Path, *, encoding: str = "utf-8") -> str:
    if not path.is_file():
        raise DataError(path, "file not found")
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError(path, "file is empty", 1)
    if raw.startswith(b"\xef\xbb\xbf"):  # JailbreakMH.csv starts with a UTF-8 byte-order mark
        raw = raw[3:]
    try:
        # Universal newlines, as Python's open() would give the paper's code (PsyLeak uses CRLF).
        return raw.decode(encoding).replace("\r\n", "\n")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(path, f"not valid {encoding} text (byte {e.start})", line) from None


def read_lines(path: Path) -> list[str]:
    """Non-empty lines, without the final newline (label files lack one; both forms are accepted)."""
    text = read_text(path)
    return [ln.rstrip("\r") for ln in text.split("\n") if ln.strip()]


def unescape_newlines(line: str) -> str:
    """ConfAIde tier files store line breaks inside a prompt as the two characters backslash-n."""
    return line.replace("\\n", "\n")


def read_floats(path: Path) -> list[float]:
    out = []
    for i, ln in enumerate(read_text(path).split("\n"), 1):
        if not ln.strip():
            continue
        try:
            value = float(ln)
        except ValueError:
            raise DataError(path, f"expected a number, got {excerpt(ln.strip())}", i) from None
        if not math.isfinite(value):  # float() takes 'nan' and 'inf'; neither is a rating
            raise DataError(path, f"expected a finite number, got {excerpt(ln.strip())}", i)
        out.append(value)
    return out


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, ln in enumerate(read_text(path).split("\n"), 1):
        if not ln.strip():
            continue
        try:
            obj = json.loads(ln)
        except json.JSONDecodeError as e:
            raise DataError(path, f"invalid JSON ({e.msg})", i) from None
        except (ValueError, RecursionError) as e:  # valid JSON syntax, but a number or nesting too large
            raise DataError(path, f"unreadable JSON ({_why(e)})", i) from None
        if not isinstance(obj, dict):
            raise DataError(path, "expected a JSON object", i)
        yield i, obj


def read_json(path: Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, f"invalid JSON ({e.msg})", e.lineno) from None
    except (ValueError, RecursionError) as e:
        raise DataError(path, f"unreadable JSON ({_why(e)})") from None


def _why(e: Exception) -> str:
    """What Python's json module refuses beyond syntax: integers over 4300 digits, deep nesting."""
    return "nested too deeply" if isinstance(e, RecursionError) else str(e).split(":")[0]


def read_csv(path: Path, required: list[str], *, text: str | None = None) -> list[tuple[int, dict[str, str]]]:
    """Rows with their 1-based line number of the row start; checks the header has `required`."""
    text = read_text(path) if text is None else text
    # strict: a quote left open (a file cut short inside a quoted field) is an error, not one huge cell
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    try:
        header = reader.fieldnames or []
    except csv.Error as e:  # the header row itself is malformed (e.g. a cell over the field size limit)
        raise DataError(path, f"malformed CSV header ({e})", 1) from None
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(path, f"missing column(s) {', '.join(missing)}; header is {excerpt(header, 200)}", 1)
    rows = []
    # line_num counts lines read so far: a row (or a row that fails to parse) starts on the next one.
    start = reader.line_num + 1
    try:
        for row in reader:
            if None in row:  # more cells than header columns
                raise DataError(path, "row has more cells than the header", start)
            rows.append((start, row))
            start = reader.line_num + 1
    except csv.Error as e:
        raise DataError(path, f"malformed CSV ({e})", start) from None
    return rows


def read_ethicmh_text(path: Path, *, upstream: bool = False) -> str:
    """EthicMH is not valid UTF-8. By default: decode with replacement and repair the mojibake.
    With `upstream`, decode as gb18030 the way the paper's loader did, so prompts match byte for byte."""
    if not path.is_file():
        raise DataError(path, "file not found")
    raw = path.read_bytes()
    if upstream:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("gb18030", errors="replace")
    text = raw.decode("utf-8", errors="replace")
    for bad, good in ETHICMH_REPAIRS.items():
        text = text.replace(bad, good)
    # 17 places lost the last byte of a 3-byte punctuation mark (now U+FFFD + '?'). In context they are
    # plural possessives ("parents’ wishes"), a closing quote after a full stop, or an em dash.
    text = re.sub(r"(?<=s)\ufffd\?", "’ ", text)
    text = re.sub(r"(?<=\.)\ufffd\?", "” ", text)
    return text.replace("\ufffd?", "—")
