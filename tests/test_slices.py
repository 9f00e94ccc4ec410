"""engine.slices.in_slices: a long call cut into slices for the event loop, by pauses, in order."""

import threading

import pytest

from trustmh.engine.slices import in_slices


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
