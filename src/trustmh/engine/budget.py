"""`trustmh run --max-cost USD`: the spend cap, checked before each call is sent.

Every call an endpoint is about to send reserves its estimated cost (prompt characters / 4 and the
request's max_tokens, else the larger of prices.DEFAULT_COMPLETION_TOKENS and the longest reply this
endpoint has returned, at the endpoint's price). A call that would take what is spent plus what is
reserved past the cap waits for the calls in flight to settle; one that does not fit with none in flight
is not sent: from then on no call leaves, and the run stops with BudgetStop once the calls in flight are
stored. When a reply arrives its reservation is replaced by its cost
from the token counts the server reported (the estimate where it reported none; nothing for a call that
failed before an answer, the estimate for a timeout, which the server may have worked on).

Stored calls are never sent, so they cost nothing: the cap bounds what one invocation spends, and
running the same command again continues where the last one stopped. The cap holds as long as replies
are no longer than estimated; a task that sets max_tokens bounds them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .prices import DEFAULT_COMPLETION_TOKENS, Price, PriceTable, completion_tokens, prompt_tokens
from ..types import Request, Response


class BudgetStop(Exception):
    """The next call would pass --max-cost: nothing more was sent."""

    def __init__(self, budget: "Budget"):
        super().__init__(f"--max-cost {budget.cap:.2f} USD reached")
        self.budget = budget


@dataclass
class Budget:
    cap: float
    table: PriceTable
    spent: float = 0.0
    calls: int = 0  # calls paid for (sent and settled)
    reserved: float = 0.0
    in_flight: int = 0
    stopped: bool = False
    longest: dict[str, int] = field(default_factory=dict)  # endpoint spec -> longest completion seen
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)  # reserve() calls waiting for a settle

    def price(self, spec: str) -> Price:
        price = self.table.price(spec)
        if price is None:  # the CLI checks every endpoint first (prices.check_priced); a plugin's may slip by
            raise BudgetStop(self)
        return price

    def estimate(self, spec: str, request: Request) -> tuple[int, int]:
        completion = completion_tokens(request.params)
        if not any(k in request.params for k in ("max_tokens", "max_completion_tokens", "max_new_tokens")):
            completion = max(DEFAULT_COMPLETION_TOKENS, self.longest.get(spec, 0))
        return prompt_tokens(request.messages), completion

    async def reserve(self, spec: str, request: Request) -> float:
        """Reserve the call's estimated cost. When it does not fit beside the calls in flight, wait for them
        to settle; when it does not fit with none in flight, stop the run."""
        price = self.price(spec)
        if price.free:
            return 0.0
        held = price.cost(*self.estimate(spec, request))
        while not self.stopped and self.spent + self.reserved + held > self.cap:
            if not self.in_flight:
                self.stopped = True
                break
            await self._next_settle()
        if self.stopped:
            while self.in_flight:  # the calls already sent are waited for, so their replies are stored
                await self._next_settle()
            raise BudgetStop(self)
        self.reserved += held
        self.in_flight += 1
        return held

    def settle(self, spec: str, request: Request, held: float, resp: Response | None) -> None:
        """The call is over: its reservation becomes what it cost."""
        price = self.price(spec)
        if price.free:
            return
        self.reserved -= held
        self.in_flight -= 1
        if resp is not None and resp.ok:
            est_prompt, est_completion = self.estimate(spec, request)
            p = resp.prompt_tokens if resp.prompt_tokens is not None else est_prompt
            c = resp.completion_tokens if resp.completion_tokens is not None else est_completion
            self.longest[spec] = max(self.longest.get(spec, 0), c)
            self.spent += price.cost(p, c)
            self.calls += 1
        elif resp is None or resp.error_kind == "timeout":  # cancelled or timed out: it may have been worked on
            self.spent += held
            self.calls += 1
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def _next_settle(self) -> None:
        w = asyncio.get_running_loop().create_future()
        self._waiters.append(w)
        await w


def stop_message(budget: Budget, spec, run_dir) -> str:
    """What was spent and what remains, once a run stopped at its cap: the rest is the dry run's plan of
    the calls not stored yet, priced the same way."""
    from .prices import plan_costs, total_cost
    from . import context, prepare
    from .plan import plan
    ctx = context(spec)
    prepared, _ = prepare(spec, ctx)
    lines = plan_costs(plan(spec, ctx, prepared, run_dir), spec, budget.table)
    left, unpriced = total_cost(lines)
    n_left = sum(line.calls for line in lines)
    return (f"stopped before --max-cost {budget.cap:.2f} USD would be passed: spent ~${budget.spent:.4f} on "
            f"{budget.calls} calls in this run (from the tokens the servers reported; stored calls cost nothing); "
            f"{n_left} calls remain, ~${left:.2f}{'+?' if unpriced else ''} estimated. Every reply so far is "
            f"stored: rerun the same command to continue (with a higher --max-cost to finish sooner); "
            f"`--dry-run` shows the rest")
