"""`trustmh view RUN...`: every sample of one or more runs, paged from the runs' own files by a small
read-only web server on 127.0.0.1 (report.html keeps only a bounded sample of them), as `inspect view`
serves inspect_ai logs.

At start one pass over each samples.jsonl records, per sample, where its line is (offset, length), its
model, task, outcome and worst-first sort key (the report's own rules, report/drilldown.py); nothing else
is kept in memory. A page of rows, a filter or a search reads the lines it needs back from the file.

The run folder is treated as hostile, as everywhere in trustmh: only regular files are read, a line over
MAX_LINE bytes or one that is not a sample record is counted and left out (never parsed), every text
sent to the page is capped and shown by the page with textContent only. The server answers GET on a
fixed set of routes: a URL names a sample by its number, never a file, so nothing outside the runs'
samples.jsonl can be reached. It binds 127.0.0.1 only and answers only requests whose Host is that
address (a page on another site cannot reach it through DNS rebinding); its page fetches nothing but
its own API (Content-Security-Policy), and it writes nothing anywhere.

It is private to the user who started it (report/local_server.py): another local user can connect to
127.0.0.1 too, so every request must carry the session's random token, which is in the URL `trustmh view`
prints (the page sends it back in a header), or is refused (403); a connection idle for IDLE_S is closed.
Every sample line is type-checked when indexed (analysis/runs.sample_problem: a line that is not one is
counted by reason, never served), every parameter is checked (400 with the reason), and whatever else
fails in a request is answered (500), each counted by kind in /api/meta. When samples.jsonl changes under
it (`trustmh score` rewrites it), the next request finds the file's identity changed and indexes the runs
again before it reads a line.

Search reads a sample's reply, judge output, target, parsed answer, labels and the item's own text: its
prompt less the task's template, which is the text every prompt of the task shares at its start and its
end (found in the same pass; "suicid" then finds the posts that say it, not every crisis item because the
instructions list the label). The page keeps its filters and the opened sample in its URL, and shows every
model's reply to one item side by side (`/api/item`)."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import hashlib
from array import array
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..analysis.runs import Run, entries, load_run, parse_sample
from ..errors import UserError
from .drilldown import _Row, _sort_keys, _worst_first, page_prompt, page_row, row_status
from .leaderboard import task_meta
from .local_server import IDLE_S, TOKEN_HEADER, LocalHandler, bind

HERE = Path(__file__).parent
MAX_LINE = 16 * 1024 * 1024  # a sample's line in samples.jsonl; longer ones are left out, counted
MAX_SAMPLES = 20_000_000  # lines indexed per run
TEXT_LIMIT = 200_000  # characters of one text field sent to the page
PAGE_MAX = 200
QUERY_MAX = 200
STATUSES = ("ok", "no_answer", "unscored", "error")
SORTS = ("worst", "data")
_NUMBER = re.compile(r"[0-9]{1,12}")  # ASCII digits only: str.isdigit also passes "²", which int() refuses


@dataclass
class Index:
    """Where every sample of the runs is, with what filtering and ordering need."""

    runs: list[Run]
    labels: list[str] = field(default_factory=list)  # entries (run, model), as the report names them
    tasks: list[str] = field(default_factory=list)
    rows: list[_Row] = field(default_factory=list)  # p: the run's number, size: the line's length
    offsets: list[int] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # why lines were left out -> how many
    order: list[int] = field(default_factory=list)  # rows worst first
    files: list[tuple | None] = field(default_factory=list)  # each samples.jsonl's identity when indexed
    items: array = field(default_factory=lambda: array("q"))  # per row: a hash of (task, item id, variant)
    templates: dict[int, "_Template"] = field(default_factory=dict)  # per task: what every prompt shares
    _cache: dict[tuple, list[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def line(self, i: int) -> dict[str, Any]:
        r = self.rows[i]
        with _open_regular(self.runs[r.p].samples_path) as fh:
            fh.seek(self.offsets[i])
            raw = fh.read(r.size)
        rec, problem = parse_sample(raw.decode("utf-8", errors="replace"))
        if problem:  # the file changed between the check and the read: the next request indexes it again
            raise _Changed()
        return rec

    def current(self) -> bool:
        """Whether every samples.jsonl is still the file this index was built from."""
        return [_identity(r.samples_path) for r in self.runs] == self.files

    def select(self, e: int | None, t: int | None, st: str | None, q: str, worst: bool) -> list[int]:
        key = (e, t, st, q, worst)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        base = self.order if worst else range(len(self.rows))
        found = [i for i in base if (e is None or self.rows[i].e == e) and (t is None or self.rows[i].t == t)
                 and (st is None or self.rows[i].st == st)]
        if q:
            found = self._search(found, q)
        with self._lock:
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = found
        return found

    def _search(self, candidates: list[int], q: str) -> list[int]:
        """Rows whose texts hold `q` (any case): the raw line is checked first for the query as JSON
        writes it, and only the lines that pass are parsed and checked for real."""
        needle = json.dumps(q, ensure_ascii=False)[1:-1].lower().encode("utf-8")
        needle_ascii = json.dumps(q)[1:-1].lower().encode("ascii")
        out = set()
        handles: dict[int, Any] = {}
        try:
            # Read in file order (the candidates come worst first): one sequential pass, not a seek per row.
            for i in sorted(candidates, key=lambda i: (self.rows[i].p, self.offsets[i])):
                r = self.rows[i]
                fh = handles.get(r.p) or handles.setdefault(r.p, _open_regular(self.runs[r.p].samples_path))
                fh.seek(self.offsets[i])
                raw = fh.read(r.size).lower()
                if q.isascii() and needle not in raw and needle_ascii not in raw:
                    continue  # (bytes.lower() folds ASCII only: other queries are checked on every line)
                rec, problem = parse_sample(raw.decode("utf-8", errors="replace"))
                if problem:
                    raise _Changed()
                if q in _haystack(rec, self.templates.get(r.t)):
                    out.add(i)
        finally:
            for fh in handles.values():
                fh.close()
        return [i for i in candidates if i in out]


    def same_item(self, i: int) -> list[int]:
        """Every row of row i's task, item and variant (every model's sample of that item), in model order."""
        key, t = self.items[i], self.rows[i].t
        rec = self.line(i)
        out = []
        for j in (j for j, k in enumerate(self.items) if k == key and self.rows[j].t == t):
            other = rec if j == i else self.line(j)  # the hash only narrows: the line says what it is
            if (other.get("item_id"), other.get("variant") or "") == (rec.get("item_id"), rec.get("variant") or ""):
                out.append(j)
        return sorted(out, key=lambda j: self.rows[j].e)


class _Template:
    """The text every prompt of one task shares at its start and at its end: the template's own words. Kept
    whole-word (a shared first word of every item stays the item's), updated by startswith/endswith, so
    that most samples cost one comparison."""

    def __init__(self, text: str) -> None:
        self.first, self.prefix, self.suffix, self.varied = text, text, text, False

    def add(self, text: str) -> None:
        if text != self.first:
            self.varied = True
        if not text.startswith(self.prefix):
            self.prefix = self.prefix[:_shared(self.prefix, text, str.startswith)]
        if not text.endswith(self.suffix):
            n = _shared(self.suffix[::-1], text[::-1], str.startswith)
            self.suffix = self.suffix[len(self.suffix) - n:]

    def item_text(self, text: str) -> str:
        """`text` without the template's words, or whole when the task had one prompt (nothing to tell apart)."""
        if not self.varied:
            return text
        start = _word_edge(self.prefix, len(self.prefix), back=True)
        end = len(text) - len(self.suffix) + _word_edge(self.suffix, 0, back=False)
        return text[start:max(start, end)]


def _shared(a: str, b: str, starts) -> int:
    """The length of the longest start of `a` that `b` starts with (binary search on C-speed comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts(b, a[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _word_edge(text: str, at: int, *, back: bool) -> int:
    """The template's edge moved onto a word boundary: a prefix back to its last space or line break, a
    suffix on to its first, so that a word the items happen to share is searched as theirs."""
    if back:
        cut = max(text.rfind(" ", 0, at), text.rfind("\n", 0, at))
        return cut + 1 if cut >= 0 else 0
    cut = [k for k in (text.find(" ", at), text.find("\n", at)) if k >= 0]
    return min(cut) if cut else len(text)


def _prompt_text(rec: dict[str, Any]) -> str:
    messages = rec.get("messages") if isinstance(rec.get("messages"), list) else []
    return "\n\x00\n".join(str(m.get("content") if isinstance(m, dict) else m) for m in messages)


def _item_key(task: str, rec: dict[str, Any]) -> int:
    h = hashlib.blake2b(f"{task}\x00{rec.get('item_id')}\x00{rec.get('variant') or ''}".encode("utf-8", "replace"),
                        digest_size=8).digest()
    return int.from_bytes(h, "little", signed=True)


def _haystack(rec: dict[str, Any], template: _Template | None) -> str:
    """What a search reads: the reply, the judge's output, target, parsed answer, labels, error, item id and
    variant, and the item's own text (the prompt less its task's template)."""
    judge = rec.get("judge") if isinstance(rec.get("judge"), dict) else {}
    parts = [rec.get("item_id"), rec.get("variant"), rec.get("response"), judge.get("text"), judge.get("reason"),
             rec.get("target"), rec.get("parsed"), rec.get("labels"), rec.get("error")]
    prompt = _prompt_text(rec)
    parts.append(template.item_text(prompt) if template is not None else prompt)
    return "\n".join(p if isinstance(p, str) else json.dumps(p, ensure_ascii=False) for p in parts
                     if p is not None).lower()


def _open_regular(path: Path):
    """A regular file, opened for reading: a FIFO, a device or a folder named samples.jsonl is refused."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"{path}: not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _identity(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def build_index(runs: list[Run]) -> Index:
    """One pass over each run's samples.jsonl (see the module's docstring)."""
    ents = entries(runs)
    metas = task_meta(ents)
    idx = Index(runs, labels=[e.label for e in ents], tasks=list(metas))
    idx.files = [_identity(r.samples_path) for r in runs]
    tindex = {t: k for k, t in enumerate(idx.tasks)}
    by_run_model = {(ri, e.model): k for k, e in enumerate(ents) for ri, r in enumerate(runs) if e.run is r}
    for ri, run in enumerate(runs):
        if not run.samples_path.exists():
            continue
        with _open_regular(run.samples_path) as fh:
            at, n = 0, 0
            while n < MAX_SAMPLES:
                n += 1
                raw = fh.readline(MAX_LINE + 1)
                if not raw:
                    break
                start, at = at, at + len(raw)
                if len(raw) > MAX_LINE:  # too long: skip to its end, never parsed
                    while raw and not raw.endswith(b"\n"):
                        raw = fh.readline(MAX_LINE)
                        at += len(raw)
                    idx.skip(f"line over {MAX_LINE // 2**20} MiB")
                    continue
                if not raw.strip():
                    continue
                rec, problem = parse_sample(raw.decode("utf-8", errors="replace"))
                if problem:
                    idx.skip(problem)
                    continue
                e = by_run_model.get((ri, rec["model"]))
                if e is None or rec["task"] not in tindex:
                    idx.skip("not a sample of these results")
                    continue
                task = rec["task"]
                status, pv = row_status(rec, metas[task].primary_value)
                idx.rows.append(_Row(e, tindex[task], pv, status, ri, len(raw)))
                idx.offsets.append(start)
                idx.items.append(_item_key(task, rec))
                text = _prompt_text(rec)
                tpl = idx.templates.get(tindex[task])
                if tpl is None:
                    idx.templates[tindex[task]] = _Template(text)
                else:
                    tpl.add(text)
    _sort_keys(idx.rows, ents, metas, idx.tasks)
    idx.order = sorted(range(len(idx.rows)), key=lambda i: _worst_first(idx.rows[i]))
    return idx


def _capped(v: Any) -> Any:
    if isinstance(v, str) and len(v) > TEXT_LIMIT:
        return v[:TEXT_LIMIT] + f"… [{len(v) - TEXT_LIMIT} more characters in samples.jsonl]"
    if isinstance(v, dict):
        return {str(k)[:200]: _capped(x) for k, x in list(v.items())[:500]}
    if isinstance(v, list):
        return [_capped(x) for x in v[:500]]
    return v


def _summary(idx: Index, i: int, rec: dict[str, Any]) -> dict[str, Any]:
    r = idx.rows[i]
    text = rec.get("response") if isinstance(rec.get("response"), str) else ""
    err = rec.get("error") if isinstance(rec.get("error"), dict) else None
    if not text and err:
        text = f"[{err.get('kind')}]"
    return {"i": i, "e": r.e, "t": r.t, "st": r.st, "pv": r.pv, "s": r.s, "id": str(rec.get("item_id"))[:200],
            "v": str(rec.get("variant") or "")[:200], "preview": _preview(str(text))}


def _preview(text: str, n: int = 160) -> str:
    """The start of a reply for the list (the whole reply is in the opened sample); a cut says so."""
    return text if len(text) <= n else text[:n].rstrip() + " …"


class _Handler(LocalHandler):
    server_version = "trustmh-view"
    index: Index
    page: bytes
    rebuild: threading.Lock

    def do_POST(self) -> None:  # noqa: N802 - read-only
        self._refuse(405, "read-only")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        if not self.host_ok():
            return self._refuse(403, "this viewer answers its own address only")
        url = urlsplit(self.path)
        try:
            args = {k: v[-1] for k, v in parse_qs(url.query, max_num_fields=20, errors="strict").items()}
        except ValueError:  # UnicodeDecodeError included: a query that is not UTF-8
            return self._refuse(400, "bad query")
        if not self.token_ok(args.get("t") if url.path == "/" else self.headers.get(TOKEN_HEADER)):
            return self._refuse(403, "open the address `trustmh view` printed (it holds the session's token)")
        try:
            if url.path == "/":
                return self._send(200, self.page, "text/html; charset=utf-8")
            if url.path.startswith("/api/") and not self._fresh():
                return self._refuse(503, "the run is being rewritten; try again in a moment", "run being rewritten")
            if url.path == "/api/meta":
                return self._json(self._meta())
            if url.path == "/api/rows":
                return self._json(self._rows(args))
            if url.path == "/api/sample":
                return self._json(self._sample(args))
            if url.path == "/api/item":
                return self._json(self._item(args))
        except _BadRequest as e:
            return self._refuse(400, str(e))
        except _Changed:
            return self._refuse(503, "samples.jsonl changed while it was read; try again", "file changed")
        except Exception as e:  # noqa: BLE001 - a request fails alone, answered and counted, never the server
            return self._refuse(500, f"could not answer ({type(e).__name__})", f"failed: {type(e).__name__}")
        return self._refuse(404, "no such page")

    def _fresh(self) -> bool:
        """Index the runs again when a samples.jsonl is no longer the file indexed; False while a run cannot
        be read whole (its results.json and samples.jsonl between two writes)."""
        if self.index.current():
            return True
        with self.rebuild:
            if type(self).index.current():
                return True
            try:
                runs = [load_run(r.dir) for r in self.index.runs]
            except UserError:
                return False
            type(self).index = build_index(runs)
        return True

    def _meta(self) -> dict[str, Any]:
        idx = self.index
        return {"runs": [r.id for r in idx.runs], "entries": idx.labels, "tasks": idx.tasks, "statuses": STATUSES,
                "total": len(idx.rows), "skipped": idx.skipped, "errors": self.error_counts()}

    def _rows(self, args: dict[str, str]) -> dict[str, Any]:
        idx = self.index
        e = _int(args, "model", len(idx.labels))
        t = _int(args, "task", len(idx.tasks))
        st = args.get("status") or None
        if st is not None and st not in STATUSES:
            raise _BadRequest("unknown status")
        q = args.get("q", "").strip().lower()
        if len(q) > QUERY_MAX:
            raise _BadRequest(f"search over {QUERY_MAX} characters")
        size = _int(args, "size", PAGE_MAX + 1) or 50
        page = _int(args, "page", 10**9) or 0
        sort = args.get("sort") or "worst"
        if sort not in SORTS:
            raise _BadRequest(f"sort must be {' or '.join(SORTS)}")
        found = idx.select(e, t, st, q, sort == "worst")
        chosen = found[page * size:(page + 1) * size]
        return {"total": len(found), "page": page, "size": size,
                "rows": [_summary(idx, i, idx.line(i)) for i in chosen]}

    def _sample(self, args: dict[str, str]) -> dict[str, Any]:
        idx = self.index
        i = _int(args, "i", len(idx.rows))
        if i is None:
            raise _BadRequest("which sample? ?i=N")
        rec = idx.line(i)
        r = idx.rows[i]
        row = page_row(rec, r.st, r.pv)
        # The page's own capping is for report.html; here the texts go whole up to TEXT_LIMIT.
        judge = rec.get("judge") if isinstance(rec.get("judge"), dict) else {}
        addressed = rec.get("judge_addressed")  # what in the reply speaks to the judge (judges/addressed.py)
        row.update({"tg": rec.get("target"), "r": rec.get("response"), "j": judge.get("text"),
                    "ja": addressed if isinstance(addressed, str) else None,
                    "pa": rec.get("parsed"), "prompt": [{"role": str(m.get("role", "")), "content": m.get("content")}
                                                       if isinstance(m, dict) else {"role": "", "content": str(m)}
                                                       for m in (rec.get("messages") or [])]
                    if isinstance(rec.get("messages"), list) else page_prompt(None)})
        return _capped({"i": i, "e": r.e, "t": r.t, "s": r.s, **row})


    def _item(self, args: dict[str, str]) -> dict[str, Any]:
        """Every model's sample of the item of sample ?i=N, for the side-by-side view."""
        idx = self.index
        i = _int(args, "i", len(idx.rows))
        if i is None:
            raise _BadRequest("which sample? ?i=N")
        models = []
        for j in idx.same_item(i)[:PAGE_MAX]:
            rec, r = idx.line(j), idx.rows[j]
            row = page_row(rec, r.st, r.pv)
            models.append({"i": j, "e": r.e, "st": r.st, "pv": r.pv, "r": rec.get("response"), "j": row["j"],
                           "jr": row["jr"], "pa": row["pa"], "va": row["va"], "er": row["er"]})
        rec = idx.line(i)
        return _capped({"t": idx.rows[i].t, "id": str(rec.get("item_id")), "v": str(rec.get("variant") or ""),
                        "models": models})


class _BadRequest(Exception):
    pass


class _Changed(Exception):
    """A line read back is not the sample indexed there: samples.jsonl changed under the viewer."""


def _int(args: dict[str, str], name: str, below: int) -> int | None:
    """A query argument that must be an integer 0 <= n < below, or absent."""
    v = args.get(name, "")
    if v == "":
        return None
    if not _NUMBER.fullmatch(v) or int(v) >= below:
        raise _BadRequest(f"{name} must be a number below {below}")
    return int(v)


def _page(nonce: str) -> bytes:
    css = (HERE / "report.css").read_text(encoding="utf-8")
    js = "".join((HERE / f).read_text(encoding="utf-8") for f in ("dom.js", "viewer.js"))
    html = (HERE / "viewer.html").read_text(encoding="utf-8")
    # The nonce first: the style sheet and the script are inserted as they are, after it.
    head, _, tail = html.replace("NONCE", nonce).partition("/*JS*/")
    return (head.replace("/*CSS*/", css) + js + tail).encode("utf-8")


def make_server(runs: list[Run], port: int = 0, *, idle_s: float = IDLE_S) -> ThreadingHTTPServer:
    """The viewer's server on 127.0.0.1:`port` (0: any free port), not yet serving; `server.url` is the
    address to open, with the session's token (`server.token`) every request needs."""
    handler = type("Handler", (_Handler,), {"index": build_index(runs), "rebuild": threading.Lock()})
    server = bind(handler, port, idle_s=idle_s)
    handler.page = _page(handler.nonce)
    return server
