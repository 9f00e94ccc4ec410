"""Replies SQLite cannot hold, and damaged store files: one bad reply never costs its neighbours, and a
damaged store is a one-line error saying how to recover (issue 14)."""

from __future__ import annotations

import sqlite3

import pytest

from trustmh.errors import UserError
from trustmh.engine._store import Store
from trustmh.types import ModelError, Response


def row(n: int, resp: Response):
    return (f"key-{n}", "openai/fake", "generate", ("t", str(n), ""), resp)


@pytest.mark.parametrize("field,value,expect", [
    ("prompt_tokens", 2**63, None), ("prompt_tokens", {"n": 1}, None), ("completion_tokens", -1, None),
    ("completion_tokens", True, None), ("completion_tokens", 2**63 - 1, 2**63 - 1), ("prompt_tokens", 7, 7),
    ("finish_reason", {"why": "stop"}, None), ("finish_reason", ["stop"], None), ("finish_reason", "stop", "stop"),
])
def test_response_types_every_field_a_server_sends(field, value, expect):
    r = Response("hi", **{field: value})
    assert getattr(r, field) == expect


def test_lone_surrogates_are_replaced_and_pairs_kept():
    r = Response("a\ud800b \ud83d\ude00", error=None)
    assert r.text == "a\ufffdb \U0001F600"
    r.text.encode("utf-8")  # storable
    assert Response(None, error_kind="server_error", error="HTTP 500: \udfff").error == "HTTP 500: \ufffd"


@pytest.mark.parametrize("text", [{"content": "x"}, ["x"], 5, b"bytes"])
def test_text_that_is_not_a_string_is_malformed(text):
    with pytest.raises(ModelError) as info:
        Response(text)
    assert info.value.kind == "malformed"


def test_sanitised_replies_store_and_read_back(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    bad = Response("x\ud800", finish_reason={"o": 1}, prompt_tokens=2**70, completion_tokens={"a": 1})
    store.put_calls([row(1, bad)])
    back = store.get_call("key-1")
    assert (back.text, back.finish_reason, back.prompt_tokens, back.completion_tokens) == ("x\ufffd", None, None, None)


@pytest.mark.parametrize("field,value", [("prompt_tokens", 2**64), ("text", "\ud800"), ("finish_reason", {"a": 1})])
def test_one_unstorable_reply_does_not_lose_the_batch(tmp_path, field, value):
    """A value that got past Response's checks (set after construction) is stored as that sample's
    `malformed` error, its neighbours in the same commit as the replies they are."""
    store = Store(tmp_path / "s.sqlite")
    good1, bad, good2 = Response("one"), Response("two"), Response("three")
    setattr(bad, field, value)
    store.put_calls([row(1, good1), row(2, bad), row(3, good2)])
    assert store.get_call("key-1").text == "one" and store.get_call("key-3").text == "three"
    stored = store.get_call("key-2")
    assert stored.text is None and stored.error_kind == "malformed" and "cannot be stored" in stored.error
    # The caller's Response says what the store holds: it is not scored as a reply.
    assert bad.error_kind == "malformed" and bad.text is None and not bad.ok
    assert store.ok_keys(["key-1", "key-2", "key-3"]) == {"key-1", "key-3"}


def test_a_failing_database_still_raises(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    store.db.execute("DROP TABLE calls")  # not a value problem: nothing to fall back to
    with pytest.raises(sqlite3.OperationalError):
        store.put_calls([row(1, Response("one"))])


def _filled(path):
    store = Store(path)
    store.put_calls([row(n, Response("reply " * 200)) for n in range(300)])
    store.check_integrity()  # a sound store passes
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()


def test_damaged_store_is_a_user_error_with_the_way_out(tmp_path):
    path = tmp_path / "s.sqlite"
    _filled(path)
    with open(path, "r+b") as fh:  # garble pages in the middle of the calls table
        fh.seek(8 * 4096)
        fh.write(b"\xa5" * 3 * 4096)
    store = Store(path)
    with pytest.raises(UserError) as info:
        store.check_integrity()
    msg = str(info.value)
    assert "is damaged" in msg and "move it aside" in msg and str(path) in msg and "\n" not in msg


def test_file_that_is_not_a_database_says_how_to_recover(tmp_path):
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"\x00garbage" * 1000)
    with pytest.raises(UserError, match="is damaged .* move it aside"):
        Store(path).check_integrity()


def test_token_counts_at_the_limit_never_brick_a_run_folder(tmp_path):
    """Issue 24: one reply reporting 2^63-1 completion tokens made every later `run` and `score` on the
    folder fail with "integer overflow" (SQL sum over the calls)."""
    store = Store(tmp_path / "s.sqlite")
    store.put_calls([row(1, Response("a", prompt_tokens=3, completion_tokens=2**63 - 1)),
                     row(2, Response("b", prompt_tokens=4, completion_tokens=5)),
                     row(3, Response("c", prompt_tokens=2**63 - 1, completion_tokens=2))])
    assert store.totals() == (7, 7)  # the impossible counts are left out, the sane ones summed
    store.close()


def test_a_finished_run_with_an_absurd_token_count_rescores(tmp_path):
    from conftest import run_quiet, run_spec
    from trustmh.engine import load_spec, run
    out = tmp_path / "run"
    run_quiet(run_spec(models=["baseline/counselor"], suite="sample", tasks="ethics", n_boot=0), out)
    db = sqlite3.connect(out / "store.sqlite")
    with db:
        db.execute("UPDATE calls SET completion_tokens = ?", (2**63 - 1,))
    db.close()
    _, results, _ = run(load_spec(out), out, generate=False)
    assert results.models["baseline/counselor"].tasks["ethics.reasoning"].n_samples > 1


def test_a_store_that_is_a_link_is_never_written_through(tmp_path):
    """A received run folder whose store.sqlite links to another database of the user's: refused."""
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE mine (x)")
    con.commit()
    con.close()
    before = other.read_bytes()
    run = tmp_path / "run"
    run.mkdir()
    (run / "store.sqlite").symlink_to(other)
    with pytest.raises(UserError, match="symbolic link"):
        Store(run / "store.sqlite")
    assert other.read_bytes() == before and not (tmp_path / "other.sqlite-wal").exists()
