"""GenerationShare: while the event loop runs late and a judge is what the run waits for, the models'
requests in flight together shrink; otherwise they grow back to every model's connections, and a run
whose busiest endpoint is a model's is never held back. acquire() waits for room (and says so),
release() makes it."""

import asyncio
import collections
from types import SimpleNamespace

from test_limiter import run_virtual
from trustmh.engine._generation_share import GenerationShare


def pool(waiting: int, left: int, width: int = 64):
    ep = SimpleNamespace(width=width, model=SimpleNamespace(endpoint="judge"))
    return SimpleNamespace(waiting={"m": collections.deque(range(waiting))} if waiting else {}, n_queued=left,
                           n_done=0, ep=ep)


def model(left: int, width: int = 64):
    # what the share reads of a model (generation_share.Generation)
    return SimpleNamespace(width=width, generations_left=lambda: left, judgements_ahead=lambda endpoint: 0)


async def watch_while(share: GenerationShare, late: bool, seconds: float) -> None:
    """Run the share's timer for `seconds` of the virtual clock (test_limiter.VirtualTimeLoop: the outcome
    never depends on how loaded the machine is), the loop held up 30 ms at a time when `late`."""
    loop = asyncio.get_running_loop()
    watch = asyncio.create_task(share.watch())
    end = loop.time() + seconds
    while loop.time() < end:
        if late:
            loop._jumping.now += 0.03  # the loop busy, as with thousands of replies to take
        await asyncio.sleep(0.001)
    watch.cancel()


def test_a_late_loop_shrinks_the_share_only_while_a_judge_is_what_the_run_waits_for():
    async def go():
        judged = GenerationShare([pool(waiting=500, left=50_000)], [model(100) for _ in range(12)])
        assert judged.cap == judged.total == 12 * 64
        await watch_while(judged, late=True, seconds=0.5)
        assert judged.cap <= judged.FLOOR * 2 and judged.low < judged.total
        await watch_while(judged, late=False, seconds=0.6)
        assert judged.cap == judged.total  # grown back once the loop is on time
        # The model's generation is the longer (a model-bound run): never held back, however late.
        model_bound = GenerationShare([pool(waiting=500, left=500)], [model(10_000)])
        await watch_while(model_bound, late=True, seconds=0.4)
        assert model_bound.low == model_bound.total
        # Nothing waiting for the judge: nothing to give way to.
        idle_judge = GenerationShare([pool(waiting=0, left=50_000)], [model(100)])
        await watch_while(idle_judge, late=True, seconds=0.4)
        assert idle_judge.low == idle_judge.total
    run_virtual(go())


def test_acquire_waits_for_room_says_so_and_release_makes_it():
    async def go():
        share = GenerationShare([pool(0, 0)], [model(10, width=2)])
        assert await share.acquire() is False and await share.acquire() is False
        third = asyncio.create_task(share.acquire())
        await asyncio.sleep(0.01)
        assert not third.done() and share.in_flight == 2
        share.release()
        assert await asyncio.wait_for(third, 1) is True  # it waited
        assert share.in_flight == 2
        share.cap = 1  # shrunk: a release below the cap wakes no one
        waiter = asyncio.create_task(share.acquire())
        share.release()
        await asyncio.sleep(0.01)
        assert not waiter.done() and share.in_flight == 1
        share.release()
        await asyncio.wait_for(waiter, 1)
    asyncio.run(go())


def test_a_request_held_in_the_share_is_not_paid_again_when_an_identical_one_was_stored_meanwhile(
        tmp_path, monkeypatch):
    """robustness.support's clean samples ask what reliability.support asks. A generation held in a share
    of one, while later batches are looked up, must still read the reply its twin stored meanwhile: the
    same requests are paid as with no share at all."""
    from conftest import run_quiet, run_spec
    from trustmh.engine import Limits
    from trustmh.engine import _generation_share as generation_share
    from trustmh.testing.fake_server import FakeLLMServer

    def spec(srv):
        return run_spec(models=["openai/m"], judge="openai/judge", base_url=srv.openai_base_url,
                        judge_base_url=srv.openai_base_url, tasks="reliability.support,robustness.support",
                        suite="sample")
    from trustmh.engine._endpoint import Endpoint
    # Requests of one body in flight together are sent once (tests/test_single_flight.py), which pays less
    # the more of them overlap: here each sample's own request is compared, so only its store key joins.
    monkeypatch.setattr(Endpoint, "flight_key", lambda self, request, key: key)
    with FakeLLMServer() as srv:
        run_quiet(spec(srv), tmp_path / "free", limits=Limits(max_connections=8))
        free = srv.calls.copy()
        srv.reset_counters()
        waits = []
        real_init, real_acquire = generation_share.GenerationShare.__init__, generation_share.GenerationShare.acquire

        def narrow(self, *a, **kw):
            real_init(self, *a, **kw)
            self.total = self.cap = 1  # one generation at a time: every other worker holds its job

        async def counting(self):
            waited = await real_acquire(self)
            waits.append(waited)
            return waited
        monkeypatch.setattr(generation_share.GenerationShare, "__init__", narrow)
        monkeypatch.setattr(generation_share.GenerationShare, "acquire", counting)
        monkeypatch.setattr(generation_share.GenerationShare, "watch", lambda self: asyncio.sleep(3600))
        run_quiet(spec(srv), tmp_path / "held", limits=Limits(max_connections=8))
        assert any(waits)
        assert srv.calls == free  # each request paid as often as without the share


def test_a_model_s_phase_one_offers_what_the_share_and_the_judge_pools_read():
    """The share and the pools reach a model's phase 1 only through their protocols (generation_share.Generation,
    judge_pool.Judged); both collectors offer every member, with the same parameters."""
    import inspect

    from trustmh.engine.collect import _Generating, _Rejudging
    from trustmh.engine._generation_share import Generation
    from trustmh.engine.judge._pool import Judged
    for protocol in (Generation, Judged):
        members = [n for n in vars(protocol) if not n.startswith("_")]
        assert members
        for cls in (_Generating, _Rejudging):
            for name in members:
                want, got = vars(protocol)[name], getattr(cls, name, None)
                assert got is not None, (cls.__name__, name)
                if callable(want):
                    assert list(inspect.signature(got).parameters) == list(inspect.signature(want).parameters)
                else:
                    assert isinstance(got, property), (cls.__name__, name)


def test_a_waiter_let_go_then_cancelled_hands_its_room_on():
    """The share and the limiter park callers in one WaitQueue: a caller let go and cancelled before it
    ran gives its turn to the next (the share's own queue lost that room until another release)."""
    from trustmh.engine._waiting import WaitQueue

    async def main():
        share = GenerationShare([], [])
        share.total = share.cap = 1
        await share.acquire()  # the one place is taken
        first = asyncio.ensure_future(share.acquire())
        second = asyncio.ensure_future(share.acquire())
        await asyncio.sleep(0)
        assert len(share.waiters) == 2
        share.release()  # lets `first` go ...
        first.cancel()  # ... which is cancelled before it runs
        await asyncio.sleep(0)
        await asyncio.wait_for(second, 1)  # the room went on to `second`
        assert share.in_flight == 1 and first.cancelled()
        queue = WaitQueue()
        parked = asyncio.ensure_future(queue.wait(on_lost=lambda: None))
        await asyncio.sleep(0)
        parked.cancel()  # cancelled while parked: it leaves the queue
        await asyncio.sleep(0)
        assert len(queue) == 0 and not queue.let_go()

    asyncio.run(main())
