"""Long CPU work cut into slices for phase 1's event loop, without rewriting it as a generator.

Phase 2 scores a task on the event loop that feeds the requests, a few milliseconds at a time
(`Phase2.background`). One step could not be cut that way: a task's bootstrap, a single call that runs
its aggregation 1000 times (~0.35 s for a task without a batched form, such as the paper protocol of
crisis.identification); meanwhile every reply of every endpoint waited, and a run of several models
lost a second of the request path per task scored. `in_slices` runs such a call in a helper thread that
only ever runs while the generator waits for it, and stops at its next `pause()` once a slice is used
up: the two threads hand control to each other and never run at once, so there is no contention for
the GIL with the request path (a thread left to run freely would take it from the loop for 5 ms at
every system call the loop makes)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Generator, TypeVar

from .prepare import SLICE_S

R = TypeVar("R")


class _Stop(BaseException):
    """Raised inside the helper thread at its next pause when the generator is closed before the end."""


def in_slices(work: Callable[[Callable[[], None]], R], slice_s: float = SLICE_S) -> Generator[None, None, R]:
    """Run `work(pause)` to its end, yielding about every `slice_s` seconds (at the first `pause()` after
    that: call it often); its result is the generator's return value, its exception raised from it."""
    go, paused = threading.Event(), threading.Event()
    state: dict = {"deadline": 0.0, "stop": False, "done": False}

    def pause() -> None:
        if time.perf_counter() < state["deadline"]:
            return
        paused.set()
        go.wait()
        go.clear()
        if state["stop"]:
            raise _Stop
        state["deadline"] = time.perf_counter() + slice_s

    def body() -> None:
        go.wait()
        go.clear()
        state["deadline"] = time.perf_counter() + slice_s
        try:
            if not state["stop"]:
                state["value"] = work(pause)
        except _Stop:
            pass
        except BaseException as e:  # noqa: BLE001 - raised again by the generator, in the caller's thread
            state["error"] = e
        finally:
            state["done"] = True
            paused.set()

    helper = threading.Thread(target=body, name="trustmh-slice", daemon=True)
    helper.start()
    try:
        while True:
            go.set()
            paused.wait()
            paused.clear()
            if state["done"]:
                break
            yield
    finally:
        if not state["done"]:  # closed early: the helper unwinds at its next pause
            state["stop"] = True
            go.set()
        helper.join()
    if "error" in state:
        raise state["error"]
    return state["value"]
