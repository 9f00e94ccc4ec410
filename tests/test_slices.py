"""engine._slices: the background jobs' scheduler (`beside`, `advance`) and `in_slices`, a long call cut
into slices for the event loop, by pauses, in order."""

import asyncio
import threading
import time

import pytest

from trustmh.engine._slices import SLICE_S, advance, beside, in_slices


def _drive(gen):
    steps = 0
    while True:
        try:
            next(gen)
            steps += 1
        except StopIteration as done:
            return steps, done.value


def test_each_pause_past_its_slice_hands_control_back():
    log = []

    def work(pause):
        for k in range(3):
            log.append(f"work{k}")
            pause()
        return "result"

    gen = in_slices(work, slice_s=0.0)  # every pause is past its slice
    assert next(gen) is None and log == ["work0"]  # the caller runs again only once the work pauses
    log.append("caller")
    steps, value = _drive(gen)
    assert (steps, value) == (2, "result") and log == ["work0", "caller", "work1", "work2"]
    # with a long slice the pauses return at once: one go, no yield
    assert _drive(in_slices(work, slice_s=60.0)) == (0, "result")


def test_an_error_is_raised_from_the_generator():
    def work(pause):
        pause()
        raise ValueError("inside")
    gen = in_slices(work, slice_s=0.0)
    next(gen)
    with pytest.raises(ValueError, match="inside"):
        next(gen)


def test_closing_early_stops_the_helper_thread():
    reached = []

    def work(pause):
        for k in range(100):
            reached.append(k)
            pause()
    before = threading.active_count()
    gen = in_slices(work, slice_s=0.0)
    next(gen)
    next(gen)
    gen.close()
    assert reached == [0, 1] and threading.active_count() == before


def test_beside_gives_the_loop_back_between_slices_and_waits_when_caught_up():
    """A job that has more runs again only after the loop's other work has had a turn; one that has caught
    up is not called again (no polling) until its event is set, and ends when its step says finished."""
    log, work, calls = [], ["a", "b"], []

    async def main():
        wake = asyncio.Event()

        def step(deadline):
            calls.append(len(log))
            if not work:
                return None if "more" in log else False
            log.append(work.pop(0))
            return True

        async def other():
            log.append("loop")  # the job's first slice gave the loop back: this runs before "b"
            await asyncio.sleep(0.02)  # the job has caught up meanwhile and waits, uncalled
            log.append("more")
            wake.set()

        await asyncio.gather(beside(step, wake), other())

    asyncio.run(main())
    assert log == ["a", "loop", "b", "more"]
    assert calls == [0, 2, 3, 4]  # a, b, caught up (False), then finished (None) once woken


def test_a_reply_that_takes_several_passes_is_not_cut_by_slices(monkeypatch):
    """A reply takes several passes of the loop (read, its caller woken, the group commit, the next request
    sent): the job's next slice waits until the loop has run what the reply set going, not one pass only
    (a slice before each pass held every reply of a wave ~15 ms)."""
    from trustmh.engine import _slices
    monkeypatch.setattr(_slices, "SLICE_S", 0.5)  # the wait's bound, out of reach of a busy machine's pauses
    log = []

    async def main():
        wake = asyncio.Event()
        slices = iter(range(3))

        def step(deadline):
            n = next(slices, None)
            if n is None:
                return None
            log.append(f"slice {n}")
            return True

        async def reply():
            await asyncio.sleep(0)  # arrives while the first slice runs
            for part in ("read", "woken", "committed", "sent"):
                log.append(part)
                await asyncio.sleep(0)

        await asyncio.gather(beside(step, wake), reply())

    asyncio.run(main())
    assert log == ["slice 0", "read", "woken", "committed", "sent", "slice 1", "slice 2"]


def test_a_loop_that_is_never_idle_still_gives_the_job_its_slices():
    """Other work always ready: the job waits at most one slice's time for it, then has its next slice."""
    done = []

    async def main():
        wake = asyncio.Event()
        left = iter(range(5))

        def step(deadline):
            if next(left, None) is None:
                return None
            return True

        async def busy():
            end = time.perf_counter() + 2  # a job never given its slices would otherwise wait forever
            while not done and time.perf_counter() < end:
                time.sleep(0.0005)
                await asyncio.sleep(0)

        async def job():
            await beside(step, wake)
            done.append(time.perf_counter())

        t0 = time.perf_counter()
        await asyncio.gather(job(), busy())
        return done[0] - t0

    took = asyncio.run(main())
    assert took < 5 * SLICE_S + 0.5  # five slices, each after at most one slice's wait (and a slow machine's margin)


def test_two_jobs_do_not_wait_on_each_other(monkeypatch):
    """Two background jobs and nothing else on the loop: each job's ready callback is not work the other
    waits for (else both would pass the loop back and forth, empty, until a slice's time ran out)."""
    passes = []
    real_sleep = asyncio.sleep

    async def counted(delay, *args):
        passes.append(delay)
        return await real_sleep(delay, *args)
    monkeypatch.setattr(asyncio, "sleep", counted)

    async def main():
        def job(n):
            left = iter(range(n))
            return lambda deadline: None if next(left, None) is None else True
        await asyncio.gather(beside(job(20), asyncio.Event()), beside(job(20), asyncio.Event()))

    asyncio.run(main())
    assert len(passes) <= 2 * 20 * 2  # at most a pass or two a step, not a slice's time of them


def test_advance_runs_a_generator_to_its_deadline_and_returns_its_value():
    def steps():
        yield
        yield
        return "done"

    gen = steps()
    assert advance(gen, deadline=0.0) == (False, None)  # past the deadline: not a step taken
    assert next(gen) is None  # ... so it is still at its start
    assert advance(gen, deadline=float("inf")) == (True, "done")
