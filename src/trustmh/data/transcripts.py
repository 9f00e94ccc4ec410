"""Conversation transcripts: trustmh's own record of a conversation, and VERA-MH's text files read into it.

A conversation is stored (and shown, and judged) as trustmh's record, one JSON object:
`{"format": FORMAT, "turns": [{"role": "user"|"chatbot", "text": str, "error": str?}, ...], "ended": why,
"vera_text": str?}`. `ended` says why it stopped: `turns` (the --turns limit), `stop_phrase` (the simulated
person said it was done), `signal` (a VERA-MH file's own end line), `error` (an API error ended it) or
`recorded` (read from a file that does not say). `vera_text` keeps a VERA-MH file's bytes as they were, so
that VERA-MH's judge, which reads the file whole, is shown exactly that text.

VERA-MH's files (its `conversations/` folders; MANIFEST.md of ../shared/data/external/vera-mh) are
`<6 hex>_<Name>_<model>_run<k>.txt`, each message `user: ...` or `agent: ...` (`chatbot: ...` at the
pinned commit), messages separated by one empty line, and a message may hold empty lines itself: they are
split where an empty line is followed by a speaker label. A file that stopped early ends with
`[CONVERSATION ENDED - <speaker> signaled termination]`.

trustmh's transcript files are JSON lines, one conversation each:
`{"persona": "Lena", "run": 1, "turns": [{"role": "user", "text": "..."}, ...]}`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import DataError

FORMAT = "trustmh-conversation/1"
ROLES = ("user", "chatbot")
MAX_FILE_BYTES = 4 << 20  # the longest concept-paper transcript is 97 KB
MAX_FILES = 10_000
MAX_TURNS = 1000

VERA_NAME = re.compile(r"(?P<tag>[0-9a-f]{6})_(?P<name>[^_\s]+)_(?P<model>.+)_run(?P<run>\d{1,4})\.txt")
_VERA_SPLIT = re.compile(r"\n\n(?=(?:user|agent|chatbot): )")
_VERA_MESSAGE = re.compile(r"(user|agent|chatbot): ?(.*)", re.S)
_VERA_END = re.compile(r"\n\[CONVERSATION ENDED - [^\n\]]*signaled termination\]\s*\Z")


@dataclass(frozen=True)
class Recorded:
    """One transcript read from a file: whose (persona name, run number) and the record."""

    persona: str
    run: int
    record: dict[str, Any]
    where: str  # "file" or "file:line", for messages


def record(turns: list[dict[str, Any]], ended: str, **extra: Any) -> dict[str, Any]:
    return {"format": FORMAT, "turns": turns, "ended": ended, **extra}


def dumps(rec: dict[str, Any]) -> str:
    return json.dumps(rec, ensure_ascii=False, separators=(",", ":"))


def loads(text: str) -> dict[str, Any] | None:
    """A stored conversation record, or None when `text` is not one (a reply stored by something else)."""
    try:
        rec = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT or not isinstance(rec.get("turns"), list):
        return None
    for t in rec["turns"]:
        if not isinstance(t, dict) or t.get("role") not in ROLES or not isinstance(t.get("text"), str):
            return None
    return rec


def parse_vera(text: str, where: str = "") -> dict[str, Any]:
    """A VERA-MH transcript's text as a record (its text kept whole in `vera_text`)."""
    body = text[:-1] if text.endswith("\n") else text
    ended = "recorded"
    end = _VERA_END.search(body)
    if end is not None:
        body, ended = body[:end.start()], "signal"
    turns = []
    for n, block in enumerate(_VERA_SPLIT.split(body) if body else [], 1):
        m = _VERA_MESSAGE.fullmatch(block)
        if m is None:
            raise DataError(where or "transcript", f"message {n} does not start with 'user:', 'agent:' or 'chatbot:'")
        turns.append({"role": "user" if m[1] == "user" else "chatbot", "text": m[2]})
    if not turns:
        raise DataError(where or "transcript", "no messages")
    if len(turns) > MAX_TURNS:
        raise DataError(where or "transcript", f"{len(turns)} messages (at most {MAX_TURNS})")
    return record(turns, ended, vera_text=text)


def _read(path: Path) -> str:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise DataError(path, f"larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(path, f"not valid UTF-8 (byte {e.start})") from None


def read_vera_folder(folder: Path) -> Iterator[Recorded]:
    """Every VERA-MH transcript under `folder` (its run folders too), in path order. A `.txt` file whose name
    does not follow VERA-MH's pattern is an error: it would otherwise be silently left out."""
    files = sorted(p for p in folder.rglob("*.txt") if p.is_file() and not p.is_symlink())
    if not files:
        raise DataError(folder, "no VERA-MH transcripts (<tag>_<Name>_<model>_run<k>.txt) in this folder")
    if len(files) > MAX_FILES:
        raise DataError(folder, f"{len(files)} transcripts (at most {MAX_FILES})")
    for path in files:
        m = VERA_NAME.fullmatch(path.name)
        if m is None:
            raise DataError(path, "not a VERA-MH transcript name (<6 hex>_<Name>_<model>_run<k>.txt)")
        yield Recorded(m["name"], int(m["run"]), parse_vera(_read(path), str(path)), str(path))


def read_jsonl(path: Path) -> Iterator[Recorded]:
    """trustmh's transcript file: one conversation a line (see the module's docstring)."""
    text = _read(path)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise DataError(path, f"invalid JSON ({getattr(e, 'msg', 'too deep')})", lineno) from None
        if not isinstance(obj, dict):
            raise DataError(path, "expected a JSON object", lineno)
        persona, run, turns = obj.get("persona"), obj.get("run"), obj.get("turns")
        if not isinstance(persona, str) or not persona.strip():
            raise DataError(path, "'persona' must be a persona's name", lineno)
        if not isinstance(run, int) or isinstance(run, bool) or not 1 <= run <= 9999:
            raise DataError(path, "'run' must be a whole number from 1", lineno)
        if not isinstance(turns, list) or not turns or len(turns) > MAX_TURNS:
            raise DataError(path, f"'turns' must be a list of 1 to {MAX_TURNS} messages", lineno)
        out = []
        for n, t in enumerate(turns, 1):
            if not isinstance(t, dict) or t.get("role") not in ROLES or not isinstance(t.get("text"), str):
                raise DataError(path, f"turn {n}: expected {{\"role\": \"user\" or \"chatbot\", \"text\": ...}}", lineno)
            out.append({"role": t["role"], "text": t["text"]})
        yield Recorded(persona.strip(), run, record(out, "recorded"), where)


def read_transcripts(path: Path) -> Iterator[Recorded]:
    """A folder of VERA-MH transcripts, or a trustmh `.jsonl` transcript file."""
    if path.is_dir():
        return read_vera_folder(path)
    if path.is_file():
        return read_jsonl(path)
    raise DataError(path, "no such file or folder")
