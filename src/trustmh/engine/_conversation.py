"""Chains of dependent calls in phase 1: a conversation (the simulated person and the tested model taking
turns) answers a sample, and a rubric walk (one judge question after another) judges it.

A chain is the method's generator (`types.Chain`): it yields a `Turn`, is sent its reply, and returns the
Response the chain stands for. Here each turn becomes a request (the role's settings, the sample's ids, the
turn's label as its purpose), read from the store when it is there and asked otherwise; `Endpoint.call`
stores every reply the moment it arrives, so a run killed mid-conversation resumes at the turn it was
waiting for and pays for no turn twice. The chain's result is stored under a key of its own (the sample's
request, or the first judge request, with the chain's `ident`), and linked as the sample's reply or its
verdict: phase 2 reads it like any other.

Every conversation of every model runs at once (up to AT_ONCE a model): a chain has one call in flight at
a time, so the endpoints' own bounds (the tested model's, the simulated person's, the judge's) are what
limits them, not the number of workers. The simulated person is one endpoint shared by all models, with its
own server, concurrency and price, as a judge is."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from typing import Any, Callable

from ..models import answers_by_id, make_model
from ..tasks import RunContext, Task, resolve_tasks
from ..tasks.crisis.conversation_common import chosen_user
from ..types import Chain, Request, Response, Sample, Turn
from ._endpoint import CallWriter, Endpoint
from ._events import EventSink, Notice, ignore
from ._requests import generation_request, judge_request
from .spec import Limits, RunSpec

AT_ONCE = 512  # conversations in flight per tested model (each has one call in flight at a time)


def talks(task: Task, ctx: RunContext) -> bool:
    """Whether the task's samples are conversations (its method answers them with a chain)."""
    from ..tasks.base import Method
    return type(task.method(ctx)).conversation is not Method.conversation


def user_model(spec: RunSpec) -> tuple[str, str | None, str]:
    """The simulated person (tasks/crisis/conversation_common.chosen_user), with its base URL and how it
    was chosen, which the run reports."""
    name, why = chosen_user(spec.options, spec.judge)
    url = spec.user_model_base_url if spec.user_model else \
        spec.judge_base_url if name == spec.judge else None
    return name, url, why


def called_users(spec: RunSpec) -> list[str]:
    """The simulated person's spec when a task of the run converses (for --max-cost's prices)."""
    ctx = RunContext(seed=spec.seed, protocol=spec.protocol, judge=spec.judge, options=spec.options)
    try:
        tasks = resolve_tasks(spec.tasks)
    except Exception:  # noqa: BLE001 - a bad selection is reported by the run itself
        return []
    return [user_model(spec)[0]] if any(talks(t, ctx) for t in tasks) else []


def user_endpoint(spec: RunSpec, ctx: RunContext, prepared: list, limits: Limits, store: Any,
                  writer: CallWriter, events: EventSink = ignore) -> Endpoint | None:
    """The simulated person's endpoint when a task of the run converses (None otherwise)."""
    if not any(not p.not_run and talks(p.task, ctx) for p in prepared):
        return None
    name, base_url, why = user_model(spec)
    events(Notice(f"crisis.conversation: the simulated person is {name} ({why})"))
    model = make_model(name, base_url=base_url, timeout=limits.timeout, seed=spec.seed, purpose="user",
                       transport=spec.transport, max_connections=limits.max_connections)
    from . import _identity as identity
    identity.record(name, model, store)
    return Endpoint(model, store, limits, purpose="user", writer=writer)


async def run_chain(chain: Chain, endpoints: dict[str, Endpoint], request: Callable[[Turn], Request], store: Any,
                    counted: Callable[[Turn, bool], None] | None = None) -> Response:
    """Drive a chain: each turn read from the store (when its endpoint's replies are cacheable) or asked."""
    steps = chain.steps()
    try:
        turn = steps.send(None)
        while True:
            ep = endpoints[turn.role]
            req = request(turn)
            key = ep.key(req)
            resp = store.get_call(key) if ep.model.cacheable else None
            paid = resp is None or not resp.ok
            if paid:
                resp = await ep.call(req, key, chain.max_chars)
            elif chain.max_chars is not None and len(resp.text or "") > chain.max_chars:  # stored before the bound
                resp = Response(None, error_kind="reply_too_large",
                                error=f"a stored reply over {chain.max_chars:,} characters")
            if counted is not None:
                counted(turn, paid)
            turn = steps.send(resp)
    except StopIteration as done:
        return done.value


def _ident(chain: Chain, user_endpoint: str, spec: RunSpec) -> str:
    """What a conversation's stored result depends on beyond its sample's request: the chain's own settings,
    the simulated person's endpoint and the tested model's --system-prompt."""
    return f"{chain.ident}\0{user_endpoint}\0{spec.system_prompt or ''}"


def _key(request: Request, endpoint: str, ident: str) -> str:
    return hashlib.sha256(f"{request.cache_key(endpoint)}\0{ident}".encode("utf-8", "surrogatepass")).hexdigest()


async def converse(c: Any, chain: Chain, request: Request, task: Task, sample: Sample) -> Response:
    """A conversation sample's reply: stored, or talked out turn by turn. A model that answers by id (a
    replay or transcripts file) gives the whole recorded conversation at once."""
    gen = c.gen_ep
    if getattr(gen.model, "answers_by_id", False):
        return await gen.call(request, gen.key(request))
    user = c.user_ep
    key = _key(request, gen.model.endpoint, _ident(chain, user.model.endpoint if user else "", c.spec))
    c.writer.link([(c.model_id, sample.task, sample.item.id, sample.variant, "", "", key, "")])
    stored = c.store.get_call(key) if gen.model.cacheable else None
    if stored is not None and stored.ok:
        return stored

    system = c.spec.system_prompt

    def ask(turn: Turn) -> Request:
        if turn.role == "model":
            base = generation_request(sample, c.spec, gen.model.spec)
            messages = turn.messages
            if system:  # the deployed assistant's own (--system-prompt) in place of the method's default, as
                # VERA-MH's `-pep system_prompt=...` replaces its "You are a helpful AI assistant."
                messages = [{"role": "system", "content": system}, *(m for m in messages if m["role"] != "system")]
            return dataclasses.replace(base, messages=messages, purpose=turn.label)
        return Request(turn.messages, dict(turn.params or {}), sample.request_task or sample.task, sample.item.id,
                       sample.variant, turn.label)

    def counted(turn: Turn, paid: bool) -> None:
        c.n.turns += 1
        c.n.turns_of[sample.task] += 1

    if user is None:
        raise RuntimeError(f"{task.id}: a conversation needs the simulated person's endpoint")
    resp = await run_chain(chain, {"user": user, "model": gen}, ask, c.store, counted)
    await c.writer.add(key, gen.model.endpoint, "conversation", request, resp)
    return resp


async def judge_chain(c: Any, ep: Endpoint, sample: Sample, rubric: Any, chain: Chain,
                      exact: dict[str, Any] | None) -> Response:
    """A rubric walk's verdict for one judge: stored, or asked question by question."""
    head = judge_request(sample, [{"role": "user", "content": chain.ident}], c.spec, rubric.name, exact)
    key = _key(dataclasses.replace(head, purpose=f"{head.purpose}:walk"), ep.model.endpoint, chain.ident)
    c.writer.link([(c.model_id, sample.task, sample.item.id, sample.variant, rubric.name, ep.model.endpoint, key,
                    rubric.version)])
    stored = c.store.get_call(key) if ep.model.cacheable else None
    if stored is not None and stored.ok:
        return stored

    def ask(turn: Turn) -> Request:
        req = judge_request(sample, turn.messages, c.spec, rubric.name, exact if turn.params is None else turn.params)
        return dataclasses.replace(req, purpose=f"{req.purpose}:{turn.label}")

    resp = await run_chain(chain, {"judge": ep}, ask, c.store)
    await c.writer.add(key, ep.model.endpoint, "judge:walk", head, resp)
    return resp


class Spawner:
    """Runs a model's conversations side by side instead of one per worker: at most AT_ONCE at a time. The
    first one to fail (an endpoint down, a rejected key) cancels the others at once and is raised by the
    next `spawn` and by `wait`, as a worker's failure stops the run."""

    def __init__(self) -> None:
        self.room = asyncio.Semaphore(AT_ONCE)
        self.running: set[asyncio.Task] = set()
        self.error: BaseException | None = None

    async def spawn(self, job) -> None:
        if self.error is not None:
            job.close()
            raise self.error
        await self.room.acquire()
        task = asyncio.create_task(job)
        self.running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self.running.discard(task)
        self.room.release()
        if not task.cancelled() and task.exception() is not None and self.error is None:
            self.error = task.exception()
            self.cancel()

    def cancel(self) -> None:
        for task in list(self.running):
            task.cancel()

    async def wait(self) -> None:
        """Until every conversation is done; their first failure is raised, every other one retrieved."""
        while self.running:
            await asyncio.gather(*list(self.running), return_exceptions=True)
        if self.error is not None:
            raise self.error

def plan_row(row: Any, spec: RunSpec, ctx: RunContext, p: Any, model_spec: str, model_id: str,
             judge_ids: dict[str, list[tuple[str, str]]], store: Any) -> Any:
    """--dry-run for a conversation task: each conversation not stored counts the most turns it can take
    (`Chain.bound`: it may stop early), and its judgements the most questions a walk can ask, sized for the
    longest transcript; a stored conversation counts only the judgements not stored. The row is an upper
    bound, which the dry run marks."""
    from ._identity import model_ref
    from ._prices import completion_tokens
    from ..data import transcripts
    method = p.task.method(ctx)
    user_name, user_url, _ = user_model(spec)
    user_id = model_ref(user_name, user_url, store).endpoint if not answers_by_id(model_spec) else ""
    llm = {r.name: r for r in p.task.method(ctx).active_rubrics(ctx) if r.role in judge_ids}

    def add(role: str, calls: int, prompt: int, completion: int) -> None:
        by_role = row.by_role.setdefault(role, [0, 0, 0])
        by_role[0] += calls
        by_role[1] += prompt
        by_role[2] += completion

    for sample in p.samples:
        chain = method.conversation(sample, ctx)
        request = generation_request(sample, spec, model_spec)
        key = _key(request, model_id, _ident(chain, user_id, spec))
        stored = store.get_call(key) if store is not None else None
        if stored is None or not stored.ok:
            if answers_by_id(model_spec):
                continue  # recorded conversations: nothing to call
            calls, prompt, completion = chain.bound.get("model", (0, 0, 0))
            row.model_calls += calls
            row.model_tokens += prompt
            row.model_completion += completion
            add("user", *chain.bound.get("user", (0, 0, 0)))
            turns = [{"role": ("user", "chatbot")[i % 2], "text": "x" * 4 * 1024} for i in range(conversation_turns(ctx))]
            reply = transcripts.dumps(transcripts.record(turns, "turns"))
        else:
            reply = stored.text or ""
        for name, messages in p.task.method(ctx).judgements(sample, reply, ctx).items():
            if name not in llm:
                continue
            for label, _endpoint in judge_ids[llm[name].role]:
                if isinstance(messages, Chain):
                    calls, prompt, completion = messages.bound.get("judge", (0, 0, 0))
                else:
                    calls, prompt, completion = 1, sum(len(m["content"]) for m in messages) // 4, \
                        completion_tokens(judge_request(sample, messages, spec, name).params)
                row.judge_calls += calls
                row.judge_tokens += prompt
                add(label, calls, prompt, completion)
    return row


def conversation_turns(ctx: RunContext) -> int:
    from ..tasks.crisis.conversation_common import conversation_options
    return conversation_options(ctx)[0]
