"""`trustmh view` is private to its user and never a dead request (issue 38, M3, L2 and the idle-connection
limit): a random token in the URL it prints, required on every request; idle connections time out; every
malformed line is a counted skip and every malformed parameter a typed error with an HTTP status; and the
offsets are rebuilt when `trustmh score` rewrites samples.jsonl under a running viewer."""

from __future__ import annotations

import hashlib
import http.client
import json
import shutil
import socket
import time

import pytest

from test_viewer import records, run_dir, serving  # noqa: F401 - run_dir: the module's fixture, reused
from trustmh.report import viewer


def raw_get(server, path, token: str | None = None):
    """(status, body) of a GET; (None, why) when the server closed the connection without an answer."""
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", f"127.0.0.1:{port}")
        if token is not None:
            conn.putheader(viewer.TOKEN_HEADER, token)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (http.client.HTTPException, OSError) as e:
        return None, repr(e).encode()
    finally:
        conn.close()


def test_the_viewer_answers_only_whoever_has_its_token(run_dir):  # noqa: F811
    """M3: a 0700 run folder was readable by every local user through `curl .../api/sample?i=1`."""
    with serving(run_dir) as server:
        token = server.token
        assert len(token) >= 32 and server.url.endswith(f"/?t={token}")
        for path in ("/api/meta", "/api/rows", "/api/sample?i=0", "/"):
            assert raw_get(server, path)[0] == 403, path
            assert raw_get(server, path, token="x" * len(token))[0] == 403, path
        assert raw_get(server, "/api/sample?i=0", token=token)[0] == 200
        assert raw_get(server, f"/?t={token}")[0] == 200  # the page, by the printed URL
        assert raw_get(server, f"/api/sample?i=0&t={token}")[0] == 403  # the API: by its header only
    with serving(run_dir) as other:
        assert other.token != token


def test_idle_connections_are_closed_and_free_their_threads(run_dir):  # noqa: F811
    """Each idle connection held a thread forever: a local user could exhaust the process."""
    with serving(run_dir, idle_s=0.3) as server:
        port = server.server_address[1]
        socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(8)]
        half = socket.create_connection(("127.0.0.1", port), timeout=5)
        half.sendall(b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a request that never ends
        t0 = time.monotonic()
        for s in [*socks, half]:
            assert s.recv(1024) in (b"", b"HTTP/1.0 408") or s.recv(1024) == b""  # closed by the server
            s.close()
        assert time.monotonic() - t0 < 4
        assert raw_get(server, "/api/meta", token=server.token)[0] == 200  # and it still answers


def _crafted(src, dest, lines_after):
    shutil.copytree(src, dest)
    path = dest / "samples.jsonl"
    path.write_text(path.read_text() + "".join(line + "\n" for line in lines_after))
    res = json.loads((dest / "results.json").read_text())
    res["outputs"]["samples_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (dest / "results.json").write_text(json.dumps(res))
    return dest


def test_malformed_lines_are_counted_skips_and_malformed_parameters_typed_errors(run_dir, tmp_path):  # noqa: F811
    """L2: `?i=%C2%B2` (isdigit passes, int fails), a judge that is a string or a list, notes that are an
    int, NaN or 1e309 values (they killed the whole rows page and every search matching the line) and a
    line nested 900 deep each died without an HTTP answer, a traceback on the terminal."""
    first = records(run_dir)[0]
    bad = [json.dumps(dict(first, item_id="judge-text", judge="verdict")),
           json.dumps(dict(first, item_id="judge-list", judge=["a"])),
           json.dumps(dict(first, item_id="notes-int", notes=3)),
           json.dumps(dict(first, item_id="nan", values={"correct": 1.0})).replace("1.0", "NaN"),
           json.dumps(dict(first, item_id="inf", values={"correct": 1.0})).replace("1.0", "1e309"),
           json.dumps(dict(first, item_id="deep", parsed=json.loads("[" * 900 + "]" * 900))),
           "[" * 100_000 + "]" * 100_000]
    run = _crafted(run_dir, tmp_path / "run", bad)
    with serving(run) as server:
        token = server.token
        status, body = raw_get(server, "/api/meta", token)
        meta = json.loads(body)
        assert meta["total"] == len(records(run_dir))  # none of the crafted lines indexed
        assert sum(meta["skipped"].values()) == len(bad), meta["skipped"]
        assert {"field 'judge' must be a JSON object", "field 'notes' must be a JSON array",
                "values must be finite numbers", "nested deeper than 64 levels"} <= set(meta["skipped"])
        status, body = raw_get(server, "/api/rows?size=200&q=answer", token)
        assert status == 200 and json.loads(body)["total"] >= 1
        for path in ("/api/sample?i=%C2%B2", "/api/sample?i=%EF%BC%91", "/api/rows?page=%C2%B3",
                     "/api/rows?size=1e3", "/api/rows?model=-1", "/api/sample?i=" + "9" * 40,
                     "/api/rows?q=%FF%FE", "/api/rows?sort=" + "x" * 5000, "/api/sample?i=0&i=%C2%B2"):
            status, body = raw_get(server, path, token)
            assert status == 400, (path, status, body[:200])
            assert json.loads(body)["error"]
        meta = json.loads(raw_get(server, "/api/meta", token)[1])
        assert meta["errors"]["bad request"] == 9


def test_offsets_are_rebuilt_when_samples_jsonl_changes(run_dir, tmp_path):  # noqa: F811
    """L2: after `trustmh score` rewrote samples.jsonl, the viewer read its old offsets in the new file
    (a dead request). It notices the new file and indexes it again."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    recs = records(run)
    with serving(run) as server:
        token = server.token
        assert json.loads(raw_get(server, "/api/sample?i=0", token)[1])["r"] == recs[0]["response"]
        # rewritten as `trustmh score` does: another file renamed over it, its lines of other lengths
        new = [dict(r, response=f"rewritten {k} " + "x" * (k % 7)) for k, r in enumerate(reversed(recs))]
        tmp = run / "samples.jsonl.new"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in new))
        res = json.loads((run / "results.json").read_text())
        res["outputs"]["samples_sha256"] = hashlib.sha256(tmp.read_bytes()).hexdigest()
        (run / "results.json").write_text(json.dumps(res))
        tmp.replace(run / "samples.jsonl")
        for i in (0, len(new) - 1):
            status, body = raw_get(server, f"/api/sample?i={i}", token)
            assert status == 200, body[:300]
            assert json.loads(body)["r"] == new[i]["response"]
        rows = json.loads(raw_get(server, "/api/rows?sort=data&size=200&q=rewritten", token)[1])
        assert rows["total"] == len(new)
