"""What the engine tells its caller while it works. The engine prints nothing: it hands these events to a
callback, and the CLI renders them with rich (library users may log them, or ignore them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union


@dataclass
class PhaseStarted:
    """A bar begins: `phase` is "generate", "judge" or "score"; `total` None while still unknown."""

    phase: str
    label: str
    total: int | None


@dataclass
class PhaseProgress:
    phase: str
    label: str
    done: int
    total: int | None
    errors: int = 0
    rate: float | None = None  # per second, since the phase started


@dataclass
class PhaseDone:
    phase: str
    label: str


@dataclass
class Notice:
    """Something the user should read now (a long back-off, judgements made with another rubric...)."""

    text: str


@dataclass
class RunTotals:
    """Printed once at the end: what the run cost."""

    requests: dict[str, int] = field(default_factory=dict)  # calls made per model spec (and "judge")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    scoring_seconds: float = 0.0


Event = Union[PhaseStarted, PhaseProgress, PhaseDone, Notice, RunTotals]
EventSink = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The default sink: a library call stays silent."""
