"""The store's key sketches (engine/_store.KeySketch): a look-up the sketch answers "absent" skips SQLite,
so the sketch must never say "absent" of a key the store holds, however the key got there: written through
this object (a reply, a shared body, a Ray shard's rows merged), or by an earlier process (a resumed run)."""

from __future__ import annotations

import hashlib
import random
import sqlite3

from trustmh.engine._store import KeySketch, Store
from trustmh.types import Response


def key(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def row(n: int, resp: Response | None = None):
    return (key(n), "openai/fake", "judge", ("t", str(n), ""), resp or Response(f"reply {n}"))


def test_sketch_never_misses_and_rarely_says_maybe():
    rnd = random.Random(7)
    added = [f"{rnd.getrandbits(128):032x}" for _ in range(20_000)]
    sketch = KeySketch(added[:10_000])
    for k in added[10_000:]:
        sketch.add(k)
    assert all(k in sketch for k in added)
    others = [f"other-{rnd.getrandbits(128):032x}" for _ in range(20_000)]
    # two bits of 2^23 per key, 20,000 keys: a "maybe" for ~(2 * 20,000 / 2^23)^2 of absent keys (0.002 %)
    assert sum(k in sketch for k in others) < 20
    assert "x" not in KeySketch()


def test_every_write_path_is_found_by_the_look_ups(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    assert store.get_call(key(1)) is None and store.answer_for_body("body:1") is None  # sketches built, empty
    store.put_calls([row(1), row(2, Response(None, error_kind="server_error", error="HTTP 500"))],
                    bodies=[("body:1", key(1))])
    shard = Store(tmp_path / "shard.sqlite")
    shard.put_calls([row(3)], bodies=[("body:3", key(3))])
    store.merge_calls(shard.call_rows())
    store.merge_bodies(shard.body_rows())
    assert store.get_call(key(1)).text == "reply 1"
    assert store.get_call(key(2)).error_kind == "server_error"  # a failed call is found too (and retried)
    assert store.get_call(key(3)).text == "reply 3"
    assert store.answer_for_body("body:1")[0] == key(1) and store.answer_for_body("body:3")[0] == key(3)
    assert store.ok_keys([key(1), key(2), key(3), key(4)]) == {key(1), key(3)}
    assert store.get_call(key(4)) is None and store.answer_for_body("body:4") is None


def test_a_store_written_before_it_was_opened_is_read_whole(tmp_path):
    path = tmp_path / "store.sqlite"
    first = Store(path)
    first.put_calls([row(n) for n in range(50)], bodies=[(f"body:{n}", key(n)) for n in range(50)])
    first.close()
    with sqlite3.connect(path) as db:  # a row no Store object wrote (an older trustmh, a merged file)
        db.execute("INSERT INTO calls (key, endpoint, purpose, ok, text, created) VALUES (?, 'e', 'judge', 1, 'x', 0)",
                   (key(99),))
    again = Store(path)
    assert all(again.get_call(key(n)).text == f"reply {n}" for n in range(50))
    assert again.get_call(key(99)).text == "x"
    assert all(again.answer_for_body(f"body:{n}")[0] == key(n) for n in range(50))
    assert again.ok_keys([key(n) for n in range(60)] + [key(99)]) == {key(n) for n in range(50)} | {key(99)}
