"""`trustmh run --dry-run`: the calls a run would make, and their size, without making any.

Nothing here builds a model client: the cache keys come from the spec alone (as re-scoring finds them), so
an API key, a server or a paid call is never needed to see what a run would cost. Prompt tokens are an
estimate (characters / 4) of what would be sent. For a reply not stored yet, the judge calls assume it is
judged (a task may skip some replies, e.g. empty ones) and its prompt is sized without the reply's text.

A task with more than PLAN_ITEMS items is planned from PLAN_ITEMS of them, spread evenly over its data
(the first, and every n/PLAN_ITEMS-th after it: stored and new items alike), and its counts are scaled to
all of them (`PlanRow.estimated`): building every perturbed variant of the benchmark takes ~40 s, a plan
of this size a few seconds. Tasks of the same length sample the same positions, so a request two tasks
share (robustness and its base task) is still counted once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

from ..data.methods import MethodError
from ..judges.roles import JUDGE_ROLES, judges_of
from ..models import answers_by_body, answers_by_id
from ._budget import Budget
from ._prices import CHARS_PER_TOKEN, DEFAULT_COMPLETION_TOKENS, completion_tokens
from ._store import Store
from ..tasks import RunContext
from ..types import Chain
from . import _conversation as conversation
from ._endpoint import flight_key
from .judge import judge_ids as role_endpoints, panel_endpoints
from ._identity import model_ref
from .prepare import Prepared
from ._requests import generation_request, judge_request
from .spec import RunSpec

PLACEHOLDER = "(reply)"
PLAN_ITEMS = 100


@dataclass
class PlanRow:
    task: str
    model: str
    samples: int
    model_calls: int  # generation requests not already stored
    model_tokens: int  # estimated prompt tokens of those
    judge_calls: int  # LLM-judge requests not already stored (for stored replies: exactly; else one per rubric)
    judge_tokens: int
    note: str = ""
    estimated: bool = False  # scaled up from PLAN_ITEMS of the task's items (see the module's docstring)
    # For the cost estimate (prices.plan_costs): completion tokens the model calls would return, and the
    # judge calls by rubric role ("llm", "proxy") as [calls, prompt tokens, completion tokens].
    model_completion: int = 0
    by_role: dict[str, list[int]] = field(default_factory=dict)
    upper_bound: bool = False  # counts are the most the task can make (a conversation may stop early)
    clusters: int = 0  # G: the units the bootstrap will resample (items, intents, dialogues, personas)

    def detectable(self, level: float = 0.95) -> tuple[float, float] | None:
        """The smallest difference between two models on these samples that a paired test detects with 80 %
        power (Miller 2024, s. 5: 2.8 SE of the paired difference), for a 0-1 share at p = 0.5 with the two
        models' outcomes uncorrelated (the variance of a paired difference is then 2 x 0.25 per unit): from
        the samples as independent units, and from the clusters as the units (samples within a cluster
        alike, the conservative end). None without a sample."""
        from ..scoring.metrics import power_multiplier
        if not self.samples or not self.clusters:
            return None
        k = power_multiplier(level)
        return k * (0.5 / self.samples) ** 0.5, k * (0.5 / self.clusters) ** 0.5


def _tokens(messages: list[dict[str, str]]) -> int:
    return sum(len(m.get("content") or "") for m in messages) // CHARS_PER_TOKEN


def plan(spec: RunSpec, ctx: RunContext, prepared: list[Prepared], run_dir: Path, *,
         typical: dict[str, int] | None = None) -> list[PlanRow]:
    """`typical`: per model or judge spec, the completion tokens a reply to a request with no max_tokens is
    estimated at (a stopped --max-cost run passes the mean length it saw; default DEFAULT_COMPLETION_TOKENS)."""
    db = run_dir / "store.sqlite"
    store = Store(db) if db.is_file() else None  # an absent run directory is not created by a dry run
    # The LLM judges by rubric role (the classifier's calls are local and free: not counted).
    judge_ids = {role: [(role, jid)] for role, jid in role_endpoints(spec, ctx, store).items() if JUDGE_ROLES[role].paid}
    panel = panel_endpoints(spec, store)
    if panel:  # a judge panel: each judge's calls apart, by_role key "llm|<judge spec>" (prices.plan_costs)
        judge_ids["llm"] = [(f"llm|{j}", jid) for j, jid in panel]
    rows = []
    planned = [sampled(p, ctx) for p in prepared]
    try:
        for model_spec in spec.models:
            model_id = model_ref(model_spec, spec.model_base_url(model_spec), store).endpoint
            seen: set[str] = set()  # one request asked twice (robustness shares its base task's) is one call
            for p, scale in planned:
                if p.not_run:
                    rows.append(PlanRow(p.task.id, model_spec, 0, 0, 0, 0, 0, f"not run: {p.not_run}"))
                    continue
                row = _task_row(spec, ctx, p, model_spec, model_id, judge_ids, store, seen, typical or {})
                row.clusters = len({p.task.method(ctx).cluster(s) for s in p.samples})
                if scale != 1.0:
                    for name in ("samples", "model_calls", "model_tokens", "judge_calls", "judge_tokens",
                                 "model_completion", "clusters"):
                        setattr(row, name, round(getattr(row, name) * scale))
                    row.by_role = {role: [round(x * scale) for x in v] for role, v in row.by_role.items()}
                    row.estimated = True
                rows.append(row)
    finally:
        if store is not None:
            store.close()
    return rows


def sampled(p: Prepared, ctx: RunContext, max_items: int = PLAN_ITEMS) -> tuple[Prepared, float]:
    """The task with its samples built for at most `max_items` items spread over its data, and the factor
    that scales their counts to every item (1.0: all of them built, exact). Takes a lazily prepared task
    (the first item built, the rest pending) or a fully built one."""
    if p.not_run or p.pending is None:
        return p, 1.0
    first = p.samples[0].item if p.samples else None
    rest = list(p.pending)
    items = ([first] if first is not None else []) + rest
    n = len(items)
    chosen = items if n <= max_items else [items[i * n // max_items] for i in range(max_items)]
    samples = [s for s in p.samples] if first is not None else []
    try:
        for item in chosen[1:] if first is not None else chosen:
            samples.extend(p.task.method(ctx).samples(item, ctx))
    except MethodError as e:
        return Prepared(p.task, not_run=str(e)), 1.0
    return Prepared(p.task, samples=samples, all_ids=p.all_ids), n / len(chosen) if chosen else 1.0


def _task_row(spec: RunSpec, ctx: RunContext, p: Prepared, model_spec: str, model_id: str,
              judge_ids: dict[str, list[tuple[str, str]]], store: Store | None, seen: set[str],
              typical: dict[str, int]) -> PlanRow:
    if conversation.talks(p.task, ctx):
        return conversation_row(PlanRow(p.task.id, model_spec, len(p.samples), 0, 0, 0, 0, upper_bound=True),
                                     spec, ctx, p, model_spec, model_id, judge_ids, store)
    reqs = [generation_request(s, spec, model_spec) for s in p.samples]
    keys = [r.cache_key(model_id) for r in reqs]
    stored = store.ok_keys(keys) if store is not None else set()
    row = PlanRow(p.task.id, model_spec, len(p.samples), 0, 0, 0, 0)
    by_body = answers_by_body(model_spec)
    for req, key in zip(reqs, keys):
        flight = flight_key(req, key, model_id, by_body)  # one body asked by several samples is one call
        if key not in stored and flight not in seen and not _body_answered(store, flight, key):
            seen.add(flight)
            row.model_calls += 1
            row.model_tokens += _tokens(req.messages)
            row.model_completion += completion_tokens(req.params, typical.get(model_spec, DEFAULT_COMPLETION_TOKENS))
    method = p.task.method(ctx)
    llm = {r.name: r for r in method.active_rubrics(ctx) if r.role in judge_ids}
    if not llm:
        return row
    exact_params = {name: method.judge_params(r, ctx) for name, r in llm.items()}  # per rubric, not per sample
    judge_specs = {role: judges_of(role, spec, ctx.options)[0][0] for role in judge_ids}
    for sample, key in zip(p.samples, keys):
        reply = store.get_call(key) if key in stored else None
        # A reply not there yet stands in as a placeholder (tasks skip judging an empty reply), so the judge
        # estimate assumes every reply gets judged and leaves its text out of the prompt size.
        judgements = method.judgements(sample, (reply.text or "") if reply else PLACEHOLDER, ctx)
        for name, messages in judgements.items():
            if name not in llm:
                continue
            jreq = judge_request(sample, messages, spec, name, exact_params[name])
            for label, endpoint in judge_ids[llm[name].role]:  # every judge of a panel is asked
                judge = label.partition("|")[2] or judge_specs.get(label)
                jkey = jreq.cache_key(endpoint)
                # Judge bodies built on a placeholder are not merged: the replies they stand for may differ
                # (so the judge's count is an upper bound until the replies are in); on stored replies, one
                # body asked for several samples is one call, as the run sends it.
                jflight = flight_key(jreq, jkey, endpoint, reply is not None and answers_by_body(judge or ""))
                if jflight in seen or (reply is not None and store is not None
                                       and (store.ok_keys([jkey]) or _body_answered(store, jflight, jkey))):
                    continue
                seen.add(jflight)
                row.judge_calls += 1
                row.judge_tokens += _tokens(messages)
                by_role = row.by_role.setdefault(label, [0, 0, 0])
                by_role[0] += 1
                by_role[1] += _tokens(messages)
                by_role[2] += completion_tokens(jreq.params, typical.get(judge or "", DEFAULT_COMPLETION_TOKENS))
    return row


def stop_message(budget: Budget, spec, run_dir) -> str:
    """What was spent, by which rule, and what remains, once a run stopped at its cap: the rest is the dry
    run's plan of the calls not stored yet, replies with no max_tokens at the mean length seen so far."""
    from ._prices import plan_costs, total_cost
    from .prepare import prepare
    from .run import context  # run's own closure never imports plan: no cycle
    ctx = context(spec)
    prepared, _ = prepare(spec, ctx)
    typical = budget.typical_completion()
    lines = plan_costs(plan(spec, ctx, prepared, run_dir, typical=typical), spec, budget.table)
    left, unpriced = total_cost(lines)
    n_left = sum(line.calls for line in lines)
    seen = "; ".join(f"{s} {t:,} tokens" for s, t in typical.items())
    return (f"stopped at --max-cost {budget.cap:.2f} USD: {budget.account()}. The next call ({budget.next_spec}) "
            f"could cost up to ${budget.next_worst:.4f}, more than the ${max(0.0, budget.cap - budget.spent):.4f} "
            f"left. {n_left} calls remain, ~${left:.2f}{'+?' if unpriced else ''} estimated"
            f"{f' (replies without max_tokens at the mean length seen: {seen})' if seen else ''}. Every reply so "
            f"far is stored: rerun the same command to continue (with a higher --max-cost to finish sooner); "
            f"`--dry-run` shows the rest")


def _body_answered(store: Store | None, flight: str, key: str) -> bool:
    """Whether a request's body (`flight`, when it is not the request's own key) was answered already."""
    return flight != key and store is not None and store.answer_for_body(flight) is not None


def conversation_row(row: Any, spec: RunSpec, ctx: RunContext, p: Any, model_spec: str, model_id: str,
                     judge_ids: dict[str, list[tuple[str, str]]], store: Any) -> Any:
    """The dry run's row of a conversation task: each conversation not stored counts the most turns it can take
    (`Chain.bound`: it may stop early), and its judgements the most questions a walk can ask, sized for the
    longest transcript; a stored conversation counts only the judgements not stored. The row is an upper
    bound, which the dry run marks."""
    from ..data import transcripts
    method = p.task.method(ctx)
    user_name, user_url, _ = conversation.user_model(spec, method)
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
        key = conversation.chain_key(request, model_id, chain, user_id, spec)
        stored = store.get_call(key) if store is not None else None
        if stored is None or not stored.ok:
            if answers_by_id(model_spec):
                continue  # recorded conversations: nothing to call
            calls, prompt, completion = chain.bound.get("model", (0, 0, 0))
            row.model_calls += calls
            row.model_tokens += prompt
            row.model_completion += completion
            add(f"user|{user_name}", *chain.bound.get("user", (0, 0, 0)))
            turns = [{"role": ("user", "chatbot")[i % 2], "text": "x" * CHARS_PER_TOKEN * 1024}
                     for i in range(method.conversation_turns(ctx))]
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
                    calls, prompt, completion = 1, _tokens(messages), \
                        completion_tokens(judge_request(sample, messages, spec, name).params)
                row.judge_calls += calls
                row.judge_tokens += prompt
                add(label, calls, prompt, completion)
    return row
