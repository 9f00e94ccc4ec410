"""`trustmh view` without a browser: the read-only server on 127.0.0.1 pages, filters and searches every
sample of a run from its own samples.jsonl, answers only its fixed routes on its own address, and treats
the run folder as hostile (lines too long, not JSON, not samples; a FIFO in place of the file). The page
itself is checked in Chromium in tests/test_report_browser.py."""

import hashlib
import http.client
import json
import os
import shutil
import threading
from contextlib import contextmanager

import pytest

from conftest import run_quiet, run_spec, write_replay
from test_report import EVIL, sample_items
from trustmh.analysis.runs import load_run
from trustmh.errors import UserError
from trustmh.report import viewer


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("view")
    ethics = sample_items("ethics.reasoning")
    recs = [{"task": "ethics.reasoning", "item_id": it.id, "response": EVIL if i == 0 else f"Answer: B number {i}"}
            for i, it in enumerate(ethics)]
    replay = write_replay(tmp / "replies.jsonl", recs)
    run_quiet(run_spec(models=[f"replay/{replay}", "baseline/counselor"], tasks="ethics,privacy.awareness_tier1",
                       suite="sample"), tmp / "run")
    return tmp / "run"


@contextmanager
def serving(run, **kw):
    server = viewer.make_server([load_run(run)], 0, **kw)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def get(server, path, host=None, method="GET"):
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    if path.startswith("/?") or path == "/":  # the page by the printed URL's token, the API by its header
        path += ("&" if "?" in path else "?") + f"t={server.token}"
    conn.putrequest(method, path, skip_host=True)
    conn.putheader("Host", host or f"127.0.0.1:{port}")
    conn.putheader(viewer.TOKEN_HEADER, server.token)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), body


def api(server, path):
    status, headers, body = get(server, path)
    assert status == 200, body
    assert headers["Content-Type"].startswith("application/json") and headers["X-Content-Type-Options"] == "nosniff"
    return json.loads(body)


def records(run):
    return [json.loads(line) for line in (run / "samples.jsonl").read_text(encoding="utf-8").splitlines() if line]


def test_pages_filters_and_searches_every_sample_of_the_run(run_dir):
    recs = records(run_dir)
    with serving(run_dir) as server:
        assert server.server_address[0] == "127.0.0.1"
        meta = api(server, "/api/meta")
        assert meta["total"] == len(recs) and meta["skipped"] == {}
        # Paging covers every sample exactly once.
        seen = []
        for page in range(100):
            got = api(server, f"/api/rows?sort=data&size=7&page={page}")
            seen += [r["i"] for r in got["rows"]]
            if not got["rows"]:
                break
        assert sorted(seen) == list(range(len(recs))) and got["total"] == len(recs)
        # Filters: counted by hand from samples.jsonl.
        m = meta["entries"].index("baseline/counselor")
        t = meta["tasks"].index("ethics.reasoning")
        want = [r for r in recs if r["model"] == "baseline/counselor" and r["task"] == "ethics.reasoning"]
        got = api(server, f"/api/rows?model={m}&task={t}&size=200")
        assert got["total"] == len(want) and {(r["e"], r["t"]) for r in got["rows"]} == {(m, t)}
        assert sorted(r["id"] for r in got["rows"]) == sorted(str(r["item_id"]) for r in want)
        ok = api(server, f"/api/rows?status=ok&task={t}&size=200")
        assert ok["total"] == sum(1 for r in recs if r["task"] == "ethics.reasoning" and not r.get("error")
                                  and not r.get("no_answer") and "correct" in (r.get("values") or {})) > 0
        assert {r["st"] for r in ok["rows"]} == {"ok"}
        # Worst first: scored rows by their score, lowest first.
        worst = [r["s"] for r in api(server, f"/api/rows?task={t}&size=200")["rows"] if r["s"] is not None]
        assert worst == sorted(worst) and worst[0] == 0
        # Search (any case) against a scan of the file; a reply that is markup comes back as data.
        hits = api(server, "/api/rows?q=NUMBER%201&size=200")
        assert sorted(r["id"] for r in hits["rows"]) == sorted(
            str(r["item_id"]) for r in recs if "number 1" in (r.get("response") or "").lower())
        evil = api(server, "/api/rows?q=__pwned")["rows"]
        assert len(evil) == 1
        sample = api(server, f"/api/sample?i={evil[0]['i']}")
        assert sample["r"] == EVIL and sample["prompt"][0]["content"] == recs[evil[0]["i"]]["messages"][0]["content"]
        status, headers, page = get(server, "/")
        assert status == 200 and b"<script nonce=" in page
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert b"http://" not in page and b"https://" not in page and b"<link" not in page


def test_answers_only_its_routes_on_its_own_address_and_reads_only(run_dir):
    with serving(run_dir) as server:
        port = server.server_address[1]
        assert get(server, "/api/meta", host=f"localhost:{port}")[0] == 200
        for host in ("evil.example:80", f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}"):
            assert get(server, "/api/meta", host=host)[0] == 403  # DNS rebinding: another site's name
        for path in ("/samples.jsonl", "/results.json", "/../results.json", "/%2e%2e/store.sqlite",
                     "/api/../../etc/passwd", "/api/sample/../../store.sqlite", "//etc/passwd", "/static/x.js"):
            status, _, body = get(server, path)
            assert status == 404 and b"root:" not in body and b"SQLite" not in body
        for path in ("/api/sample?i=-1", "/api/sample?i=abc", "/api/sample?i=99999999", "/api/sample",
                     "/api/rows?status=bogus", "/api/rows?model=9", "/api/rows?size=5000",
                     "/api/rows?q=" + "x" * 300):
            assert get(server, path)[0] == 400, path
        for method in ("POST", "PUT", "DELETE"):
            assert get(server, "/api/meta", method=method)[0] == 405
        before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()}
        api(server, "/api/rows?q=answer")
        assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()} == before  # nothing written


def test_a_hostile_samples_file_is_counted_and_capped_never_a_crash(run_dir, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    recs = records(run_dir)
    long_reply = dict(recs[0], item_id="long", response="y" * 4000)
    with (run / "samples.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("this is not json\n[1, 2, 3]\n" + json.dumps(dict(recs[0], model="someone/else")) + "\n")
        fh.write(json.dumps(dict(recs[0], response="z" * 9000)) + "\n")  # over the line cap set below
        fh.write(json.dumps(long_reply) + "\n")
    # A crafted folder: its results.json names the altered file's checksum, so load_run accepts it.
    res = json.loads((run / "results.json").read_text())
    res["outputs"]["samples_sha256"] = hashlib.sha256((run / "samples.jsonl").read_bytes()).hexdigest()
    (run / "results.json").write_text(json.dumps(res))
    monkeypatch.setattr(viewer, "MAX_LINE", 8000)
    monkeypatch.setattr(viewer, "TEXT_LIMIT", 1000)
    with serving(run) as server:
        meta = api(server, "/api/meta")
        line_cap = next(k for k in meta["skipped"] if k.startswith("line over"))
        assert meta["total"] == len(recs) + 1
        assert meta["skipped"] == {"invalid JSON (Expecting value)": 1, "not a sample of these results": 1,
                                   "not a sample record (expected a JSON object)": 1, line_cap: 1}
        hit = api(server, "/api/rows?q=long")["rows"]
        assert [r["id"] for r in hit] == ["long"]
        got = api(server, f"/api/sample?i={hit[0]['i']}")["r"]
        assert got.startswith("y" * 1000) and "3000 more characters" in got and len(got) < 1100
    fifo = tmp_path / "fifo-run"
    shutil.copytree(run_dir, fifo)
    (fifo / "samples.jsonl").unlink()
    os.mkfifo(fifo / "samples.jsonl")
    with pytest.raises(UserError, match="not a regular file"):
        viewer.make_server([load_run(fifo)], 0)


def test_a_reply_flagged_as_addressing_the_judge_shows_its_flag(run_dir, tmp_path):
    run = tmp_path / "flagged"
    shutil.copytree(run_dir, run)
    lines = (run / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["judge_addressed"] = "a verdict in the judge's format"  # as engine/score.py marks a flagged reply
    (run / "samples.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    res = json.loads((run / "results.json").read_text())
    res["outputs"]["samples_sha256"] = hashlib.sha256((run / "samples.jsonl").read_bytes()).hexdigest()
    (run / "results.json").write_text(json.dumps(res))
    with serving(run) as server:
        assert api(server, "/api/sample?i=0")["ja"] == "a verdict in the judge's format"
        assert api(server, "/api/sample?i=1")["ja"] is None


def test_view_of_a_folder_that_is_not_a_run_is_a_one_line_error(cli, tmp_path):
    from test_cli import assert_user_error
    assert_user_error(cli("view", tmp_path / "nothing", "--port", "0", cwd=tmp_path), "not a trustmh run")
    assert_user_error(cli("view", tmp_path, "--port", "70000", cwd=tmp_path), "--port")
