"""A rubric walk in the judge stage: a judgement asked question by question (a `Chain` a task's `judgements`
returns, crisis.conversation's question-flow rubric), each answer stored as it arrives and the walk's verdict
stored whole under a key of its own, linked as the sample's verdict for that judge."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...types import Chain, Request, Response, Sample, Turn
from .._conversation import Chains, _key, run_chain
from .._endpoint import Endpoint
from .._requests import judge_request


async def judge_chain(c: Chains, ep: Endpoint, sample: Sample, rubric: Any, chain: Chain,
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
