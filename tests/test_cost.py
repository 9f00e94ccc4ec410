"""What a run costs, before and while it runs: the price table (shipped, each price sourced or marked unverified;
--prices over it), the dry
run's cost per model and judge, and --max-cost, which stops a run before the next call would take its
spend past the cap and lets the same command continue. Token counts come from a loopback fake server
that reports the words it received and sent, so every dollar figure here is known by hand."""

import re

import pytest

from test_cli import assert_user_error
from trustmh.errors import UserError
from trustmh.engine._prices import DEFAULT_COMPLETION_TOKENS, load_prices
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.testing.wire import prompt_words

REPLY = "Answer: A because it is the kind choice"  # 8 words: 8 completion tokens on the fake server
PRICES = """
[models."openai/fake"]
input_per_mtok = 1000
output_per_mtok = 2000
[models."openai/judge"]
input_per_mtok = 500
output_per_mtok = 100
"""
PRICE = {"fake": (1000, 2000), "judge": (500, 100)}


def test_the_shipped_table_is_sourced_and_prices_specs_snapshots_and_local_models():
    import tomllib
    from trustmh.engine._prices import SHIPPED
    table = load_prices()
    # every shipped price names the provider page it was checked on and the date it was read, or says it was not
    for name, entry in tomllib.loads(SHIPPED.read_text()).get("models", {}).items():
        price = table.price(name)
        if entry["source"] == "unverified":
            assert price.unverified and "read" not in entry, name
        else:
            assert entry["source"].startswith("https://") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["read"]), name
            assert not price.unverified and price.source == f"{entry['source']} (read {entry['read']})"
    sonnet = table.price("anthropic/claude-sonnet-4-20250514")
    assert sonnet.source.startswith("https://docs.anthropic.com/") and not sonnet.unverified
    assert "prices.toml" in table.label()
    gpt = table.price("openai/gpt-4.1")
    assert (gpt.input_per_mtok, gpt.output_per_mtok) == (2.0, 8.0)
    assert gpt.cost(1_000_000, 500_000) == pytest.approx(2.0 + 4.0)
    assert table.price("openai/gpt-4.1-2025-04-14") == gpt  # a dated snapshot takes its model's price
    assert table.price("openai/gpt-4.1-mini") != gpt  # a longer name is another model, not a prefix match
    for local in ("baseline/counselor", "replay/x.jsonl", "hf/some/model"):
        assert table.price(local).free
    assert table.price("openai/my-own-model") is None


def test_a_user_table_replaces_entries_and_bad_tables_are_one_line_errors(cli, tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('[models."openai/gpt-4.1"]\ninput_per_mtok = 0\noutput_per_mtok = 0\n'
                 '[models."openai/mine"]\ninput_per_mtok = 1.5\noutput_per_mtok = 3\n')
    table = load_prices(f)
    assert table.price("openai/gpt-4.1").free and table.price("openai/mine").output_per_mtok == 3.0
    assert table.price("openai/gpt-4o").input_per_mtok == 2.5  # the rest of the shipped table stays
    assert str(f) in table.label()
    f.write_text('[models."openai/mine"]\ninput_per_mtok = 1\noutput_per_mtok = 2\nsource = "my invoice"\n'
                 'read = "2026-01-31"\n')
    assert load_prices(f).price("openai/mine").source == f"{f}: my invoice (read 2026-01-31)"
    for text, needle in (("[models", "not valid TOML"), ('[models."x/y"]\ninput_per_mtok = -1\noutput_per_mtok = 1', "≥ 0"),
                         ('[models."x/y"]\ninput_per_mtok = 1', "give input_per_mtok and output_per_mtok"),
                         ('[models."x/y"]\ninput_per_mtok = 1\noutput_per_mtok = 1\nread = "last week"', "YYYY-MM-DD"),
                         ('[models."x/y"]\ninput_per_mtok = 1\noutput_per_mtok = 1\nsource = 3', "line of text"),
                         ('[models."x/y"]\ninput_per_mtok = "cheap"\noutput_per_mtok = 1', "a number"),
                         ("models = 3", "must be a table")):
        f.write_text(text)
        with pytest.raises(UserError, match=re.escape(needle)):
            load_prices(f)
    f.write_text("#" * 2_000_000)
    with pytest.raises(UserError, match="larger than"):
        load_prices(f)
    proc = cli("run", "--suite", "sample", "--tasks", "ethics", "--dry-run", "--prices", tmp_path / "missing.toml",
               cwd=tmp_path)
    assert_user_error(proc, "--prices file not found")


def test_a_models_maximum_output_is_read_kept_through_a_price_override_and_checked(tmp_path):
    """max_output_tokens (issue 47): shipped for the listed models, kept when a --prices entry changes only
    the price (it is the model's, not a price), replaced when the entry gives its own, refused when absurd."""
    shipped = load_prices()
    assert shipped.price("openai/gpt-4").max_output == 8192 and shipped.price("openai/gpt-4.1-2025-04-14").max_output == 32768
    user = tmp_path / "p.toml"
    user.write_text('[models."openai/gpt-4"]\ninput_per_mtok = 1\noutput_per_mtok = 2\n'
                    '[models."openai/gpt-4o"]\ninput_per_mtok = 1\noutput_per_mtok = 2\nmax_output_tokens = 99\n'
                    '[models."openai/mine"]\ninput_per_mtok = 1\noutput_per_mtok = 2\n')
    table = load_prices(user)
    assert (table.price("openai/gpt-4").output_per_mtok, table.price("openai/gpt-4").max_output) == (2.0, 8192)
    assert table.price("openai/gpt-4o").max_output == 99 and table.price("openai/mine").max_output is None
    for bad in ("0", "1.5", "true", '"8192"', "2000000"):
        user.write_text(f'[models."openai/x"]\ninput_per_mtok = 1\noutput_per_mtok = 2\nmax_output_tokens = {bad}\n')
        with pytest.raises(UserError, match="max_output_tokens: must be a whole number of tokens"):
            load_prices(user)


def test_the_dry_run_names_each_shipped_price_source_and_marks_the_unverified(cli, tmp_path):
    proc = cli("run", "--model", "openai/gpt-4o", "--judge", "anthropic/claude-sonnet-4", "--suite", "sample",
               "--tasks", "ethics", "--limit", "2", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "2.5, 10 unverified" in text  # the cost table's price cell of an unchecked price
    assert ("price sources: openai/gpt-4o: unverified; anthropic/claude-sonnet-4: "
            "https://docs.anthropic.com/en/docs/about-claude/pricing (read ") in text
    assert "An unverified price was not checked against its provider's pricing page" in text
    with FakeLLMServer(reply=lambda body: REPLY) as srv:  # a capped run says its cap rests on an unchecked price
        capped = cli("run", "--model", "openai/gpt-4o", "--base-url", srv.openai_base_url, "--judge", "rules",
                     "--suite", "sample", "--tasks", "ethics", "--limit", "2", "--bootstrap", "20", "--max-cost", "5",
                     "--out", tmp_path / "run", "--no-progress", cwd=tmp_path, env_extra=ENV)
    assert capped.returncode == 0, capped.stderr
    assert "--max-cost counts openai/gpt-4o at an unverified shipped price" in " ".join(capped.stderr.split())


def _args(srv, run, prices):
    return ["run", "--model", "openai/fake", "--base-url", srv.openai_base_url, "--judge", "openai/judge",
            "--judge-base-url", srv.openai_base_url, "--tasks", "ethics,sycophancy", "--suite", "sample",
            "--out", run, "--bootstrap", "100", "--prices", prices, "--no-progress", "--max-connections", "4",
            "--max-judge-failed", "1"]  # the fake judge's verdicts do not parse: not what these tests are about


ENV = {"OPENAI_API_KEY": "sk-test"}


def _cost_rows(stdout: str) -> dict[str, list[str]]:
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) == 9 and cells[1] in ("model", "judge", "total") and cells[3].isdigit():
            rows[cells[1]] = cells[2:8]
    return rows


def test_dry_run_prices_each_model_and_judge_from_what_the_run_then_sends(cli, tmp_path):
    prices = tmp_path / "p.toml"
    # A cent a prompt token for the model and a cent a completion token for the judge (10,000 USD per million,
    # the most a price may be): each cost is a hundredth of a token count.
    prices.write_text('[models."openai/fake"]\ninput_per_mtok = 1e4\noutput_per_mtok = 0\n'
                      '[models."openai/judge"]\ninput_per_mtok = 0\noutput_per_mtok = 1e4\n')
    run = tmp_path / "run"
    with FakeLLMServer(reply=lambda body: REPLY) as srv:
        dry = cli(*_args(srv, run, prices), "--dry-run", cwd=tmp_path, env_extra=ENV)
        assert dry.returncode == 0, dry.stderr
        assert srv.n_requests == 0
        rows = _cost_rows(dry.stdout)
        text = " ".join(dry.stdout.split())
        assert "ESTIMATED cost" in text and "not a bill" in text and "prices.toml" in text
        assert f"price sources: openai/fake: {prices}" in text and "An unverified price" not in text
        proc = cli(*_args(srv, run, prices), cwd=tmp_path, env_extra=ENV)
        assert proc.returncode == 0, proc.stderr
        sent = srv.requests
    model = [b for b in sent if b["model"] == "fake"]
    judge = [b for b in sent if b["model"] == "judge"]
    chars = sum(len(m["content"]) for b in model for m in b["messages"])
    # What the run sent, read off the wire: the model's prompt characters / 4, the judge's max_tokens (or
    # the default where a request sets none).
    assert rows["model"][:2] == ["openai/fake", str(len(model))]
    assert abs(int(rows["model"][2]) - chars / 4) <= len(model)  # rounded down per call
    assert float(rows["model"][5]) == pytest.approx(int(rows["model"][2]) / 100, abs=0.006)
    completion = sum(b.get("max_tokens") or DEFAULT_COMPLETION_TOKENS for b in judge)
    assert rows["judge"][:2] == ["openai/judge", str(len(judge))] and rows["judge"][3] == str(completion)
    assert float(rows["judge"][5]) == pytest.approx(completion / 100, abs=0.006)
    total = float(rows["total"][5])
    assert total == pytest.approx((int(rows["model"][2]) + completion) / 100, abs=0.006)
    assert f"estimated total: ${total:.2f}" in text


def _spent(bodies) -> float:
    """What the fake server's reported tokens cost: prompt words and the reply's words, at PRICE."""
    return sum((prompt_words(b) * PRICE[b["model"]][0] + len(REPLY.split()) * PRICE[b["model"]][1]) / 1e6
               for b in bodies)


def test_max_cost_stops_before_the_cap_and_the_same_command_continues(cli, tmp_path):
    prices = tmp_path / "p.toml"
    prices.write_text(PRICES)
    cap = 4
    with FakeLLMServer(reply=lambda body: REPLY, latency_s=0.02) as srv:
        dry = cli(*_args(srv, tmp_path / "plan", prices), "--dry-run", cwd=tmp_path, env_extra=ENV)
        planned = int(_cost_rows(dry.stdout)["total"][1])
        run = tmp_path / "run"
        seen, stops = 0, 0
        for _ in range(30):
            proc = cli(*_args(srv, run, prices), "--max-cost", cap, cwd=tmp_path, env_extra=ENV)
            bodies = srv.requests[seen:]
            seen += len(bodies)
            spent = _spent(bodies)
            assert spent <= cap  # never past the cap, counted from what the server billed
            if proc.returncode == 0:
                break
            stops += 1
            assert_user_error(proc, f"--max-cost {cap:.2f} USD", "remain", "rerun the same command")
            assert bodies, "each stopped invocation still made progress"
            said = re.search(r"spent ~\$([0-9.]+) on (\d+) calls", proc.stderr)
            assert float(said.group(1)) == pytest.approx(spent, abs=1e-4) and int(said.group(2)) == len(bodies)
            left = int(re.search(r"(\d+) calls remain", proc.stderr).group(1))
            assert left == planned - seen
        assert proc.returncode == 0 and stops >= 2
        assert seen == planned and srv.duplicate_paid_calls() == 0  # resuming paid for no stored call again
        assert (run / "results.json").is_file()
        # A cap below the first call's estimate sends nothing at all.
        proc = cli(*_args(srv, tmp_path / "tiny", prices), "--max-cost", "0.01", cwd=tmp_path, env_extra=ENV)
        assert_user_error(proc, "spent ~$0.0000 on 0 calls", f"{planned} calls remain")
        assert len(srv.requests) == seen


def test_score_max_cost_caps_re_judging_and_the_same_command_continues(cli, tmp_path):
    prices = tmp_path / "p.toml"
    prices.write_text(PRICES + '[models."openai/judge2"]\ninput_per_mtok = 500\noutput_per_mtok = 100\n')
    run = tmp_path / "run"
    with FakeLLMServer(reply=lambda body: REPLY, latency_s=0.02) as srv:
        assert cli(*_args(srv, run, prices), cwd=tmp_path, env_extra=ENV).returncode == 0
        first = len(srv.requests)
        args = ["score", run, "--judge", "openai/judge2", "--judge-base-url", srv.openai_base_url, "--prices", prices,
                "--no-progress", "--max-connections", "4", "--max-judge-failed", "1", "--max-cost", "2"]
        seen, stops = first, 0
        for _ in range(30):
            proc = cli(*args, cwd=tmp_path, env_extra=ENV)
            bodies = srv.requests[seen:]
            seen += len(bodies)
            assert {b["model"] for b in bodies} <= {"judge2"}  # re-judging never calls the tested model
            assert sum((prompt_words(b) * 500 + len(REPLY.split()) * 100) / 1e6 for b in bodies) <= 2
            if proc.returncode == 0:
                break
            stops += 1
            assert_user_error(proc, "--max-cost 2.00 USD", "rerun the same command")
        assert proc.returncode == 0 and stops >= 1 and srv.duplicate_paid_calls() == 0, (stops, seen, proc.stderr)


def test_max_cost_refuses_a_model_it_cannot_price(cli, tmp_path):
    with FakeLLMServer(reply=lambda body: REPLY) as srv:
        proc = cli("run", "--model", "openai/unpriced", "--base-url", srv.openai_base_url, "--suite", "sample",
                   "--tasks", "ethics", "--out", tmp_path / "run", "--max-cost", "5", cwd=tmp_path, env_extra=ENV)
        assert_user_error(proc, "no price for openai/unpriced", "--prices")
        assert_user_error(cli("run", "--suite", "sample", "--tasks", "ethics", "--max-cost", "-1", cwd=tmp_path),
                          "positive number")
        assert srv.n_requests == 0


def test_the_budget_waits_for_calls_in_flight_and_never_reserves_past_the_cap():
    """Many calls at once against one cap: what is spent plus what is reserved never passes it, a call that
    does not fit beside those in flight waits for them, and the stop comes only when one cannot fit with
    none in flight, after every call sent has settled."""
    import asyncio
    from trustmh.engine._budget import PROMPT_OVERHEAD_MESSAGE, PROMPT_OVERHEAD_REQUEST, Budget, BudgetStop
    from trustmh.engine._prices import Price, PriceTable
    from trustmh.types import Request, Response

    table = PriceTable({"openai/m": Price(1e6, 0.0, "test")})  # $1 a prompt token: cost = tokens
    budget = Budget(1000.0, table)
    req = Request([{"role": "user", "content": "x" * 40}], {"max_tokens": 5}, "t", "i", "", "generate", None)
    worst = 40 + PROMPT_OVERHEAD_MESSAGE + PROMPT_OVERHEAD_REQUEST  # a token is at least a byte: $112
    peak, settled, stopped = [0.0], [0], []

    async def call(k: int) -> None:
        try:
            hold = await budget.reserve("openai/m", req)
        except BudgetStop:
            stopped.append((k, budget.in_flight))
            return
        assert hold.cost == worst
        peak[0] = max(peak[0], budget.spent + budget.reserved)
        await asyncio.sleep(0.001 * (k % 3))
        budget.settle(hold, Response(text="ok", prompt_tokens=9, completion_tokens=1))
        settled[0] += 1

    async def main() -> None:
        await asyncio.gather(*(call(k) for k in range(120)))

    asyncio.run(main())
    assert peak[0] <= 1000.0
    # Each call reserves $112 and costs $9 once answered: after 98 ($882 spent) a 99th still fits ($882 + $112),
    # a 100th does not ($891 + $112).
    assert settled[0] == 99 and budget.spent == pytest.approx(891.0) and budget.calls == 99
    assert len(stopped) == 21 and all(in_flight == 0 for _, in_flight in stopped)
    assert budget.next_worst == worst and budget.priced_by == {"usage from the server": 99}


def test_prices_and_token_counts_outside_sane_bounds_are_refused_with_one_line(cli, tmp_path):
    """L5 (issue 38): a price of 1e308 was accepted (a dry run of inf USD) and --max-tokens 10^20 planned
    5 x 10^20 completion tokens; a usage of 2^63-1 is priced at its reservation (tests/test_spend_cap.py)."""
    from trustmh.engine._prices import MAX_PRICE_PER_MTOK, MAX_REPLY_TOKENS
    f = tmp_path / "p.toml"
    for value in ("1e308", "inf", "10001", "1e5"):
        f.write_text(f'[models."x/y"]\ninput_per_mtok = 1\noutput_per_mtok = {value}\n')
        with pytest.raises(UserError, match=f"at most {MAX_PRICE_PER_MTOK:,}"):
            load_prices(f)
    f.write_text(f'[models."x/y"]\ninput_per_mtok = {MAX_PRICE_PER_MTOK}\noutput_per_mtok = 0\n')
    assert load_prices(f).price("x/y").input_per_mtok == MAX_PRICE_PER_MTOK
    proc = cli("run", "--suite", "sample", "--tasks", "ethics", "--dry-run", "--prices", f, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for tokens in ("99999999999999999999", str(MAX_REPLY_TOKENS + 1)):
        proc = cli("run", "--suite", "sample", "--tasks", "ethics", "--dry-run", "--max-tokens", tokens, cwd=tmp_path)
        assert_user_error(proc, f"--max-tokens must be 1 to {MAX_REPLY_TOKENS:,}")
