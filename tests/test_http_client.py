"""The lean HTTP/1.1 client (models/_http.py) against scripted loopback servers: every way of framing a
reply, kept-alive connections going stale, replies cut short, garbage, stalls, cancellation, TLS.

Each server here is a few lines of asyncio that write exactly the bytes a test wants, so a framing bug
shows up as a wrong body or a hang (bounded by pytest-timeout), not as a lucky pass."""

from __future__ import annotations

import asyncio
import gzip
import os
import shutil
import ssl
import subprocess

import pytest

from trustmh.models._http import HTTPClient, HTTPProtocolError
from trustmh.models.openai_api import OpenAIModel

OK_BODY = b'{"ok": true}'


def ok_reply(body: bytes = OK_BODY, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(body), extra, body)


class Scripted:
    """A loopback server whose connection handler is `handler(conn_no, request_no, head, body, writer)`;
    it records every request head it read and the most connections open at once."""

    def __init__(self, handler):
        self.handler = handler
        self.requests: list[bytes] = []
        self.connections = 0
        self.open = 0
        self.max_open = 0
        self.client_closed: list[int] = []  # connections the client closed while a reply was pending

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn_no, self.open = self.connections, self.open + 1
        self.max_open = max(self.max_open, self.open)
        try:
            n = 0
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                self.requests.append(head)
                n += 1
                keep = await self.handler(conn_no, n, head, body, writer)
                await writer.drain()
                if keep == "no reply":  # wait (bounded by the test) to see whether the client hangs up
                    if await reader.read() == b"":
                        self.client_closed.append(conn_no)
                    return
                if keep is False:
                    writer.close()
                    return
        finally:
            self.open -= 1

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/chat/completions"

    async def __aexit__(self, *exc) -> None:
        self.server.close()


def client(url: str, **kw) -> HTTPClient:
    kw.setdefault("max_connections", 4)
    kw.setdefault("timeout", 5.0)
    return HTTPClient(url, headers={"Content-Type": "application/json", "Authorization": "Bearer k"}, **kw)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def posts(handler, n: int = 1, pause: float = 0.0, **kw):
    """Start a Scripted server with `handler`, post `n` times one after the other (sleeping `pause`
    between them), close; return (server, [(status, headers, body), ...])."""
    async def main():
        srv = Scripted(handler)
        async with srv as url:
            http = client(url, **kw)
            outs = []
            for i in range(n):
                if i and pause:
                    await asyncio.sleep(pause)
                outs.append(await http.post(b'{"x": 1}'))
            await http.close()
        return srv, outs
    return run(main())


def test_request_head_and_content_length_reply():
    async def handler(c, n, head, body, w):
        assert body == b'{"x": 1}'
        w.write(ok_reply())

    srv, [(status, headers, body)] = posts(handler)
    assert (status, body, headers["content-type"]) == (200, OK_BODY, "application/json")
    head = srv.requests[0].decode()
    port = head.split("Host: 127.0.0.1:")[1].split("\r\n")[0]
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n") and port.isdigit()
    assert "Authorization: Bearer k\r\n" in head and "Content-Length: 8\r\n" in head


def test_chunked_reply_with_extensions_and_trailers_fed_byte_by_byte():
    payload = b'{"choices": [{"message": {"content": "hello there"}}]}'
    chunks = [payload[:7], payload[7:30], payload[30:]]
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    wire += b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\nX-Trailer: t\r\n\r\n"

    async def handler(c, n, head, body, w):
        for i in range(len(wire)):  # one byte per write: every parser state sees a partial buffer
            w.write(wire[i:i + 1])
            await w.drain()

    srv, outs = posts(handler, 2)  # the second shows the connection is still in step after the first
    assert [o[2] for o in outs] == [payload, payload]
    assert srv.connections == 1 and len(srv.requests) == 2


def test_gzip_body_is_decoded():
    async def handler(c, n, head, body, w):
        w.write(ok_reply(gzip.compress(OK_BODY), b"Content-Encoding: gzip\r\n"))

    assert posts(handler)[1][0][2] == OK_BODY


def test_connection_close_and_http10_read_to_close():
    async def handler(c, n, head, body, w):
        if c == 1:
            w.write(ok_reply(b'{"n": 1}', b"Connection: close\r\n"))
            return False
        w.write(b'HTTP/1.0 200 OK\r\n\r\n{"n": 2}')  # no length: the body ends when the server closes
        return False

    srv, outs = posts(handler, 2)
    assert [o[2] for o in outs] == [b'{"n": 1}', b'{"n": 2}']
    assert srv.connections == 2


def test_idle_connection_closed_by_the_server_is_not_reused():
    async def handler(c, n, head, body, w):
        w.write(ok_reply())  # keep-alive promised ...
        return False        # ... but the server drops the idle connection

    srv, outs = posts(handler, 2, pause=0.05)  # the close reaches the client while the connection is idle
    assert outs[1][0] == 200 and len(srv.requests) == 2 and srv.connections == 2


def test_kept_alive_connection_closing_as_the_request_goes_out_is_retried_once():
    # The race a long run meets: the server's idle timeout closes the connection just as a request is
    # written to it. Nothing of a reply arrived, so the request is sent again on a new connection.
    async def handler(c, n, head, body, w):
        if c == 1 and n == 2:
            return False  # close without a byte of reply
        w.write(ok_reply())

    srv, outs = posts(handler, 2)
    assert outs[1][0] == 200 and srv.connections == 2 and len(srv.requests) == 3


def test_reply_cut_mid_body_is_a_connection_error_and_not_resent():
    async def handler(c, n, head, body, w):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial")
        return False

    async def main():
        srv = Scripted(handler)
        async with srv as url:
            http = client(url)
            with pytest.raises(ConnectionError):
                await http.post(b"{}")
            await http.close()
        return srv
    assert len(run(main()).requests) == 1  # the server may have acted on it: re-sending is the runner's call


@pytest.mark.parametrize("wire", [b"SMTP ready\r\n\r\n", b"HTTP/1.1 abc OK\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n0123456789",
                                  b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                  b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc"])
def test_garbage_is_a_protocol_error(wire):
    async def handler(c, n, head, body, w):
        w.write(wire)

    async def main():
        async with Scripted(handler) as url:
            http = client(url)
            with pytest.raises(HTTPProtocolError):
                await http.post(b"{}")
            await http.close()
    run(main())


def test_interim_100_continue_is_skipped():
    async def handler(c, n, head, body, w):
        w.write(b"HTTP/1.1 100 Continue\r\n\r\n" + ok_reply())

    assert posts(handler)[1][0][:1] == (200,)


@pytest.mark.parametrize("abandon", ["timeout", "cancel"])
def test_an_abandoned_request_closes_its_connection(abandon):
    # Closed, not kept: a late reply on it could otherwise be read as the answer to the next request.
    async def handler(c, n, head, body, w):
        if c == 1:
            return "no reply"
        w.write(ok_reply())

    async def main():
        srv = Scripted(handler)
        async with srv as url:
            http = client(url, timeout=0.3 if abandon == "timeout" else 5.0)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            task = asyncio.create_task(http.post(b"{}"))
            if abandon == "cancel":
                await asyncio.sleep(0.1)
                task.cancel()
            with pytest.raises(asyncio.TimeoutError if abandon == "timeout" else asyncio.CancelledError):
                await task
            waited = loop.time() - t0
            out = await http.post(b"{}")
            await asyncio.sleep(0.05)
            await http.close()
        return srv, waited, out
    srv, waited, out = run(main())
    assert (0.25 if abandon == "timeout" else 0.09) < waited < 1.5
    assert out[0] == 200 and srv.client_closed == [1] and srv.connections == 2


def test_pool_bounds_open_connections_and_reuses_them():
    async def handler(c, n, head, body, w):
        await asyncio.sleep(0.02)
        w.write(ok_reply())

    async def main():
        srv = Scripted(handler)
        async with srv as url:
            http = client(url, max_connections=3)
            outs = await asyncio.gather(*(http.post(b"{}") for _ in range(30)))
            await http.close()
        return srv, outs
    srv, outs = run(main())
    assert all(o[0] == 200 for o in outs) and len(srv.requests) == 30
    assert srv.max_open == 3 and srv.connections == 3


CHUNKED_OK = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(OK_BODY), OK_BODY)


@pytest.mark.parametrize("first", [ok_reply(), CHUNKED_OK], ids=["content-length", "chunked"])
def test_bytes_after_a_reply_stop_reuse(first):
    async def handler(c, n, head, body, w):
        w.write(first + ok_reply(b'{"unasked": 1}'))

    srv, outs = posts(handler, 2)
    assert [o[2] for o in outs] == [OK_BODY, OK_BODY]  # never the unasked reply
    assert srv.connections == 2


def test_refused_connection():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        http = client(f"http://127.0.0.1:{port}/v1")
        with pytest.raises(ConnectionError):
            await http.post(b"{}")
    run(main())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_https_with_a_trusted_self_signed_certificate(tmp_path, monkeypatch):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)

    async def handler(c, n, head, body, w):
        w.write(ok_reply())

    async def main(trusted: bool):
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        srv = Scripted(handler)
        srv_obj = await asyncio.start_server(srv._serve, "127.0.0.1", 0, ssl=ctx)
        port = srv_obj.sockets[0].getsockname()[1]
        try:
            if trusted:
                monkeypatch.setenv("SSL_CERT_FILE", str(cert))
            http = client(f"https://127.0.0.1:{port}/v1/chat/completions")
            try:
                return await http.post(b"{}")
            finally:
                await http.close()
        finally:
            srv_obj.close()

    with pytest.raises((ConnectionError, ssl.SSLError)):  # an untrusted certificate is refused
        run(main(trusted=False))
    assert run(main(trusted=True))[2] == OK_BODY


def test_openai_model_falls_back_to_aiohttp_behind_a_proxy(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    direct = OpenAIModel("openai/m", "m", api_key="k", base_url="http://127.0.0.1:9/v1", timeout=5)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    proxied = OpenAIModel("openai/m", "m", api_key="k", base_url="http://10.1.2.3:9/v1", timeout=5)
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    bypassed = OpenAIModel("openai/m", "m", api_key="k", base_url="http://10.1.2.3:9/v1", timeout=5)
    assert (direct.transport, proxied.transport, bypassed.transport) == ("http", "aiohttp", "http")


# --- the parser on its own, fed by hypothesis ----------------------------------------------------

from hypothesis import example, given, settings, strategies as st  # noqa: E402

from trustmh.models._http import _Conn  # noqa: E402

# as in test_parsers_property.py: TRUSTMH_HYPOTHESIS_EXAMPLES=5000 searches harder
EXAMPLES = int(os.environ.get("TRUSTMH_HYPOTHESIS_EXAMPLES", "300"))


class _Transport:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed


def feed(wire: bytes, cuts: list[int]):
    """Feed `wire` to a fresh connection parser in fragments cut at `cuts`; return (outcome, conn), the
    outcome being the waiter's result, its exception, or None while the reply is incomplete."""
    loop = asyncio.new_event_loop()
    try:
        conn = _Conn()
        conn.connection_made(_Transport())
        conn.waiter = loop.create_future()
        bounds = [0, *sorted({c % (len(wire) + 1) for c in cuts}), len(wire)]
        for lo, hi in zip(bounds, bounds[1:]):
            if hi > lo and not conn.waiter.done():
                conn.data_received(wire[lo:hi])
        if not conn.waiter.done():
            return None, conn
        exc = conn.waiter.exception()
        return (exc if exc is not None else conn.waiter.result()), conn
    finally:
        loop.close()


@st.composite
def replies(draw):
    body = draw(st.binary(max_size=300))
    status = draw(st.sampled_from([200, 201, 400, 429, 500]))
    headers = b"Content-Type: application/json\r\n"
    if draw(st.booleans()):
        sizes = draw(st.lists(st.integers(1, 64), max_size=8))
        chunks, pos = [], 0
        for n in sizes:
            chunks.append(body[pos:pos + n])
            pos += n
        chunks.append(body[pos:])
        framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks if c) + b"0\r\n\r\n"
        head = headers + b"Transfer-Encoding: chunked\r\n"
    else:
        framed, head = body, headers + b"Content-Length: %d\r\n" % len(body)
    return b"HTTP/1.1 %d X\r\n%s\r\n%s" % (status, head, framed), status, body


@settings(max_examples=EXAMPLES, deadline=None)
@given(replies(), st.lists(st.integers(0, 10_000), max_size=12))
def test_any_valid_reply_in_any_fragments_parses_to_its_body(reply, cuts):
    wire, status, body = reply
    outcome, conn = feed(wire, cuts)
    assert outcome is not None and not isinstance(outcome, BaseException)
    assert (outcome[0], outcome[2]) == (status, body)
    assert conn.reusable and not conn.buf  # in step for the next request
    incomplete, _ = feed(wire[:-1], cuts)  # one byte short is never a reply
    assert incomplete is None


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.one_of(st.binary(max_size=400),
                 st.builds(lambda j: b"HTTP/1.1 " + j, st.binary(max_size=200)),  # a plausible start
                 st.builds(lambda d, j: b"HTTP/1.1 2" + bytes([d]) + b"0 OK\r\n" + j,
                           st.integers(0, 255), st.binary(max_size=200)),
                 st.builds(lambda j: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + j,
                           st.binary(max_size=100)),
                 st.builds(lambda h, j: b"HTTP/1.1 200 OK\r\n" + h + b"\r\n\r\n" + j,
                           st.sampled_from([b"Transfer-Encoding: chunked", b"Content-Length: 1x",
                                            b"Content-Encoding: deflate\r\nContent-Length: 4",
                                            b"Content-Length: +1", b"Content-Length: 1_0"]),
                           st.binary(max_size=200))),
       st.lists(st.integers(0, 10_000), max_size=12))
@example(b"HTTP/1.1 2\xb20 OK\r\n\r\n", [])  # '\xb2' is superscript two: str.isdigit() says yes, int() no
def test_garbage_is_a_protocol_error_or_incomplete_never_a_crash(junk, cuts):
    outcome, conn = feed(junk, cuts)
    # anything else (IndexError, UnicodeError, ...) would escape data_received and hang the request
    assert outcome is None or isinstance(outcome, (HTTPProtocolError, tuple))
    if isinstance(outcome, HTTPProtocolError):
        assert conn.transport.closed and not conn.reusable


def test_api_key_from_a_file_is_trimmed_and_a_line_break_inside_is_refused(monkeypatch):
    from trustmh.errors import UserError
    from trustmh.models import make_model
    from trustmh.types import Request
    reply = b'{"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}'

    async def handler(c, n, head, body, w):
        w.write(ok_reply(reply))

    async def main():
        srv = Scripted(handler)
        async with srv as url:
            model = make_model("openai/m", base_url=url.rsplit("/chat/completions", 1)[0])
            out = await model.generate(Request([{"role": "user", "content": "q"}], {}))
            await model.aclose()
        return srv, out

    monkeypatch.setenv("OPENAI_API_KEY", "  sk-test-123\n")  # as `export OPENAI_API_KEY=$(cat key.txt)` leaves it
    srv, out = run(main())
    assert out.text == "hi"
    assert b"\r\nAuthorization: Bearer sk-test-123\r\n" in srv.requests[0]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-part-one\nsk-part-two")
    with pytest.raises(UserError, match="OPENAI_API_KEY contains a line break") as err:
        make_model("openai/m", base_url="http://127.0.0.1:9/v1")
    assert "sk-part" not in str(err.value)


# --- hostile servers (issue 14) --------------------------------------------------------------------

import zlib  # noqa: E402

from trustmh.models._http import MAX_BODY, Inflater  # noqa: E402

BOMB = gzip.compress(b"\0" * (4 * MAX_BODY), compresslevel=9)  # ~65 KB on the wire, 64 MB decompressed


def fails_with(handler, exc_type, **kw):
    async def main():
        async with Scripted(handler) as url:
            http = client(url, **kw)
            with pytest.raises(exc_type) as info:
                await http.post(b"{}")
            await http.close()
        return info.value
    return run(main())


def test_a_gzip_bomb_stops_at_the_body_cap():
    async def handler(c, n, head, body, w):
        w.write(ok_reply(BOMB, b"Content-Encoding: gzip\r\n"))

    assert "once decompressed" in str(fails_with(handler, HTTPProtocolError))


def test_an_endless_chunked_reply_stops_at_the_body_cap():
    async def handler(c, n, head, body, w):
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        block = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
        try:
            while True:  # until the client hangs up
                w.write(block)
                await w.drain()
        except ConnectionError:
            return False

    assert "MiB" in str(fails_with(handler, HTTPProtocolError, timeout=60))


def test_an_endless_chunk_size_line_is_refused():
    async def handler(c, n, head, body, w):
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + b"x" * 10_000)

    assert "chunk size line" in str(fails_with(handler, HTTPProtocolError))


@pytest.mark.parametrize("encoding,squeeze", [("gzip", gzip.compress), ("deflate", zlib.compress),
                                              ("deflate", lambda b: zlib.compress(b, wbits=-15))],
                         ids=["gzip", "zlib-deflate", "raw-deflate"])
def test_every_deflate_flavour_is_decoded(encoding, squeeze):
    """"deflate" is zlib-wrapped by the RFC; many servers send it raw, and that used to be `malformed`."""
    async def handler(c, n, head, body, w):
        w.write(ok_reply(squeeze(OK_BODY), b"Content-Encoding: %s\r\n" % encoding.encode()))

    assert posts(handler)[1][0][2] == OK_BODY


def test_a_bare_lf_head_parses():
    """RFC 9112 lets a client take LF alone as a line end; such a head used to hang until the timeout."""
    async def handler(c, n, head, body, w):
        w.write(b"HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: %d\n\n%s" % (len(OK_BODY), OK_BODY))

    srv, outs = posts(handler, 2)
    assert [(o[0], o[2], o[1]["content-type"]) for o in outs] == [(200, OK_BODY, "application/json")] * 2


def test_inflater_caps_every_encoding_and_feeds_in_pieces():
    for encoding, wire in (("identity", b"x" * 100), ("gzip", gzip.compress(b"x" * 100))):
        inf = Inflater(encoding, limit=99)
        with pytest.raises(HTTPProtocolError, match="over"):
            inf.feed(wire)
    inf = Inflater("deflate")
    wire = zlib.compress(OK_BODY, wbits=-15)
    assert b"".join(inf.feed(wire[i:i + 1]) for i in range(len(wire))) + inf.finish() == OK_BODY
    with pytest.raises(HTTPProtocolError, match="cut short"):
        cut = Inflater("gzip")
        cut.feed(gzip.compress(OK_BODY)[:-6])
        cut.finish()
    with pytest.raises(HTTPProtocolError, match="unsupported"):
        Inflater("br")


def test_a_connection_closed_before_the_request_fails_at_once():
    class Closing(Scripted):
        async def _serve(self, reader, writer):
            writer.close()

    async def main():
        srv = Closing(None)
        with pytest.raises(ConnectionError, match="before the request was sent"):
            await _dead_before_the_request_srv(srv)
    run(main())


def test_an_http2_only_server_fails_at_once_and_says_so():
    settings_frame = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # what an h2 (prior knowledge) server sends first

    class H2(Scripted):
        async def _serve(self, reader, writer):
            writer.write(settings_frame)
            await writer.drain()
            await reader.read()  # and then never an HTTP/1.x reply

    async def main():
        with pytest.raises(HTTPProtocolError, match="HTTP/2"):
            await _dead_before_the_request_srv(H2(None))
    run(main())

    # The same frame arriving after the request went out is refused at its first bytes, not at the timeout.
    async def late(c, n, head, body, w):
        w.write(settings_frame)
        return "no reply"
    assert "HTTP/2" in str(fails_with(late, HTTPProtocolError, timeout=60))


async def _dead_before_the_request_srv(srv):
    async with srv as url:
        http = client(url)
        loop = asyncio.get_running_loop()
        conn, _ = await http._connection(loop.time() + 5)
        while conn.reusable:  # ordering, not time: the connection has seen the server's act, then its end
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.01)  # connection_lost, scheduled by the close, has run
        try:
            await http._exchange(conn, b"{}", loop.time() + 5)
        finally:
            await http.close()


def test_parsing_holds_only_the_unfinished_part_so_work_is_linear():
    """Each complete chunk leaves the buffer as it arrives, and the search for the head's end resumes where
    it stopped: without a clock, that is what makes the parser linear (re-reading the whole buffer on
    every packet made a reply in many small chunks quadratic)."""
    payload = bytes(range(256)) * 64
    chunks = [payload[i:i + 7] for i in range(0, len(payload), 7)]
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 50) for i in range(40))
    wire = head + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    wire += b"0\r\n\r\n"
    loop = asyncio.new_event_loop()
    try:
        conn = _Conn()
        conn.connection_made(_Transport())
        conn.waiter = loop.create_future()
        held, scans = [], []
        for i in range(len(wire)):  # one byte per packet, the worst case
            conn.data_received(wire[i:i + 1])
            held.append(len(conn.buf))
            scans.append(conn._scan)
        assert conn.waiter.result()[2] == payload
    finally:
        loop.close()
    body_start = len(wire) - sum(len(b"%x\r\n%s\r\n" % (len(c), c)) for c in chunks) - 5
    assert max(held[body_start:]) <= 2 + 2 + 7 + 2  # one chunk's frame at most, never the body so far
    # the head search resumed near the end each time (not at 0) until the head was complete
    assert all(s >= i - 2 for i, s in enumerate(scans[:len(head) - 1]))
