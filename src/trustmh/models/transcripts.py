"""Recorded conversations as a model: `transcripts/<path>` answers each crisis.conversation sample with a
conversation read from a file, so a conversation held elsewhere is judged without calling any model.

`<path>` is a folder of VERA-MH transcripts (one run folder: one tested model) or a trustmh transcript
file (.jsonl); data/transcripts.py reads both. A transcript answers the sample of its persona and run
(`Lena`, `run3`); a sample without one is `not_recorded`, an error of that sample, and a transcript whose
persona the run does not have stops the run before any call (`check_ids`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..data import transcripts
from ..errors import DataError, UserError
from ..types import ModelError, Request, Response
from .base import Model

TASK = "crisis.conversation"


class TranscriptsModel(Model):
    cacheable = False
    remote = False
    answers_by_body = False  # a recording: the reply is the sample's
    answers_by_id = True

    def __init__(self, spec: str, path: str):
        super().__init__(spec)
        self.path = Path(path).expanduser()
        if not self.path.exists():
            raise UserError(f"transcripts not found: {self.path}")
        self.records: dict[tuple[str, str, str], tuple[str, str]] = {}  # (task, persona, run) -> (record, where)
        for rec in transcripts.read_transcripts(self.path):
            key = (TASK, rec.persona, f"run{rec.run}")
            if key in self.records:
                raise DataError(rec.where, f"a second transcript for {rec.persona} run {rec.run} (the first: "
                                           f"{self.records[key][1]}); give one run folder per tested model")
            self.records[key] = (transcripts.dumps(rec.record), rec.where)

    def check_ids(self, known: dict[str, set[str]], registered: Iterable[str]) -> None:
        """Every transcript's persona must be one of the run's (a typo would leave it unjudged)."""
        if TASK not in known:
            return
        for (_task, persona, _run), (_rec, where) in self.records.items():
            if persona not in known[TASK]:
                raise DataError(where, f"persona {persona!r} is not among the run's personas "
                                       f"({', '.join(sorted(known[TASK]))}); --personas selects them")

    async def generate(self, request: Request) -> Response:
        hit = self.records.get((request.task, request.item_id, request.variant))
        if hit is None:
            raise ModelError("not_recorded", "no recorded conversation for this persona and run")
        return Response(text=hit[0], finish_reason="stop", latency_s=0.0)
