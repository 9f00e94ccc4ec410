"""Work done beside phase 1 on its event loop, a slice of a few milliseconds at a time: the one scheduler
of the run's background jobs (`Recorder.background` stores samples, `Phase2.background` scores tasks).

`beside` is the loop both run: a job's `step(deadline)` works until the deadline, and the loop's I/O
runs between steps, so requests keep flowing; a job that has caught up waits for its event instead of
polling. `advance` runs a generator (a task's scoring, a sample a step) until a deadline.

One step could not be cut that way: a task's bootstrap, a single call that runs its aggregation 1000
times (~0.35 s for a task without a batched form, such as the paper protocol of crisis.identification);
meanwhile every reply of every endpoint waited, and a run of several models lost a second of the request
path per task scored. `in_slices` turns such a call into a generator: it runs in a helper thread that
only ever runs while the generator waits for it, and stops at its next `pause()` once a slice is used
up: the two threads hand control to each other and never run at once, so there is no contention for
the GIL with the request path (a thread left to run freely would take it from the loop for 5 ms at
every system call the loop makes). One thread runs at a time throughout: no job needs a lock."""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from typing import Callable, Generator, TypeVar

SLICE_S = 0.005  # work done beside phase 1 on its event loop gives the loop back this often

R = TypeVar("R")


async def beside(step: Callable[[float], bool | None], wake: asyncio.Event) -> None:
    """Run a background job on the event loop until it is done (or cancelled): `step(deadline)` works
    until about `deadline` and says what comes next. True: more is ready, the next slice follows the
    loop's I/O and what it set going (`_after_the_others`); False: caught up, wait until `wake` is set
    (by whoever gives the job more work); None: finished."""
    while True:
        wake.clear()  # before the step: work given during it sets the event again, and is not missed
        more = step(time.perf_counter() + SLICE_S)
        if more is None:
            return
        if more:
            await _after_the_others(time.perf_counter() + SLICE_S)
        else:
            await wake.wait()


async def _after_the_others(until: float) -> None:
    """Give the loop back until the callbacks it has ready are run, or `until`. One pass is not enough: a
    reply takes three or four (read, its caller woken, the group commit, the next request sent), and a
    slice before each held every reply of a wave ~15 ms; the job waits for them instead, up to one slice's
    time, so that under a loop that is never idle it still gets half of it. The ready callbacks are the
    loop's `_ready` queue (asyncio's own loops; a loop without one gets one pass, as before). Jobs waiting
    here hold one ready callback each, which is not work to wait for: two jobs would otherwise wait on
    each other, passing the loop back and forth with nothing to do until `until`."""
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    if ready is None:
        return
    _waiting[loop] = _waiting.get(loop, 0) + 1
    try:
        while len(ready) > _waiting[loop] - 1 and time.perf_counter() < until:
            await asyncio.sleep(0)
    finally:
        _waiting[loop] -= 1


_waiting: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int]" = weakref.WeakKeyDictionary()


def advance(steps: Generator[None, None, R], deadline: float) -> tuple[bool, R | None]:
    """Run `steps` until `deadline`: (True, its return value) once it has finished, else (False, None)."""
    try:
        while time.perf_counter() < deadline:
            next(steps)
    except StopIteration as done:
        return True, done.value
    return False, None


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
