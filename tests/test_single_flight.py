"""Identical requests in flight are sent once (issue 34, item 3). fairness.support judges each of a
dialogue's 17 identity variants blind to the identity: a model that answers them alike asks the judge the
same body 17 times, at the same moment. The first is sent; the others wait for its reply, and each sample
still gets its own stored call (so scoring and a rerun find it), a reply paid once. An error of the first
is each waiter's error, typed as the engine types it, never a score."""

from __future__ import annotations

import asyncio
import json
import threading

from trustmh.engine import Limits
from trustmh.engine._endpoint import Endpoint
from trustmh.engine._store import Store
from trustmh.models import make_model
from trustmh.testing.fake_server import FakeLLMServer, Fault
from trustmh.types import Request

VERDICT = '{"fluency": 4, "professionalism": 3, "empathy": 5, "helpfulness": 2}'
JUDGE_MESSAGES = [{"role": "user", "content": "Rate this supporter turn: 'I hear you.'"}]


def judgements(n: int, **params) -> list[Request]:
    """`n` judgements of one body, each for another sample (the 17 identity variants of one dialogue)."""
    return [Request(JUDGE_MESSAGES, params or {"temperature": 0.0, "max_tokens": 512, "seed": 0},
                    "fairness.support", "dialogue-3", f"identity-{i}", "judge") for i in range(n)]


def held_server(**kw) -> tuple[FakeLLMServer, threading.Event]:
    """A server whose replies wait until the test lets them go (the server's loop is held meanwhile, so a
    request sent while the first is held is counted when the hold ends)."""
    gate = threading.Event()

    def reply(body: dict) -> str:
        assert gate.wait(30), "the test never let the reply go"
        return VERDICT
    return FakeLLMServer(reply=reply, **kw), gate


async def ask_all(ep: Endpoint, requests: list[Request], srv: FakeLLMServer, gate: threading.Event) -> list:
    calls = [asyncio.create_task(ep.call(r, ep.key(r))) for r in requests]
    for _ in range(500):  # until the first request is at the server (all the others have asked by then)
        if srv.n_requests:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # room for any other request to leave, were it to
    gate.set()
    return await asyncio.gather(*calls)


def test_one_judge_reply_held_while_17_identical_judgements_wait_is_one_call(tmp_path):
    srv, gate = held_server()
    with srv:
        store = Store(tmp_path / "store.sqlite")
        ep = Endpoint(make_model("openai/judge", base_url=srv.openai_base_url, purpose="judge"), store,
                      Limits(max_connections=64), purpose="judge")
        requests = judgements(17)

        async def go():
            try:
                return await ask_all(ep, requests, srv, gate)
            finally:
                await ep.model.aclose()
        replies = asyncio.run(go())
        assert srv.n_requests == 1
        assert ep.n_calls == 1
        assert [r.text for r in replies] == [VERDICT] * 17
        # Each sample has its own stored call under its own key: scoring reads it, a rerun pays nothing.
        stored = [store.get_call(ep.key(r)) for r in requests]
        assert all(s is not None and s.ok and s.text == VERDICT for s in stored)
        # Paid once: each sample's reply has its tokens, but only the call that was sent made an attempt,
        # and the run's totals count that one.
        assert [s.attempts for s in stored].count(1) == 1 and [s.attempts for s in stored].count(0) == 16
        assert all(s.prompt_tokens == replies[0].prompt_tokens for s in stored)
        assert store.totals() == (replies[0].prompt_tokens, replies[0].completion_tokens)
        store.close()


def test_an_identical_body_asked_later_or_by_a_later_run_is_not_paid_again(tmp_path):
    """Not only at the same moment: a body answered earlier, in this run or in an earlier one over the same
    store, answers a later sample's identical request, so what a run pays never depends on timing."""
    with FakeLLMServer(reply=lambda body: VERDICT) as srv:
        requests = judgements(6)

        async def one_by_one(reqs):
            ep = Endpoint(make_model("openai/judge", base_url=srv.openai_base_url, purpose="judge"), store,
                          Limits(max_connections=4), purpose="judge")
            try:
                replies = [await ep.call(r, ep.key(r)) for r in reqs]
                assert all(store.get_call(ep.key(r)).text == VERDICT for r in reqs)  # each sample's own row
                return replies, ep.n_calls
            finally:
                await ep.model.aclose()
        store = Store(tmp_path / "store.sqlite")
        replies, sent = asyncio.run(one_by_one(requests[:3]))
        assert srv.n_requests == sent == 1 and [r.attempts for r in replies] == [1, 0, 0]
        store.close()
        store = Store(tmp_path / "store.sqlite")  # a later run over the same store: three new samples
        replies, sent = asyncio.run(one_by_one(requests[3:]))
        assert srv.n_requests == 1 and sent == 0 and all(r.ok and r.text == VERDICT for r in replies)
        store.close()
    with FakeLLMServer(reply=lambda body: VERDICT) as other:  # another judge endpoint pays its own
        store = Store(tmp_path / "store.sqlite")

        async def elsewhere():
            ep = Endpoint(make_model("openai/judge", base_url=other.openai_base_url, purpose="judge"), store,
                          Limits(max_connections=4), purpose="judge")
            try:
                return await ep.call(requests[0], ep.key(requests[0]))
            finally:
                await ep.model.aclose()
        assert asyncio.run(elsewhere()).ok and other.n_requests == 1
        store.close()


def test_an_error_of_the_first_is_the_typed_error_of_every_waiter(tmp_path):
    srv, gate = held_server(faults=lambda n, body: Fault(kind="status", status=400))
    with srv:
        store = Store(tmp_path / "store.sqlite")
        ep = Endpoint(make_model("openai/judge", base_url=srv.openai_base_url, purpose="judge"), store,
                      Limits(max_connections=64, max_retries=0), purpose="judge")
        requests = judgements(17)

        async def go():
            try:
                gate.set()  # the fault answers at once; the waiters must still have joined the first
                calls = [asyncio.create_task(ep.call(r, ep.key(r))) for r in requests]
                return await asyncio.gather(*calls)
            finally:
                await ep.model.aclose()
        replies = asyncio.run(go())
        assert srv.n_requests == 1
        assert all(not r.ok and r.error_kind == "bad_request" and r.text is None for r in replies)
        stored = [store.get_call(ep.key(r)) for r in requests]
        assert all(s is not None and s.error_kind == "bad_request" for s in stored)  # counted, retried later


def test_identical_generation_requests_in_flight_are_sent_once_unless_they_are_separate_draws(tmp_path):
    """A generation request with a fixed seed or at temperature 0 asks for one reproducible reply: one call
    answers all. At temperature > 0 without a seed each identical request is its own draw, and is sent."""
    for params, sent in (({"temperature": 0.0, "max_tokens": 64, "seed": 0}, 1),
                         ({"temperature": 0.7, "max_tokens": 64, "seed": 3}, 1),
                         ({"temperature": 0.7, "max_tokens": 64}, 5)):
        srv, gate = held_server()
        with srv:
            store = Store(tmp_path / f"store-{params['temperature']}-{len(params)}.sqlite")
            ep = Endpoint(make_model("openai/m", base_url=srv.openai_base_url), store, Limits(max_connections=8),
                          purpose="model")
            requests = [Request([{"role": "user", "content": "How do I sleep better?"}], params, "robustness.support",
                                "7", f"word_swap@low|{i}", "generate") for i in range(5)]

            async def go():
                try:
                    return await ask_all(ep, requests, srv, gate)
                finally:
                    await ep.model.aclose()
            replies = asyncio.run(go())
            assert srv.n_requests == sent, params
            assert all(r.ok for r in replies)
            store.close()


def test_a_fairness_run_pays_each_identical_judgement_once(tmp_path):
    """End to end: a model that gives one reply to every identity variant, judged by an LLM judge whose
    replies are held until every generation is in. Each distinct judge body is paid once."""
    from conftest import run_quiet, run_spec
    generated = threading.Event()
    n_samples = 34  # the sample suite's fairness.support: 2 dialogues x 17 identities

    def model_reply(body: dict) -> str:
        if model.n_completed >= n_samples - 1:
            generated.set()
        return "That sounds really hard. What would help most right now?"

    def judge_reply(body: dict) -> str:
        generated.wait(30)
        threading.Event().wait(0.3)  # every judgement queued meanwhile has reached the endpoint
        return VERDICT

    model, judge = FakeLLMServer(reply=model_reply), FakeLLMServer(reply=judge_reply)
    with model, judge:
        spec = run_spec(models=["openai/m"], judge="openai/judge", base_url=model.openai_base_url,
                        judge_base_url=judge.openai_base_url, tasks="fairness.support", suite="sample")
        run_quiet(spec, tmp_path / "run", limits=Limits(max_connections=64))
        bodies = {json.dumps(b["messages"], sort_keys=True) for b in judge.requests}
        assert model.n_completed == n_samples
        assert judge.n_requests == len(bodies) < n_samples
        assert judge.duplicate_paid_calls() == 0
        samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
        judged = [s for s in samples if s["task"] == "fairness.support"]
        assert len(judged) == n_samples and all(s["judge"]["text"] == VERDICT for s in judged)


def test_single_flight_is_one_attribute_and_the_dry_run_reads_the_same_from_the_registration():
    """Whether identical bodies are one call is `Model.answers_by_body`, nothing else: the endpoint reads
    it from the model, and the dry run (no model built) from the provider's registration, which must say
    what the provider's models say."""
    from trustmh.models import PROVIDER_ANSWERS, answers_by_body, answers_by_id
    from trustmh.models.baselines import _Baseline
    from trustmh.models.openai_api import OpenAIModel
    from trustmh.models.replay import ReplayModel
    from trustmh.models.transcripts import TranscriptsModel
    for provider, cls in {"baseline": _Baseline, "replay": ReplayModel, "transcripts": TranscriptsModel,
                          "openai": OpenAIModel}.items():
        assert PROVIDER_ANSWERS[provider] == (cls.answers_by_body, cls.answers_by_id), provider
    assert answers_by_body("openai/gpt-4.1") and not answers_by_body("replay/x.jsonl")
    assert answers_by_id("transcripts/dir") and not answers_by_id("hf/model")
    assert answers_by_body("someplugin/model")  # a provider not loaded is taken to answer by body
    import trustmh.engine._endpoint as endpoint
    assert not hasattr(endpoint, "answered_by_body") and "merges" not in endpoint.Endpoint.__init__.__code__.co_names


def test_a_cancelled_waiter_lets_go_of_its_own_wait_only(tmp_path):
    """Replies queued in one pass of the loop share one commit. A caller cancelled while it waits (a run
    stopping, a conversation ending) must not cancel that commit for the others, nor make it fail."""
    from trustmh.engine._endpoint import CallWriter
    from trustmh.types import Response
    store = Store(tmp_path / "s.sqlite")
    writer = CallWriter(store)
    a, b = judgements(2)
    errors = []

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx.get("exception") or ctx["message"]))

        async def put(key, req):
            await writer.add(key, "openai/j", "judge", req, Response(text=VERDICT, finish_reason="stop"))
            return key
        first = asyncio.ensure_future(put("k1", a))
        second = asyncio.ensure_future(put("k2", b))
        await asyncio.sleep(0)  # both are queued and waiting on the one commit
        first.cancel()
        return await asyncio.gather(first, second, return_exceptions=True)

    got = asyncio.run(main())
    assert isinstance(got[0], asyncio.CancelledError) and got[1] == "k2"
    assert errors == []  # flush did not raise InvalidStateError on the cancelled future
    assert store.get_call("k2") is not None and store.get_call("k1") is not None  # the commit went through
