"""Recorded responses: one JSON object per line, {"task", "item_id", "variant"?, "response"}.

Used to re-score the paper's recorded outputs, to test offline, and as a recorded judge (the judge
reply for a sample is looked up by the same key)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Iterable

from ..errors import DataError, UserError
from ..types import ModelError, Request, Response
from .base import Model


class ReplayModel(Model):
    cacheable = False
    remote = False
    answers_by_body = False  # a recording: the reply is the sample's
    answers_by_id = True  # the run checks the file's task and item ids (check_ids) before any request

    def __init__(self, spec: str, path: str):
        super().__init__(spec)
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"replay file not found: {self.path}")
        # (task, item_id, variant) -> (response, line number)
        self.records: dict[tuple[str, str, str], tuple[str, int]] = {}
        # Bytes, decoded line by line, so a decoding error names its line (a text-mode read decodes ahead).
        with self.path.open("rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(self.path, f"not valid UTF-8 (byte {e.start} of the line)", lineno) from None
                if line.strip():
                    self._add(line, lineno)

    def _add(self, line: str, lineno: int) -> None:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(self.path, f"invalid JSON ({e.msg})", lineno) from None
        except (ValueError, RecursionError):  # an integer over 4300 digits, or nesting too deep
            raise DataError(self.path, "unreadable JSON (a number or nesting too large)", lineno) from None
        if not isinstance(rec, dict):
            raise DataError(self.path, "expected a JSON object", lineno)
        for field in ("task", "item_id", "response"):
            if field not in rec:
                raise DataError(self.path, f"missing field '{field}'", lineno)
        if not isinstance(rec["task"], str):
            raise DataError(self.path, "'task' must be a string", lineno)
        if not isinstance(rec["item_id"], (str, int)) or isinstance(rec["item_id"], bool):
            raise DataError(self.path, "'item_id' must be a string or integer", lineno)
        if not isinstance(rec["response"], str):
            raise DataError(self.path, "'response' must be a string", lineno)
        variant = rec.get("variant") or ""
        if not isinstance(variant, str):
            raise DataError(self.path, "'variant' must be a string", lineno)
        key = (rec["task"], str(rec["item_id"]), variant)
        if key in self.records:
            raise DataError(self.path, f"duplicate record for {key[0]} item {key[1]!r} "
                                       f"(first at line {self.records[key][1]})", lineno)
        self.records[key] = (rec["response"], lineno)

    def check_ids(self, known: dict[str, set[str]], registered: Iterable[str]) -> None:
        """Fail on the first record (by line) whose task id no registered or selected task has (a typo would
        leave its task unanswered: `not_recorded`), or, for a selected task, whose item id does not exist
        in that task's data. Records for `registered` tasks (the caller's task ids: a backend does not read
        the task registry) not selected in this run are fine."""
        tasks = set(registered) | set(known)
        for (task, item_id, _variant), (_resp, lineno) in self.records.items():
            if task not in tasks:
                close = difflib.get_close_matches(task, sorted(tasks), n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise DataError(self.path, f"unknown task id {task[:80]!r}{hint}", lineno)
            if task in known and item_id not in known[task]:
                raise DataError(self.path, f"unknown item id {item_id!r} for task {task}", lineno)

    async def generate(self, request: Request) -> Response:
        hit = self.records.get((request.task, request.item_id, request.variant))
        if hit is None:
            raise ModelError("not_recorded", "no recorded response")
        return Response(text=hit[0], finish_reason="stop", latency_s=0.0)
