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
from typing import Any, Callable, Protocol

from ..models import make_model
from ..tasks import Method, RunContext, Task, resolve_tasks
from ..types import Chain, Request, Response, Sample, Turn
from ._endpoint import CallWriter, Endpoint
from ._events import EventSink, Notice, ignore
from ._requests import generation_request
from ._store import Store
from .spec import Limits, RunSpec


class TurnCounts(Protocol):
    turns: int
    turns_of: Any  # task id -> turns taken


class Chains(Protocol):
    """What a model's phase 1 (collect.py's _Generating) lends the conversations and rubric walks it runs:
    its run, store and group-commit writer, its endpoint id and endpoints, and its turn counts."""

    spec: RunSpec
    store: Store
    writer: CallWriter
    model_id: str
    gen_ep: Endpoint
    user_ep: Endpoint | None
    n: TurnCounts

AT_ONCE = 512  # conversations in flight per tested model (each has one call in flight at a time)


def talks(task: Task, ctx: RunContext) -> bool:
    """Whether the task's samples are conversations (its method answers them with a chain)."""
    from ..tasks.base import Method
    return type(task.method(ctx)).conversation is not Method.conversation


def user_model(spec: RunSpec, method: Method) -> tuple[str, str | None, str]:
    """The simulated person of a conversing task's `method` (Method.simulated_person), with its base URL and
    how it was chosen, which the run reports."""
    ctx = RunContext(seed=spec.seed, protocol=spec.protocol, judge=spec.judge, options=spec.options)
    name, why = method.simulated_person(ctx)
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
    return list(dict.fromkeys(user_model(spec, t.method(ctx))[0] for t in tasks if talks(t, ctx)))


def user_endpoint(spec: RunSpec, ctx: RunContext, prepared: list, limits: Limits, store: Any,
                  writer: CallWriter, events: EventSink = ignore) -> Endpoint | None:
    """The simulated person's endpoint when a task of the run converses (None otherwise)."""
    talking = [p.task for p in prepared if not p.not_run and talks(p.task, ctx)]
    if not talking:
        return None
    name, base_url, why = user_model(spec, talking[0].method(ctx))
    events(Notice(f"{talking[0].id}: the simulated person is {name} ({why})"))
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


def chain_key(request: Request, endpoint: str, chain: Chain, user_endpoint: str, spec: RunSpec) -> str:
    """The store key a conversation's whole result is kept under (converse writes it, the dry run looks it up)."""
    return _key(request, endpoint, _ident(chain, user_endpoint, spec))


async def converse(c: Chains, chain: Chain, request: Request, task: Task, sample: Sample) -> Response:
    """A conversation sample's reply: stored, or talked out turn by turn. A model that answers by id (a
    replay or transcripts file) gives the whole recorded conversation at once."""
    gen = c.gen_ep
    if getattr(gen.model, "answers_by_id", False):
        return await gen.call(request, gen.key(request))
    user = c.user_ep
    key = chain_key(request, gen.model.endpoint, chain, user.model.endpoint if user else "", c.spec)
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
