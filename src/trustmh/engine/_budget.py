"""`trustmh run --max-cost USD`: the spend cap, checked before every attempt is sent.

The guarantee: by trustmh's own accounting, what one invocation spends never passes the cap, whatever a
server reports as usage and however it stalls; and no call can make the real bill pass it where each
call's reply has a known bound. It rests on four rules.

* **Each attempt reserves its worst case** before it leaves: prompt tokens at most the request's UTF-8
  bytes, plus PROMPT_OVERHEAD_* for the chat template (a token is at least a byte of text); completion
  tokens at most the max_tokens the request sends (the backend's own default where it sends one when the
  request has none: Anthropic's 1,024), and where none is sent at all, as under the paper's protocol, the
  model's maximum output (`max_output_tokens` in the price table: no reply can be longer). Only for a
  model whose maximum is not known is the bound a guess, and the cap best-effort (`best_effort`, said
  before the run starts): twice the longest reply this endpoint has returned, never below
  COMPLETION_FLOOR; the first such call of an endpoint goes alone, so the guess is learned from a reply
  before a wave of calls leaves on it.
* **The calls in flight fit together**: an attempt waits while spent + reserved + its reservation would
  pass the cap; one that does not fit with nothing in flight stops the run (BudgetStop, once the calls
  in flight are stored).
* **Every attempt that may have been billed is counted**: a reply at its usage; a timeout, a dropped
  connection, a malformed or filtered reply, a cancelled call at its reservation (the server may have
  worked on it); only refusals that come before any work (UNBILLED: 429, 400, 401, 404, context length)
  cost nothing. Retries reserve and count each attempt.
* **Usage is believed only within its bound**: a reply reporting no usage, zero tokens, or more tokens
  than its reservation is priced at its reservation, and counted by that rule (`priced_by`), so each
  call costs at most what it reserved. A reply with no max_tokens that honestly ran past a learned
  (guessed) bound is priced the same way; what its server reported beyond is kept apart (`beyond`) and
  shown first in the spend line, as what the servers reported: it is the only way the real bill can pass
  what is counted, and the probe keeps it to one reply an endpoint unless a later reply is more than twice
  as long as any before it.

Stored calls are never sent, so they cost nothing: the cap bounds what one invocation spends, and
running the same command again continues where the last one stopped."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from ._prices import CHARS_PER_TOKEN, Price, PriceTable
from ..types import Request, Response

COMPLETION_FLOOR = 1024  # tokens reserved for a reply whose request sets no max_tokens, before any is seen
PROMPT_OVERHEAD_MESSAGE = 8  # chat-template tokens around each message (role markers, separators)
PROMPT_OVERHEAD_REQUEST = 64  # and around the whole prompt (a default system prompt a server adds)
# A count above this is no model's (context windows are at most a few million tokens): a server's
# nonsense, never learned from.
MAX_SANE_TOKENS = 10_000_000
# Refused before the model does any work, so never billed: everything else may have been.
UNBILLED = frozenset({"rate_limit", "bad_request", "context_length", "auth", "not_found"})
_MAX_PARAMS = ("max_tokens", "max_completion_tokens", "max_new_tokens")
USAGE = "usage from the server"  # the rule a trusted reply is priced by; the others say "reservation: why"


class BudgetStop(Exception):
    """The next call would pass --max-cost: nothing more was sent."""

    def __init__(self, budget: "Budget"):
        super().__init__(f"--max-cost {budget.cap:.2f} USD reached")
        self.budget = budget


def prompt_bound(request: Request) -> int:
    """The most prompt tokens `request` can cost: a token of text is at least one UTF-8 byte."""
    content = sum(len(str(m.get("content") or "").encode("utf-8", "replace")) for m in request.messages
                  if isinstance(m, dict))
    return content + PROMPT_OVERHEAD_MESSAGE * len(request.messages) + PROMPT_OVERHEAD_REQUEST


def sent_max_tokens(request: Request, default: int | None = None) -> int | None:
    """The completion bound the request carries on the wire, or None where it sends none."""
    for key in _MAX_PARAMS:
        v = request.params.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return default


@dataclass(frozen=True)
class Hold:
    """One attempt's reservation."""

    spec: str
    prompt: int  # the most prompt tokens it can cost
    completion: int  # the most completion tokens: max_tokens, or the learned bound
    cost: float
    bounded: bool  # the request sends its completion bound, so usage above it is never true
    probe: bool  # the first call of its endpoint with no bound sent, which goes alone


@dataclass
class Budget:
    cap: float
    table: PriceTable
    spent: float = 0.0
    calls: int = 0  # attempts counted (sent, and answered, failed or cancelled in a way that may be billed)
    reserved: float = 0.0
    in_flight: int = 0
    stopped: bool = False
    next_worst: float = 0.0  # the reservation that did not fit, when the run stopped
    next_spec: str = ""
    beyond: float = 0.0  # what replies with no max_tokens reported past their reservation: not counted, shown
    priced_by: collections.Counter = field(default_factory=collections.Counter)  # rule -> attempts
    longest: dict[str, int] = field(default_factory=dict)  # endpoint spec -> longest completion seen
    lengths: dict[str, list[int]] = field(default_factory=dict)  # spec -> [replies, completion tokens] seen
    probing: set[str] = field(default_factory=set)
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)  # reserve() calls waiting for a settle

    def price(self, spec: str) -> Price:
        price = self.table.price(spec)
        if price is None:  # the CLI checks every endpoint first (prices.check_priced); a plugin's may slip by
            raise BudgetStop(self)
        return price

    def completion_bound(self, spec: str) -> int:
        """What a call of `spec` with no max_tokens reserves for its reply."""
        return max(COMPLETION_FLOOR, 2 * self.longest.get(spec, 0))

    def _hold(self, spec: str, price: Price, request: Request, default_max: int | None) -> Hold:
        bound = sent_max_tokens(request, default_max) or price.max_output  # what no reply can pass
        completion = bound if bound is not None else self.completion_bound(spec)
        prompt = prompt_bound(request)
        return Hold(spec, prompt, completion, price.cost(prompt, completion), bound is not None,
                    bound is None and spec not in self.longest)

    def best_effort(self, specs: list[str]) -> str | None:
        """Before the run: the endpoints whose calls without max_tokens the cap cannot bound (a price but no
        known maximum output), and by how much one such call can pass it, in one sentence; None: none."""
        loose = [(s, p) for s in dict.fromkeys(specs) if s and s != "rules"
                 and (p := self.table.price(s)) is not None and not p.free and p.max_output is None]
        if not loose:
            return None
        per = "; ".join(f"{s}: ${p.cost(0, 1000):.4f} per 1,000 reply tokens past it" for s, p in loose)
        return (f"--max-cost is best-effort for {', '.join(s for s, _ in loose)}: no maximum output is known for "
                f"{'it' if len(loose) == 1 else 'them'}, so a call that sends no max_tokens reserves twice the "
                f"longest reply seen (at least {COMPLETION_FLOOR:,} tokens, the first call alone), and one reply "
                f"longer than that passes the cap by what its tokens beyond cost ({per}); the spend line shows "
                f"it. Give max_output_tokens in a --prices entry to make the cap hold")

    async def reserve(self, spec: str, request: Request, default_max_tokens: int | None = None) -> Hold | None:
        """Reserve one attempt's worst case (None for a free endpoint). When it does not fit beside the
        calls in flight, or it is an endpoint's first unbounded call and another is out, wait for a call
        to settle; when it does not fit with none in flight, stop the run."""
        price = self.price(spec)
        if price.free:
            return None
        while not self.stopped:
            hold = self._hold(spec, price, request, default_max_tokens)
            if hold.probe and spec in self.probing:
                await self._next_settle()
                continue
            if self.spent + self.reserved + hold.cost <= self.cap:
                self.reserved += hold.cost
                self.in_flight += 1
                if hold.probe:
                    self.probing.add(spec)
                return hold
            if not self.in_flight:
                self.stopped, self.next_worst, self.next_spec = True, hold.cost, spec
                break
            await self._next_settle()
        while self.in_flight:  # the calls already sent are waited for, so their replies are stored
            await self._next_settle()
        raise BudgetStop(self)

    def settle(self, hold: Hold | None, resp: Response | None = None, error_kind: str | None = None, *,
               sent: bool = True) -> None:
        """The attempt is over: its reservation becomes what it is counted at. `resp` is its reply (ok or
        not), `error_kind` its failure where it raised; neither: it was cancelled in flight. An attempt
        never `sent` (cancelled while it waited for a connection) costs nothing."""
        if hold is None:
            return
        self.reserved -= hold.cost
        self.in_flight -= 1
        if hold.probe:
            self.probing.discard(hold.spec)
        kind = resp.error_kind if resp is not None and not resp.ok else error_kind
        rule, cost = None, 0.0
        if not sent or kind in UNBILLED:
            pass
        elif resp is not None and resp.ok:
            rule, cost = self._reply_cost(hold, resp)
        else:
            rule = {None: "reservation: cancelled in flight", "timeout": "reservation: timed out"}.get(
                kind, f"reservation: {kind} after sending")
            cost = hold.cost
        if rule is not None:
            self.spent += cost
            self.calls += 1
            self.priced_by[rule] += 1
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _reply_cost(self, hold: Hold, resp: Response) -> tuple[str, float]:
        """A reply's rule and cost, and what it teaches about the endpoint's reply lengths."""
        p, c = resp.prompt_tokens, resp.completion_tokens
        text_tokens = len(resp.text or "") // CHARS_PER_TOKEN  # the reply's length as the dry run counts it
        sane = c if c is not None and 0 < c <= MAX_SANE_TOKENS else 0
        seen = max(sane, text_tokens)
        self.longest[hold.spec] = max(self.longest.get(hold.spec, 0), seen)
        n = self.lengths.setdefault(hold.spec, [0, 0])
        n[0] += 1
        n[1] += seen
        if p is None or c is None:
            return "reservation: no usage reported", hold.cost
        if p == 0 or (c == 0 and resp.text):
            return "reservation: usage zero", hold.cost
        if p > hold.prompt or c > hold.completion:
            if not hold.bounded and p <= hold.prompt and c <= MAX_SANE_TOKENS:  # a long reply, not a lie
                self.beyond += self.price(hold.spec).cost(0, c - hold.completion)
            return "reservation: usage above its bound", hold.cost
        return USAGE, self.price(hold.spec).cost(p, c)

    async def _next_settle(self) -> None:
        w = asyncio.get_running_loop().create_future()
        self._waiters.append(w)
        await w

    def typical_completion(self) -> dict[str, int]:
        """Per endpoint, the mean reply length seen: what the calls left are estimated at."""
        return {spec: total // n for spec, (n, total) in self.lengths.items() if n}

    def account(self) -> str:
        """What was spent and by which rules, in one sentence."""
        rules = ", ".join(f"{n} at {rule}" for rule, n in self.priced_by.most_common())
        counted = f"{self.calls} calls in this run ({rules or 'none sent'}; stored calls cost nothing)"
        if self.beyond > 0:  # the real spend first: the cap did not hold it (best_effort)
            head = (f"spent ~${self.spent + self.beyond:.4f} as the servers reported: ~${self.spent:.4f} counted "
                    f"against the cap on {counted}, and ~${self.beyond:.4f} more that replies without max_tokens "
                    f"reported past their reservation (a model with no known maximum output: the cap is "
                    f"best-effort there)")
        else:
            head = f"spent ~${self.spent:.4f} on {counted}"
        return (f"{head}. Each call is counted at the usage its server reported, up to its reservation (prompt: "
                f"its UTF-8 bytes + {PROMPT_OVERHEAD_MESSAGE} a message + {PROMPT_OVERHEAD_REQUEST}; completion: "
                f"max_tokens, else the model's maximum output, else twice the longest reply seen, at least "
                f"{COMPLETION_FLOOR} tokens); usage missing, zero or above that, and any attempt that may have "
                f"been billed without a reply, at its reservation")
