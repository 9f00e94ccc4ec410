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
    estimated: bool = False  # as PhaseProgress.estimated


@dataclass
class PhaseProgress:
    """Where a bar stands. Labels are unique per bar (a judge's bar names the tested model it judges for),
    so several models' bars of one phase can be added up."""

    phase: str
    label: str
    done: int
    total: int | None
    errors: int = 0
    rate: float | None = None  # per second, since the phase started
    estimated: bool = False  # `total` counts samples not built yet at the mean of those built (converges)


@dataclass
class TaskProgress:
    """One task of one tested model during phase 1: samples with a reply (`done`) of `total`, API errors,
    judge calls that failed; `finished` once every call it needs is stored."""

    model: str
    task: str
    done: int
    total: int
    errors: int = 0
    judge_failed: int = 0
    finished: bool = False
    turns: int | None = None  # a conversation task: the turns (messages) stored so far, of all its conversations


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


Event = Union[PhaseStarted, PhaseProgress, PhaseDone, TaskProgress, Notice, RunTotals]
EventSink = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The default sink: a library call stays silent."""
