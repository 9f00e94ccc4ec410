"""What a run would cost, as an estimate: the price table (trustmh's shipped `prices.toml`, each entry with
the provider page its price was checked on and the date it was read, or marked unverified; the user's
`--prices FILE.toml` over it), the token estimates a call is priced by, and the cost of a dry run's plan per
model and judge.

Everything here is an estimate and says so: prompt tokens are characters / 4 (the dry run's rule),
completion tokens the request's `max_tokens` where a task sets one (an upper bound) and otherwise
DEFAULT_COMPLETION_TOKENS, and list prices go stale. A model answered on this machine (baselines, replay
files, hf/ models) costs nothing; a remote model missing from the table has no price (shown as unknown,
and refused by --max-cost, which cannot keep a cap on what it cannot price)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from ..errors import UserError

SHIPPED = Path(__file__).with_name("prices.toml")
CHARS_PER_TOKEN = 4  # how prompt tokens are estimated before a call (the dry run, --max-cost)
DEFAULT_COMPLETION_TOKENS = 300  # a reply's length where the request sets no max_tokens: a paragraph or two
# Sane bounds, refused beyond with one line: the dearest list price is a few hundred USD per million tokens,
# and no model writes a million tokens in one reply (a larger --max-tokens or price is a typo or a bomb:
# 1e308 made a dry run cost inf).
MAX_PRICE_PER_MTOK = 10_000
MAX_REPLY_TOKENS = 1_000_000
LOCAL_PROVIDERS = ("baseline", "replay", "hf")  # answered in this process: free
MAX_FILE_BYTES = 1_000_000
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")  # a dated snapshot of a listed model
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
UNVERIFIED = "unverified"  # a shipped price not checked against the provider's own pricing page
_KEYS = {"input_per_mtok", "output_per_mtok", "source", "read", "max_output_tokens"}


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float
    # where the price came from: "<the provider's page> (read <date>)" or "unverified" for a shipped entry,
    # the user's file (with the source it gives), or "local"
    source: str
    # the most completion tokens one reply of this model can have (the provider's documented maximum
    # output): what --max-cost reserves for a call that sends no max_tokens; None: not known
    max_output: int | None = None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6

    @property
    def free(self) -> bool:
        return self.input_per_mtok == 0 and self.output_per_mtok == 0

    @property
    def unverified(self) -> bool:
        return self.source == UNVERIFIED


@dataclass
class PriceTable:
    prices: dict[str, Price] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def price(self, spec: str) -> Price | None:
        """The price of a model spec: its own entry, else its undated entry (a dated snapshot), free for a
        local provider, None when unknown."""
        provider = spec.partition("/")[0]
        if provider in LOCAL_PROVIDERS:
            return Price(0.0, 0.0, "local")
        name = spec.partition("#")[0]
        return self.prices.get(name) or self.prices.get(_SNAPSHOT.sub("", name))

    def label(self) -> str:
        parts = ["trustmh's table of list prices (each entry's source page and the date it was read, or "
                 "'unverified', in trustmh/engine/prices.toml)"] + [f"overridden by {f}" for f in self.files[1:]]
        return "; ".join(parts)


def _read(path: Path, shipped: bool) -> dict[str, Any]:
    """The table's TOML, through the one reader of user files (data/loaders.read_user_toml)."""
    from ..data.loaders import read_user_toml
    return read_user_toml(path, "shipped price table" if shipped else "--prices file", MAX_FILE_BYTES)


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_PRICE_PER_MTOK:
        raise UserError(f"{where}: must be a price in USD per million tokens (a number ≥ 0 and at most "
                        f"{MAX_PRICE_PER_MTOK:,}), not {v!r}"[:300])
    return float(v)


def _text(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v or len(v) > 300 or not v.isprintable():
        raise UserError(f"{where}: must be a line of text (at most 300 characters)")
    return v


def _entries(doc: dict[str, Any], path: Path, shipped: bool) -> dict[str, Price]:
    models = doc.get("models", {})
    if not isinstance(models, dict):
        raise UserError(f"--prices {path}: [models] must be a table of model specs")
    out = {}
    for name, entry in models.items():
        where = f"{'shipped price table' if shipped else '--prices'} {path}: models.\"{name}\""[:200]
        if not isinstance(entry, dict) or set(entry) - _KEYS or not {"input_per_mtok", "output_per_mtok"} <= set(entry):
            raise UserError(f"{where}: give input_per_mtok and output_per_mtok (USD per million tokens), and "
                            f"optionally source and read (where and when the price was read)")
        source = _text(entry["source"], f"{where}.source") if "source" in entry else None
        read = _text(entry["read"], f"{where}.read") if "read" in entry else None
        if read is not None and not _DATE.fullmatch(read):
            raise UserError(f"{where}.read: a date, YYYY-MM-DD")
        if shipped:  # every shipped price says where it was checked, or that it was not
            if source is None or (source != UNVERIFIED and (not source.startswith("https://") or read is None)):
                raise UserError(f"{where}: a shipped price needs source = its provider's page and read = the date, "
                                f"or source = \"{UNVERIFIED}\"")
            label = source if source == UNVERIFIED else f"{source} (read {read})"
        else:
            label = str(path) + (f": {source}" if source else "") + (f" (read {read})" if read else "")
        out[name] = Price(_number(entry["input_per_mtok"], f"{where}.input_per_mtok"),
                          _number(entry["output_per_mtok"], f"{where}.output_per_mtok"), label,
                          _max_output(entry.get("max_output_tokens"), f"{where}.max_output_tokens"))
    return out


def _max_output(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_REPLY_TOKENS:
        raise UserError(f"{where}: must be a whole number of tokens from 1 to {MAX_REPLY_TOKENS:,} (the most one "
                        f"reply of the model can have), not {v!r}"[:300])
    return v


def load_prices(user_file: Path | None = None) -> PriceTable:
    """The shipped table, with `user_file`'s entries replacing those of the same name."""
    table = PriceTable(_entries(_read(SHIPPED, shipped=True), SHIPPED, shipped=True), [str(SHIPPED)])
    if user_file is not None:
        for name, price in _entries(_read(user_file, shipped=False), user_file, shipped=False).items():
            known = table.prices.get(name)  # a model's maximum output is not a price: an override keeps it
            keep = price.max_output is None and known is not None
            table.prices[name] = replace(price, max_output=known.max_output) if keep else price
        table.files.append(str(user_file))
    return table


def prompt_tokens(messages: Iterable[dict[str, Any]]) -> int:
    return sum(len(m.get("content") or "") for m in messages if isinstance(m, dict)) // CHARS_PER_TOKEN


def completion_tokens(params: dict[str, Any], default: int = DEFAULT_COMPLETION_TOKENS) -> int:
    """A reply's estimated length: at most the request's max_tokens when set, else `default`."""
    for key in ("max_tokens", "max_completion_tokens", "max_new_tokens"):
        v = params.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return default


@dataclass
class CostLine:
    """One endpoint's share of a plan: its calls, estimated tokens, price and cost (None: no price)."""

    role: str  # "model", "judge", "proxy judge"
    spec: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    price: Price | None = None

    @property
    def cost(self) -> float | None:
        return None if self.price is None else self.price.cost(self.prompt_tokens, self.completion_tokens)




def plan_costs(rows: list[Any], spec: Any, table: PriceTable) -> list[CostLine]:
    """Per tested model and per judge, the calls of a dry run's plan (engine/_plan.py's rows, stored calls
    already left out) priced by `table`."""
    lines: dict[tuple[str, str], CostLine] = {}

    def add(role: str, model: str, calls: int, prompt: int, completion: int) -> None:
        line = lines.get((role, model))
        if line is None:
            line = lines[(role, model)] = CostLine(role, model, price=table.price(model))
        line.calls += calls
        line.prompt_tokens += prompt
        line.completion_tokens += completion

    from ..judges.roles import JUDGE_ROLES, judges_of
    names = {name: role.label for name, role in JUDGE_ROLES.items()} | {"user": "simulated person"}
    judge_specs = {name: (judges_of(name, spec) or [(None, None)])[0][0] for name in JUDGE_ROLES}
    for m in spec.models:
        add("model", m, 0, 0, 0)
    for r in rows:
        add("model", r.model, r.model_calls, r.model_tokens, r.model_completion)
        for role, (calls, prompt, completion) in r.by_role.items():
            # "llm|<spec>": one judge of a panel (engine/_plan.py); "user|<spec>": a conversation's person
            role, _, judge = role.partition("|")
            add(names.get(role, role), judge or judge_specs.get(role) or role, calls, prompt, completion)
    return list(lines.values())


def total_cost(lines: list[CostLine]) -> tuple[float, list[CostLine]]:
    """The sum of the priced lines, and the lines with calls but no price (left out of the sum)."""
    unpriced = [line for line in lines if line.price is None and line.calls]
    return sum(line.cost or 0.0 for line in lines), unpriced


def check_priced(specs: Iterable[str], table: PriceTable) -> None:
    """--max-cost needs a price for every endpoint the run may call."""
    missing = [s for s in dict.fromkeys(specs) if s and s != "rules" and table.price(s) is None]
    if missing:
        raise UserError(f"--max-cost: no price for {', '.join(missing)}; add "
                        f"[models.\"{missing[0]}\"] input_per_mtok = … output_per_mtok = … to a --prices file "
                        f"(0 for a server of your own)")
