"""The run store: one SQLite file (WAL) per run directory.

Rows, not files: the run's samples, and every model or judge call keyed by a hash of (endpoint,
full request). A response is committed the moment it arrives, so a killed run loses at most the
calls in flight and a rerun never pays for a stored call again. Failed calls are stored too (so
results can count them) and are retried by the next run."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..errors import UserError
from ..types import Response, Sample

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    task TEXT NOT NULL, item_id TEXT NOT NULL, variant TEXT NOT NULL, seq INTEGER NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY (task, item_id, variant));
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY, endpoint TEXT NOT NULL, purpose TEXT NOT NULL,
    task TEXT, item_id TEXT, variant TEXT,
    ok INTEGER NOT NULL, text TEXT, finish_reason TEXT, error_kind TEXT, error TEXT,
    prompt_tokens INTEGER, completion_tokens INTEGER, latency_s REAL, attempts INTEGER,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS bodies (body TEXT PRIMARY KEY, key TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS links (
    model TEXT NOT NULL, task TEXT NOT NULL, item_id TEXT NOT NULL, variant TEXT NOT NULL,
    rubric TEXT NOT NULL, judge TEXT NOT NULL, key TEXT NOT NULL, version TEXT NOT NULL,
    PRIMARY KEY (model, task, item_id, variant, rubric, judge));
"""
# `bodies` maps what an endpoint was sent (Request.body_key, for a request whose reply depends on its body
# alone: engine/_endpoint.py `flight_key`) to the call that answered it first, so an identical body asked
# later, by another sample or another run over this store, takes that reply instead of paying again.
# A link says which call answers which part of a sample: its generation (rubric '' and judge ''), or one of
# its judgements (rubric name, judge endpoint, and the rubric's version when it was judged). Scoring reads
# links and never rebuilds a request: a changed template cannot silently turn stored judgements into
# misses, and two judges' verdicts on one run live side by side.
LINK_COLUMNS = "(model, task, item_id, variant, rubric, judge, key, version)"
_INSERT_LINK = f"INSERT OR REPLACE INTO links {LINK_COLUMNS} VALUES (?,?,?,?,?,?,?,?)"
_INSERT_BODY = "INSERT OR IGNORE INTO bodies VALUES (?, ?)"


# No reply has more tokens than this (10^12): a larger count is a server's nonsense, left out of the totals.
TOKENS_CAP = 10**12
_INSERT_CALL = "INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
# What binding a value SQLite cannot hold raises: an int over 64 bits, a lone surrogate, an object.
_UNSTORABLE = (OverflowError, UnicodeEncodeError, TypeError, ValueError, sqlite3.InterfaceError,
               sqlite3.ProgrammingError)


def _call_row(row: tuple[str, str, str, tuple[str, str, str], Response], now: float) -> tuple:
    key, endpoint, purpose, ident, r = row
    return (key, endpoint, purpose, ident[0], ident[1], ident[2], int(r.ok), r.text, r.finish_reason,
            r.error_kind, r.error, r.prompt_tokens, r.completion_tokens, r.latency_s, r.attempts, now)


def sample_row(seq: int, s: Sample) -> tuple:
    """A sample as a row of `samples` (its run order, and its body as JSON)."""
    return (s.task, s.item.id, s.variant, seq, json.dumps(s.to_json(), ensure_ascii=False))


class KeySketch:
    """Which keys a table may hold: a Bloom filter (two bits of 2^23 per key, from the key's str hash) that
    never says "absent" of a key added to it, and rarely "maybe" of one never added (0.02 % at the 62,000
    calls of the whole benchmark for one model, ~3 % at twelve models' 750,000).
    A run asks the store for nearly every call it makes, before sending it, whether its key or its body is
    stored already; in a fresh run the answer is almost always no, and the SQL query that said so (~20-30
    µs) cost more than anything else of the call's look-ups. The sketch answers those in ~1 µs; a "maybe"
    asks SQLite as before. 1 MiB each (`calls` and `bodies`)."""

    BITS = 1 << 23
    _MASK = BITS - 1

    def __init__(self, keys: Iterable[str] = ()):
        self.bits = bytearray(self.BITS >> 3)
        for key in keys:
            self.add(key)

    def add(self, key: str) -> None:
        h = hash(key)
        a, b = h & self._MASK, (h >> 23) & self._MASK
        self.bits[a >> 3] |= 1 << (a & 7)
        self.bits[b >> 3] |= 1 << (b & 7)

    def __contains__(self, key: str) -> bool:
        h = hash(key)
        a, b = h & self._MASK, (h >> 23) & self._MASK
        return bool(self.bits[a >> 3] >> (a & 7) & 1 and self.bits[b >> 3] >> (b & 7) & 1)


class Store:
    def __init__(self, path: Path):
        self.path = Path(path)
        # A run folder may come from anyone: a store that is a link (to another database of the user's) or
        # not a regular file is refused, never opened for writing through.
        if self.path.is_symlink() or (self.path.exists() and not self.path.is_file()):
            raise UserError(f"refusing to open run store {self.path}: it is a symbolic link or not a regular file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fresh = not self.path.exists()
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            if fresh:
                os.chmod(self.path, 0o600)
            # WAL + synchronous=NORMAL: a commit survives the process being killed (not a power cut),
            # at ~tens of microseconds per commit, so every response can be committed as it arrives.
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA busy_timeout=5000")
            self.db.executescript(SCHEMA)
        except sqlite3.OperationalError as e:  # cannot open the file, locked
            raise UserError(f"cannot open run store {self.path}: {e}") from None
        except sqlite3.DatabaseError as e:  # "file is not a database", a malformed schema page
            raise UserError(_damaged(self.path, str(e))) from None
        except (sqlite3.Error, OSError) as e:
            raise UserError(f"cannot open run store {self.path}: {e}") from None
        # The keys of `calls` and of `bodies`, read when first asked for (a store opened to read its samples
        # or meta never reads them) and kept up to date by every write below: one process writes a run's
        # store (files.run_lock), through this object, and its calls are looked up and written from one
        # thread (the run's event loop; scoring threads read `linked` only).
        self._calls: KeySketch | None = None
        self._bodies: KeySketch | None = None

    def _calls_sketch(self) -> KeySketch:
        if self._calls is None:
            self._calls = KeySketch(r[0] for r in self.db.execute("SELECT key FROM calls"))
        return self._calls

    def _bodies_sketch(self) -> KeySketch:
        if self._bodies is None:
            self._bodies = KeySketch(r[0] for r in self.db.execute("SELECT body FROM bodies"))
        return self._bodies

    def _added(self, call_keys: Iterable[str] = (), body_keys: Iterable[str] = ()) -> None:
        """Keys about to be written (added first: a write that then fails leaves a "maybe", never a miss)."""
        if self._calls is not None:
            for key in call_keys:
                self._calls.add(key)
        if self._bodies is not None:
            for key in body_keys:
                self._bodies.add(key)

    def close(self) -> None:
        self.db.close()

    # --- meta -------------------------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def del_meta(self, key: str) -> None:
        self.db.execute("DELETE FROM meta WHERE k = ?", (key,))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    # --- samples ----------------------------------------------------------------------------------
    def clear_samples(self) -> None:
        """Forget the samples of an earlier run over this store (engine.prepare.Recorder records the new)."""
        self.db.execute("DELETE FROM samples")

    def add_samples(self, rows: Iterable[tuple]) -> None:
        """Rows of `sample_row`, in one transaction."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?, ?)", rows)

    def iter_samples(self, task: str, skip: Callable[[str, str], bool] | None = None) -> Iterator[Sample]:
        """`task`'s samples in run order; those `skip(item_id, variant)` is true of are not even parsed."""
        cur = self.db.execute("SELECT item_id, variant, body FROM samples WHERE task = ? ORDER BY seq", (task,))
        for item_id, variant, body in cur:
            if skip is None or not skip(item_id, variant):
                yield Sample.from_json(json.loads(body))

    def sample_counts(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT task, count(*) FROM samples GROUP BY task").fetchall())

    def sample_tasks(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT task FROM samples ORDER BY task")]

    # --- calls ------------------------------------------------------------------------------------
    def get_call(self, key: str) -> Response | None:
        if key not in self._calls_sketch():
            return None
        row = self.db.execute(
            "SELECT ok, text, finish_reason, error_kind, error, prompt_tokens, completion_tokens, "
            "latency_s, attempts FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return Response(text=row[1], finish_reason=row[2], error_kind=row[3], error=row[4],
                        prompt_tokens=row[5], completion_tokens=row[6], latency_s=row[7],
                        attempts=1 if row[8] is None else row[8])

    def ok_keys(self, keys: list[str]) -> set[str]:
        """Which of `keys` already hold a successful response (one query per chunk, not per key)."""
        found: set[str] = set()
        sketch = self._calls_sketch()
        keys = [k for k in keys if k in sketch]
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            q = f"SELECT key FROM calls WHERE ok = 1 AND key IN ({','.join('?' * len(chunk))})"
            found.update(r[0] for r in self.db.execute(q, chunk))
        return found

    def put_call(self, key: str, endpoint: str, purpose: str, ident: tuple[str, str, str],
                 resp: Response) -> None:
        self.put_calls([(key, endpoint, purpose, ident, resp)])

    def answer_for_body(self, body: str) -> tuple[str, Response] | None:
        """The store key and successful reply of the call that first answered `body` (Request.body_key)."""
        if body not in self._bodies_sketch():
            return None
        row = self.db.execute("SELECT key FROM bodies WHERE body = ?", (body,)).fetchone()
        if row is None:
            return None
        resp = self.get_call(row[0])
        return (row[0], resp) if resp is not None and resp.ok else None

    def put_calls(self, rows: list[tuple[str, str, str, tuple[str, str, str], Response]],
                  links: list[tuple] = (), bodies: list[tuple[str, str]] = ()) -> None:
        """Several `put_call`s (and the links naming what they answer) in one transaction.

        A reply SQLite cannot take (Response checks its fields, but a backend may change them after) must
        not cost the replies committed with it: the batch is then written row by row, and that reply is
        stored, and turned in place, into a `malformed` error of its sample, so the caller holding it
        sees what the store holds. Errors of the database itself (disk full, locked) still raise. `bodies`:
        (body key, store key) of calls answered by their body alone (the first answer of a body is kept)."""
        now = time.time()
        self._added((row[0] for row in rows), (body for body, _ in bodies))
        try:
            with self.db:
                self.db.execute("BEGIN")
                self.db.executemany(_INSERT_CALL, [_call_row(row, now) for row in rows])
                if links:
                    self.db.executemany(_INSERT_LINK, links)
                if bodies:
                    self.db.executemany(_INSERT_BODY, bodies)
            return
        except _UNSTORABLE:
            pass
        with self.db:
            self.db.execute("BEGIN")
            for row in rows:
                try:
                    self.db.execute(_INSERT_CALL, _call_row(row, now))
                except _UNSTORABLE as e:
                    resp = row[4]
                    resp.text, resp.finish_reason, resp.prompt_tokens, resp.completion_tokens = None, None, None, None
                    resp.error_kind, resp.error = "malformed", f"unreadable response: cannot be stored ({type(e).__name__})"
                    self.db.execute(_INSERT_CALL, _call_row(row, now))
            if links:
                self.db.executemany(_INSERT_LINK, links)
            if bodies:
                self.db.executemany(_INSERT_BODY, bodies)

    # --- links ------------------------------------------------------------------------------------
    def put_links(self, links: list[tuple]) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(_INSERT_LINK, links)

    def has_links(self, model: str) -> bool:
        return self.db.execute("SELECT 1 FROM links WHERE model = ? LIMIT 1", (model,)).fetchone() is not None

    def linked(self, model: str, task: str, judges: list[str]) -> dict[tuple[str, str], dict[str, tuple]]:
        """Every stored part of `model`'s samples of `task`: (item_id, variant) -> {rubric: (version,
        Response or None)}, the generation under rubric ''. Judgements of other judges are left out; a
        link whose call is missing (a store merged from elsewhere) maps to None."""
        out: dict[tuple[str, str], dict[str, tuple]] = {}
        wanted = ["", *judges]
        cur = self.db.execute(
            "SELECT l.item_id, l.variant, l.rubric, l.version, c.ok, c.text, c.finish_reason, c.error_kind, "
            "c.error, c.prompt_tokens, c.completion_tokens, c.latency_s, c.attempts, c.key FROM links l "
            "LEFT JOIN calls c ON c.key = l.key WHERE l.model = ? AND l.task = ? "
            f"AND l.judge IN ({','.join('?' * len(wanted))})", (model, task, *wanted))
        for row in cur:
            resp = None if row[13] is None else Response(
                text=row[5], finish_reason=row[6], error_kind=row[7], error=row[8], prompt_tokens=row[9],
                completion_tokens=row[10], latency_s=row[11], attempts=1 if row[12] is None else row[12])
            out.setdefault((row[0], row[1]), {})[row[2]] = (row[3], resp)
        return out

    def linked_keys(self, model: str, judge: str) -> set[tuple[str, str, str, str]]:
        """(task, item_id, variant, rubric) of every judgement `judge` made of `model`'s samples, failed
        ones left out (a re-score tries them again)."""
        cur = self.db.execute("SELECT l.task, l.item_id, l.variant, l.rubric FROM links l JOIN calls c ON c.key = l.key "
                              "WHERE l.model = ? AND l.judge = ? AND c.ok = 1", (model, judge))
        return set(cur.fetchall())

    def generation_links(self, model: str) -> dict[tuple[str, str, str], str]:
        """(task, item_id, variant) -> call key of `model`'s generations."""
        cur = self.db.execute("SELECT task, item_id, variant, key FROM links WHERE model = ? AND rubric = ''",
                              (model,))
        return {(t, i, v): k for t, i, v, k in cur}

    def totals(self) -> tuple[int, int]:
        """Prompt and completion tokens of every call paid (a reply shared by an identical request, stored
        with attempts 0, is counted once, in the call that was sent). A server may report any count up to 2^63-1:
        SQL's sum() of two such rows fails ("integer overflow") and would brick the run folder, so the sum
        is total() (a float, never overflowing), each count taken only when it is a sane one."""
        sane = "total(CASE WHEN {0} BETWEEN 0 AND %d THEN {0} END)" % TOKENS_CAP
        row = self.db.execute(f"SELECT {sane.format('prompt_tokens')}, {sane.format('completion_tokens')} "
                              f"FROM calls WHERE attempts IS NOT 0").fetchone()
        return int(row[0]), int(row[1])

    # --- raw rows, for moving calls between stores (shards of a distributed run) ---------------------
    def call_rows(self, task: str | None = None, item_ids: Iterable[str] | None = None) -> list[tuple]:
        """Whole rows of `calls`: all of them, or those filed under `task` for the given items."""
        if task is None:
            return self.db.execute("SELECT * FROM calls").fetchall()
        ids, rows = list(item_ids or ()), []
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows += self.db.execute(f"SELECT * FROM calls WHERE task = ? AND item_id IN ({','.join('?' * len(chunk))})",
                                    [task, *chunk]).fetchall()
        return rows

    def body_rows(self, keys: Iterable[str] | None = None) -> list[tuple[str, str]]:
        """(body key, store key) of the replies a body alone answers; with `keys`, those answered by them."""
        rows = self.db.execute("SELECT body, key FROM bodies").fetchall()
        if keys is None:
            return rows
        wanted = set(keys)
        return [r for r in rows if r[1] in wanted]

    def merge_bodies(self, rows: list[tuple[str, str]]) -> None:
        """Another store's `bodies` rows (a Ray shard's), after its calls: the first answer of a body stays."""
        self._added(body_keys=(body for body, _ in rows))
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(_INSERT_BODY, rows)

    def merge_calls(self, rows: list[tuple]) -> None:
        """Add rows taken from another store. Idempotent: merging the same rows again changes nothing,
        and a successful reply is never replaced (only a failed one, by a newer attempt)."""
        cols = ("endpoint, purpose, task, item_id, variant, ok, text, finish_reason, error_kind, error, "
                "prompt_tokens, completion_tokens, latency_s, attempts, created").split(", ")
        self._added(row[0] for row in rows)
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(
                f"INSERT INTO calls VALUES ({','.join('?' * 16)}) ON CONFLICT(key) DO UPDATE SET "
                + ", ".join(f"{c} = excluded.{c}" for c in cols)
                + " WHERE calls.ok = 0 AND (excluded.ok = 1 OR excluded.created >= calls.created)", rows)

    def integrity_ok(self) -> bool:
        return self.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def check_integrity(self) -> None:
        """Raise a UserError saying how to recover when the store is damaged (a disk fault, a copy taken
        mid-write). Run when a store is opened for a run, before any reply is read from or written to
        it: a damaged page read later fails a commit, or silently hides stored replies that are then paid
        for again. quick_check reads every page once (O(N)) but skips matching indexes to tables,
        which integrity_check adds at several times the cost."""
        try:
            problems = [r[0] for r in self.db.execute("PRAGMA quick_check(3)")]
        except sqlite3.DatabaseError as e:
            problems = [str(e)]
        if problems != ["ok"]:
            raise UserError(_damaged(self.path, "; ".join(problems)))


def _damaged(path: Path, problem: str) -> str:
    problem = " ".join(problem.replace("*** in database main ***", "").split())[:200]  # one line
    return (f"run store {path} is damaged ({problem}); move it aside (with its -wal and -shm files) "
            f"and run again: results are rebuilt, and replies it held are asked for again")
