"""A small HTTP/1.1 client for posting JSON to one origin over kept-alive connections.

Why not aiohttp for this: a run posts thousands of near-identical requests to one host, and aiohttp's
general machinery (request and response objects, cookie jar, tracing, per-request timeout contexts)
costs ~0.2 ms of CPU per request, which caps a run on one core near 4,000 req/s (bench/throughput.py).
This client does only what a model endpoint needs -- POST, status, headers, a body framed by
Content-Length, chunked encoding or connection close, optional gzip/deflate, TLS -- at ~0.07 ms.
Proxies are not handled here: the OpenAI model falls back to aiohttp when the environment names one.

The server is not trusted: a reply head over MAX_HEAD or a body over MAX_BODY, on the wire or once
decompressed (a 64 KB gzip bomb holds 64 MB), is a protocol error, and parsing is linear in the bytes
received however the chunks are cut. Lenient where RFC 9112 allows it: a head whose lines end in a
bare LF, and "deflate" without its zlib header (what many servers send), both parse.

Every failure is raised as one of three exceptions so the caller can type it without guessing:
`asyncio.TimeoutError` (no complete reply within the timeout), `ConnectionError` (could not connect,
or the connection dropped before the reply was complete) and `HTTPProtocolError` (the bytes were not a
valid HTTP response)."""

from __future__ import annotations

import asyncio
import re
import ssl
import zlib
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024  # a reply head larger than this is not a model endpoint talking
# A model's reply is kilobytes; 128k tokens of JSON-escaped text stay under ~4 MB. Applies on the wire and
# after decompression, on every transport (Inflater).
MAX_BODY = 16 * 1024 * 1024
_MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions
_HEAD_END = re.compile(rb"\n\r?\n")  # the empty line ending a head, CRLF or bare LF (RFC 9112 2.2)


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n} bytes"


class HTTPProtocolError(ValueError):
    """The server's bytes are not an HTTP/1.x response we can frame."""


class Inflater:
    """Decodes a body's Content-Encoding as its bytes arrive, and refuses to produce more than `limit`
    bytes: zlib.decompress has no limit, and a 3 MB gzip reply took 6.3 GB of memory. Used by every
    transport. "deflate" is the zlib format by the RFC, but many servers send raw deflate: the first two
    bytes tell which (a zlib header is a multiple of 31 with method 8)."""

    def __init__(self, encoding: str, limit: int = MAX_BODY):
        self.encoding = encoding.strip().lower()
        self.limit, self.size = limit, 0
        self._z = None
        self._pending = b""  # deflate: bytes held until the format is known
        if self.encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self.encoding not in ("", "identity", "deflate"):
            raise HTTPProtocolError(f"unsupported Content-Encoding {encoding[:40]!r}")

    def feed(self, data: bytes) -> bytes:
        if self.encoding == "deflate" and self._z is None:
            data, self._pending = self._pending + data, b""
            if len(data) < 2:
                self._pending = data
                return b""
            zlib_header = data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._z = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        if self._z is None:
            out = data
        else:
            try:
                out = self._z.decompress(data, self.limit - self.size + 1)
            except zlib.error:
                raise HTTPProtocolError(f"body is not valid {self.encoding}") from None
            if self._z.unconsumed_tail:
                raise HTTPProtocolError(f"reply body over {_size(self.limit)} once decompressed")
        self.size += len(out)
        if self.size > self.limit:
            raise HTTPProtocolError(f"reply body over {_size(self.limit)}"
                                    + (" once decompressed" if self._z is not None else ""))
        return out

    def finish(self) -> bytes:
        """The end of the body: a compressed stream cut short is an error, as zlib.decompress has it."""
        if self._pending or (self._z is not None and not self._z.eof):
            raise HTTPProtocolError(f"body is not valid {self.encoding} (cut short)")
        return b""


class _Conn(asyncio.Protocol):
    """One connection; one request at a time. The parser is fed by data_received and resolves `waiter`
    with (status, headers, body) when the reply is complete."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.reusable = True
        self.got_bytes = False  # any byte of the current reply: a failure after that must not be retried
        self._head: tuple[int, dict[str, str]] | None = None
        self._length: int | None = None  # body length, or -1 chunked, or None read-to-close
        self._parts: list[bytes] = []  # chunked: the chunks received so far (consumed from buf)
        self._size = 0
        self._scan = 0  # where the search for the head's end resumes: a head trickled in is read once
        # Why the connection can no longer carry a request, when that happened while none was waiting
        # (the event is otherwise lost, and a request written to it would wait for its whole timeout).
        self.dead: Exception | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done():  # bytes nobody asked for: the stream is out of step
            self.reusable = False
            if self.dead is None:
                self.dead = HTTPProtocolError(f"the server sent {_describe(bytes(data[:9]))} before any request")
            self.transport.close()
            return
        self.got_bytes = True
        self.buf += data
        try:
            self._parse()
        except HTTPProtocolError as exc:
            self._fail(exc)

    def connection_lost(self, exc) -> None:
        self.reusable = False
        if self.waiter is None or self.waiter.done():
            if self.dead is None:
                self.dead = ConnectionError(f"connection closed before the request was sent "
                                            f"({type(exc).__name__ if exc else 'EOF'})")
            return
        if self._head is not None and self._length is None:  # body delimited by the close itself
            body = bytes(self.buf)
            self.buf.clear()
            self._finish(body)
            return
        err = ConnectionError(f"connection closed before the reply was complete ({type(exc).__name__ if exc else 'EOF'})")
        self.waiter.set_exception(err)

    # -- parsing

    def _parse(self) -> None:
        if self._head is None:
            if len(self.buf) >= 5 and self.buf[:5] != b"HTTP/":  # fail now, not after the timeout
                raise HTTPProtocolError(f"not an HTTP/1.x reply: {_describe(bytes(self.buf[:9]))}")
            end = _HEAD_END.search(self.buf, self._scan)
            if end is None:
                if len(self.buf) > MAX_HEAD:
                    raise HTTPProtocolError("reply head too large")
                self._scan = max(0, len(self.buf) - 2)  # a match is at most 3 bytes long
                return
            self._scan = 0
            status, headers = _parse_head(bytes(self.buf[:end.start()]))
            del self.buf[:end.end()]
            if 100 <= status < 200:  # 100 Continue and friends precede the real reply
                self._parse()
                return
            self._head = (status, headers)
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._length = -1
            elif "content-length" in headers:
                raw = headers["content-length"]
                # digits only: int() would also take "+5", "1_0" and non-ASCII digits
                if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_BODY:
                    raise HTTPProtocolError("bad Content-Length")
                self._length = int(raw)
            elif status in (204, 304):
                self._length = 0
            else:
                self._length = None
                self.reusable = False
            if headers.get("connection", "").lower() == "close":
                self.reusable = False
        if self._length is None:
            if len(self.buf) > MAX_BODY:
                raise HTTPProtocolError("reply body too large")
            return
        if self._length >= 0:
            if len(self.buf) >= self._length:
                body = bytes(self.buf[:self._length])
                del self.buf[:self._length]
                self._finish(body)
            return
        if self._dechunk():
            body = b"".join(self._parts)
            self._parts, self._size = [], 0
            self._finish(body)

    def _dechunk(self) -> bool:
        """Move the complete chunks at the front of `buf` into `_parts`; True once the last chunk and the
        trailers are in. Each chunk is consumed as it completes, so a reply in many chunks costs time
        linear in its size (re-reading from the start was quadratic)."""
        buf = self.buf
        while True:
            eol = buf.find(b"\r\n", 0, _MAX_CHUNK_LINE)
            if eol < 0:
                if len(buf) >= _MAX_CHUNK_LINE:
                    raise HTTPProtocolError("bad chunk size line")
                return False
            digits = bytes(buf[:eol]).split(b";", 1)[0].strip()
            # int(.., 16) would take "0x1f" and "1_f"; 16 hex digits already say more than MAX_BODY
            if not digits or digits.strip(b"0123456789abcdefABCDEF") or len(digits) > 16:
                raise HTTPProtocolError("bad chunk size")
            size = int(digits, 16)
            if size == 0:
                end = buf.find(b"\r\n\r\n", eol)  # the last chunk, then optional trailers, then an empty line
                if end < 0:
                    if len(buf) > MAX_HEAD:
                        raise HTTPProtocolError("reply trailers too large")
                    return False
                del buf[:end + 4]
                return True
            if self._size + size > MAX_BODY:  # an endless chunked reply stops here
                raise HTTPProtocolError(f"reply body over {_size(MAX_BODY)}")
            start, stop = eol + 2, eol + 2 + size
            if len(buf) < stop + 2:
                return False
            if buf[stop:stop + 2] != b"\r\n":
                raise HTTPProtocolError("chunk not followed by CRLF")
            self._parts.append(bytes(buf[start:stop]))
            self._size += size
            del buf[:stop + 2]

    def _finish(self, body: bytes) -> None:
        """The reply is complete (its framing consumed from `buf`)."""
        if self.buf:  # bytes after the reply, which we did not ask for: the stream is out of step
            self.reusable = False
            self.buf.clear()
        status, headers = self._head
        try:
            inflater = Inflater(headers.get("content-encoding", ""))
            body = inflater.feed(body) + inflater.finish()
        except HTTPProtocolError as exc:
            self._fail(exc)
            return
        self._head, self._length = None, None
        self.waiter.set_result((status, headers, body))

    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


def _describe(data: bytes) -> str:
    """What a server said instead of HTTP/1.x, for the error message."""
    if len(data) >= 9 and data[3] == 0x04 and data[4] in (0, 1):  # an HTTP/2 SETTINGS frame header
        return "an HTTP/2 frame (an HTTP/2-only server? use an HTTP/1.1 endpoint)"
    return repr(data)


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    # One decode for the whole head: it is on the hot path. Lines end in CRLF, or LF alone.
    lines = raw.decode("latin-1").split("\n")
    parts = lines[0].rstrip("\r").split(" ", 2)
    # isascii too: str.isdigit() accepts digits int() refuses, such as a latin-1 superscript two
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (parts[1].isascii() and parts[1].isdigit()):
        raise HTTPProtocolError("not an HTTP/1.x status line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HTTPProtocolError("malformed header line")
        key, value = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if parts[0] == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
        headers.setdefault("connection", "close")
    return int(parts[1]), headers


class HTTPClient:
    """POSTs to one URL over a pool of kept-alive connections (at most `max_connections` at once).

    Made and used inside one event loop. A kept-alive connection that the server closed for idleness
    just as a request went out fails before any reply byte; such a request is sent again on a new
    connection, the rule urllib3 and aiohttp follow too (a server closing an idle connection has not
    acted on what arrived after it decided to close). A request that failed after its reply began is
    never re-sent here: that is the runner's decision, and it counts it."""

    def __init__(self, url: str, *, max_connections: int, timeout: float, headers: dict[str, str]):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {parts.scheme!r} (expected http or https)")
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.timeout = timeout
        host_header = self.host if parts.port is None else f"{self.host}:{parts.port}"
        if ":" in self.host and not host_header.startswith("["):
            host_header = f"[{self.host}]" + (f":{parts.port}" if parts.port else "")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = [f"POST {path} HTTP/1.1", f"Host: {host_header}", "Accept-Encoding: gzip, deflate",
                "Connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        self._head = ("\r\n".join(head) + "\r\nContent-Length: ").encode("latin-1")
        self._idle: list[_Conn] = []
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    async def post(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if self._closed:
            raise ConnectionError("client is closed")
        async with self._slots:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.timeout
            while True:
                conn, reused = await self._connection(deadline)
                try:
                    return await self._exchange(conn, body, deadline)
                except ConnectionError:
                    if reused and not conn.got_bytes:
                        continue  # a stale kept-alive connection: try a new one
                    raise

    async def _connection(self, deadline: float) -> tuple[_Conn, bool]:
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable and not conn.transport.is_closing():
                return conn, True
        loop = asyncio.get_running_loop()
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise asyncio.TimeoutError
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Conn, self.host, self.port, ssl=self._ssl,
                                       server_hostname=self.host if self._ssl else None), remaining)
        except OSError as exc:
            # strerror says which: refused, unreachable, or this process out of file descriptors (EMFILE)
            raise ConnectionError(f"cannot connect to {self.host}:{self.port} "
                                  f"({exc.strerror or type(exc).__name__})") from None
        return conn, False

    async def _exchange(self, conn: _Conn, body: bytes, deadline: float) -> tuple[int, dict[str, str], bytes]:
        if conn.dead is not None or conn.transport.is_closing():  # died since it was connected or kept
            conn.reusable = False
            raise conn.dead or ConnectionError("connection closed before the request was sent")
        loop = asyncio.get_running_loop()
        waiter = conn.waiter = loop.create_future()
        conn.got_bytes = False
        conn.transport.write(self._head + b"%d\r\n\r\n" % len(body) + body)
        # One timer per request rather than asyncio.wait_for, which wraps the await in a task of its own.
        timer = loop.call_at(deadline, _expire, waiter)
        done = False
        try:
            result = await waiter
            done = True
            return result
        finally:
            timer.cancel()
            conn.waiter = None
            if done and conn.reusable and not self._closed:
                self._idle.append(conn)
            else:  # timed out, cancelled, failed or told to close: the stream state is unknown
                conn.reusable = False
                conn.transport.close()

    async def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().transport.close()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())
