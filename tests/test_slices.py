"""engine._slices: the background jobs' scheduler (`beside`, `advance`) and `in_slices`, a long call cut
into slices for the event loop, by pauses, in order."""

import asyncio
import threading

import pytest

from trustmh.engine._slices import advance, beside, in_slices


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
            for _ in range(5):  # the job has caught up meanwhile and waits, uncalled
                await asyncio.sleep(0)
            log.append("more")
            wake.set()

        await asyncio.gather(beside(step, wake), other())

    asyncio.run(main())
    assert log == ["a", "loop", "b", "more"]
    assert calls == [0, 2, 3, 4]  # a, b, caught up (False), then finished (None) once woken


def test_advance_runs_a_generator_to_its_deadline_and_returns_its_value():
    def steps():
        yield
        yield
        return "done"

    gen = steps()
    assert advance(gen, deadline=0.0) == (False, None)  # past the deadline: not a step taken
    assert next(gen) is None  # ... so it is still at its start
    assert advance(gen, deadline=float("inf")) == (True, "done")
