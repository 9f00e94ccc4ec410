"""Faults the fake LLM server can inject instead of a normal reply, and a deterministic schedule of them.

The failure modes are those real providers show: error statuses with Retry-After, dropped connections,
stalls, broken JSON, empty / truncated / filtered completions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

FaultKind = Literal["status", "close", "stall", "malformed", "empty_choices", "length", "content_filter",
                    "redirect", "gzip_bomb", "endless_chunked", "bare_lf", "raw_deflate", "trickle", "bad_types",
                    "html_status"]
FAULT_KINDS: tuple[str, ...] = ("status", "close", "stall", "malformed", "empty_choices", "length", "content_filter")
# Hostile replies, kept apart so that FAULT_KINDS stays the list the fault campaign draws from.
HOSTILE_KINDS: tuple[str, ...] = ("redirect", "gzip_bomb", "endless_chunked", "bare_lf", "raw_deflate", "trickle",
                                  "bad_types", "html_status")


@dataclass(frozen=True)
class Fault:
    """What to do for one request instead of a normal reply.

    Frozen because one instance is typically shared by many requests (e.g. the
    ``kinds`` list given to :func:`fault_schedule`).
    """

    kind: FaultKind
    status: int = 500  # for kind="status" (500, 503, 429, 400, 401 ...)
    retry_after: float | None = None  # seconds; sent as Retry-After header when set
    stall_s: float = 30.0
    # Retry-After sent as an HTTP-date (now + retry_after) instead of seconds.
    retry_after_date: bool = False
    location: str = "http://127.0.0.1:1/v1/chat/completions"  # for kind="redirect"

    def __post_init__(self) -> None:
        # Literal is not enforced at runtime; a typo would otherwise silently
        # turn into a normal reply and make a fault test pass vacuously.
        if self.kind not in FAULT_KINDS + HOSTILE_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {FAULT_KINDS + HOSTILE_KINDS}")
        if self.kind in ("status", "html_status") and not 400 <= self.status <= 599:
            raise ValueError(f"fault status must be an HTTP error status (400-599), got {self.status}")


_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    # A stateless integer hash: the fault for request n depends only on (seed, n),
    # never on how many times the schedule was called or from which thread.
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def fault_schedule(seed: int, rate: float, kinds: list[Fault]) -> Callable[[int, dict], Fault | None]:
    """Return ``faults(n, body)`` that faults about ``rate`` of requests, chosen by index.

    Request ``n`` gets a fault iff a hash of (seed, n) falls below ``rate``; the
    fault is then one of ``kinds``, uniformly.  Same seed -> same schedule.
    Note: under client concurrency, *which* request arrives as index n depends on
    arrival order; the number and kinds of faults over N requests do not.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be in [0, 1], got {rate}")
    kinds = list(kinds)
    if rate > 0 and not kinds:
        raise ValueError("kinds must be non-empty when rate > 0")
    seed_h = _splitmix64(seed & _M64)
    n_kinds = len(kinds)

    def schedule(n: int, body: dict) -> Fault | None:
        u = (_splitmix64(seed_h ^ (n & _M64)) >> 11) * (1.0 / (1 << 53))  # uniform in [0, 1)
        if u >= rate:
            return None
        # Reuse u: conditioned on u < rate, u / rate is uniform in [0, 1).
        return kinds[min(int(u / rate * n_kinds), n_kinds - 1)]

    return schedule
