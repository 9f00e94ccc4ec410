"""The records that flow through the pipeline: Item -> Sample -> Request -> Response -> Score.

Plain dataclasses (not pydantic) because millions of them may be created on a large run and they are
only serialised at the edges (store, samples.jsonl), where `to_json` helpers do it explicitly."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any, Callable, Generator


@dataclass(frozen=True)
class Item:
    """One record of a dataset. `id` is stable and taken from the data (line index, ID column, ...)."""

    id: str
    input: dict[str, Any]
    target: Any = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sample:
    """One prompt to send: an item, possibly perturbed (`variant`), rendered into chat messages."""

    task: str
    item: Item
    messages: list[dict[str, str]]
    variant: str = ""
    # Answer space for closed-form questions, e.g. ("1","2","3","4"). Only offline baselines read it.
    choices: tuple[str, ...] | None = None
    # Per-task generation overrides (max_tokens, temperature) merged over the run's defaults.
    params: dict[str, Any] = field(default_factory=dict)
    # Task id the model and judge requests are filed under, when not `task`: a robustness task's clean
    # sample is exactly its base task's request, so the store (and replay files) answer it once for both.
    request_task: str = ""
    # The paper's protocol: `params` are exactly the settings the original code sends, nothing added (no
    # run defaults, no seed).
    exact_params: bool = False
    # (part, text): the paper's protocol of a task whose original code words its system message by the
    # tested model's name (EmoBench's "/no_think" for Qwen) puts `text` in front of the first (system)
    # message when the model's name contains `part`, lower-cased; see engine._requests.generation_request.
    model_prefix: tuple[str, str] | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.task, self.item.id, self.variant)

    def to_json(self) -> dict[str, Any]:
        """The sample as a JSON-ready dict, in field order (as `asdict` gives it). Shallow: it shares the
        sample's messages, params and item values, since every caller serialises it at once; `asdict`'s deep
        copy cost ~0.2 ms a sample, paid for every sample a run stores."""
        it = self.item
        return {"task": self.task, "item": {"id": it.id, "input": it.input, "target": it.target, "meta": it.meta},
                "messages": self.messages, "variant": self.variant,
                "choices": list(self.choices) if self.choices is not None else None, "params": self.params,
                "request_task": self.request_task, "exact_params": self.exact_params,
                "model_prefix": self.model_prefix}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Sample":
        item = Item(**d["item"])
        choices = tuple(d["choices"]) if d.get("choices") is not None else None
        return cls(task=d["task"], item=item, messages=d["messages"], variant=d.get("variant", ""),
                   choices=choices, params=d.get("params") or {}, request_task=d.get("request_task", ""),
                   exact_params=bool(d.get("exact_params", False)),
                   model_prefix=tuple(d["model_prefix"]) if d.get("model_prefix") else None)


@dataclass(frozen=True)
class Request:
    """What a model endpoint receives. `meta` identifies the sample (replay files key on it) and is
    not part of the cache key, so the same prompt for two tasks is still two entries (task is hashed)."""

    messages: list[dict[str, str]]
    params: dict[str, Any]
    task: str = ""
    item_id: str = ""
    variant: str = ""
    purpose: str = "generate"  # or "judge"
    choices: tuple[str, ...] | None = None

    def cache_key(self, endpoint: str) -> str:
        return _key_of(f'{{"endpoint":{_json(endpoint)},"item_id":{_json(self.item_id)}{self._asked},'
                       f'"task":{_json(self.task)},"variant":{_json(self.variant)}}}')

    def body_key(self, endpoint: str) -> str:
        """The hash of what `endpoint` is sent (messages, params, choices) and why (purpose), without the
        sample it is for: two samples asking the same of a model whose reply depends on the body alone."""
        return "body:" + _key_of(f'{{"choices":{_json(self.choices)},"endpoint":{_json(endpoint)}{self._asked}}}')

    @functools.cached_property
    def _asked(self) -> str:
        """The part both keys hold, in its sorted place: made once for the two (a judge's messages hold the
        reply it judges: their JSON was most of a key's cost). A Request is never changed once built."""
        return f',"messages":{_json(self.messages)},"params":{_json(self.params)},"purpose":{_json(self.purpose)}'


_canonical = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode


def _json(value: Any) -> str:
    """`value` as json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")) writes it."""
    return encode_basestring(value) if type(value) is str else _canonical(value)


def _key_of(blob: str) -> str:
    """The sha256 of a payload's compact, key-sorted JSON (the payload's keys written in sorted order, each
    value as `_json` writes it: the text json.dumps gives for the whole). Stores and replay files hold these
    keys, so the text must never change: tests/test_request_keys.py checks it against json.dumps of the
    whole payload, and holds keys an earlier version wrote."""
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# Kinds of failure. Retryable ones are retried with back-off; the rest are final for this run and
# counted in results (never turned into a score). context_length: the prompt (with the reply's max tokens)
# does not fit the model's context window; the sample is an error of the model, never cut to fit.
# reply_too_large: a reply over the size its caller bounds it to (a conversation's message), never stored.
RETRYABLE = {"rate_limit", "server_error", "timeout", "connection", "malformed"}
ERROR_KINDS = RETRYABLE | {"bad_request", "context_length", "auth", "content_filter", "empty_response",
                           "not_recorded", "not_found", "reply_too_large", "other"}


class ModelError(Exception):
    def __init__(self, kind: str, message: str, *, retry_after: float | None = None,
                 status: int | None = None):
        super().__init__(message)
        self.kind = kind if kind in ERROR_KINDS else "other"
        self.message = message
        self.retry_after = retry_after
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE


# SQLite's INTEGER is a signed 64-bit number: a larger token count cannot be stored at all.
_MAX_COUNT = 2**63 - 1
_MAX_FINISH = 64  # finish reasons are short words; a longer one is a server's garbage, kept readable


def _storable_text(text: str) -> str:
    """`text` with lone surrogates (a JSON reply may hold "\\ud800", which json.loads accepts) replaced by
    U+FFFD: SQLite, samples.jsonl and the terminal all need valid UTF-8, and one such reply used to fail
    the commit of every reply stored with it. The utf-16 round trip keeps a surrogate pair as its char."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _count(value: Any) -> int | None:
    """A token count as the store can hold it, else None: a count is metadata, never worth a sample."""
    return value if type(value) is int and 0 <= value <= _MAX_COUNT else None


@dataclass
class Response:
    """A model's reply, or a failed call (error_kind set). Every field is checked on construction, because
    the values come from a server: text must be a string (anything else is a `malformed` ModelError, which
    the backend building it raises as that sample's error), token counts are ints SQLite can store or None,
    finish_reason a short string or None, and lone surrogates are replaced."""

    text: str | None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    attempts: int = 1  # 0: none of its own, answered by an identical request sent for another sample
    error_kind: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.text is not None:
            if not isinstance(self.text, str):
                raise ModelError("malformed", f"unreadable response: text is {type(self.text).__name__}, not a string")
            self.text = _storable_text(self.text)
        finish = self.finish_reason
        self.finish_reason = _storable_text(finish[:_MAX_FINISH]) if isinstance(finish, str) else None
        self.prompt_tokens = _count(self.prompt_tokens)
        self.completion_tokens = _count(self.completion_tokens)
        if self.error is not None:  # error messages quote server bodies
            self.error = _storable_text(str(self.error))

    @property
    def ok(self) -> bool:
        return self.error_kind is None


@dataclass
class Score:
    """Per-sample outcome: named numbers, plus a reason for every number that could not be derived.

    A value absent from `values` and present in `unscored` is excluded from its metric and shown.

    `no_answer` says why the tested model's reply gave no usable answer (empty, refusal, unparsable, off the
    task's vocabulary, out of range): the task has then scored it against the model (wrong, a miss) and set
    `answered` to 0. `judge_failed` says why a judge's verdict could not be used (judge API error, unusable
    judge output): that is not the model's doing, so the judged values are left out and counted apart."""

    values: dict[str, float] = field(default_factory=dict)
    unscored: dict[str, str] = field(default_factory=dict)
    no_answer: str | None = None
    judge_failed: str | None = None
    parsed: Any = None  # what was extracted from the reply (a letter, a rating), for the drill-down
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Turn:
    """One call of a chain of dependent calls (a conversation's turn, a rubric question): who answers it
    ("user": the run's simulated user, "model": the tested model, "judge": the judge), what it is sent, a
    label unique in its chain (its request's purpose, so two turns never share a stored reply), and its
    settings (None: the role's own, the sample's for the model, the judge's for a judge)."""

    role: str
    messages: list[dict[str, str]]
    label: str
    params: dict[str, Any] | None = None


@dataclass(frozen=True)
class Chain:
    """Calls that each depend on the replies before them. `steps()` makes a fresh generator that yields each
    Turn, is sent that turn's Response (stored or new), and returns the Response the whole chain stands for
    (a conversation's record, a rubric walk's replies): the sample's reply, or its verdict. The engine
    stores every turn the moment it arrives and the result under a key of its own, so a resumed chain reads
    its stored turns back and pays for none twice: `steps` must ask the same turns for the same replies.
    `ident` is what else the result depends on (a rubric file, the number of turns), for that key; `bound`
    the most calls, prompt tokens and completion tokens it can take per role (for --dry-run); `max_chars` the
    longest reply a turn may have: a longer one is sent to the chain as the error `reply_too_large`, and
    never stored (a chain's result holds every reply, and a conversation sends them on)."""

    steps: Callable[[], Generator[Turn, Response, Response]]
    ident: str = ""
    bound: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    max_chars: int | None = None
