"""What trustmh's local pages (`trustmh view`, `trustmh annotate`) share: a server bound to 127.0.0.1 only
that answers only requests addressed to that address (Host checked, so a page on another site cannot
reach it through DNS rebinding), every reply sent with headers that keep the page to itself (a
Content-Security-Policy whose scripts need the page's nonce, nosniff, no caching, no referrer, no
framing), and one-line JSON refusals, each counted by kind (`error_counts`).

Both are private to the user who started them: another local user can connect to 127.0.0.1 too, so
every request carries the session's random token (the page in its URL, `?t=`, as the command prints it
in `server.url`; its requests in the TOKEN_HEADER header the page sends). A connection that sends nothing
for IDLE_S is closed, so idle clients cannot hold the server's threads.

A server that takes writes (`annotate`) checks two more things on each one, here too: the request comes
from the page's own origin (the Origin header a browser always sends with a POST names this server), and
it carries the session's token, which only the page served to a request that already held it knows."""

from __future__ import annotations

import collections
import hmac
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import UserError

MAX_BODY = 64 * 1024  # a write's body
IDLE_S = 30.0  # a connection that sends nothing for this long is closed
TOKEN_HEADER = "X-Trustmh-Token"
_KINDS = {400: "bad request", 403: "refused", 404: "no such page", 405: "not allowed"}


class LocalHandler(BaseHTTPRequestHandler):
    server_version = "trustmh"
    nonce: str
    allowed_hosts: set[str]
    allowed_origins: set[str]
    token: str
    errors: collections.Counter  # refusals and failures by kind, under errors_lock
    errors_lock: threading.Lock
    timeout = IDLE_S  # StreamRequestHandler: the connection's socket times out, and the request ends

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the terminal shows the URL only
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy",
                         f"default-src 'none'; script-src 'nonce-{self.nonce}'; style-src 'unsafe-inline'; "
                         f"connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                         f"frame-ancestors 'none'")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj: Any, code: int = 200) -> None:
        self._send(code, json.dumps(obj, ensure_ascii=True, allow_nan=False, default=str).encode("ascii"),
                   "application/json; charset=utf-8")

    def _refuse(self, code: int, why: str, kind: str | None = None) -> None:
        with self.errors_lock:
            self.errors[kind or _KINDS.get(code, f"HTTP {code}")] += 1
        self._json({"error": why}, code)

    def error_counts(self) -> dict[str, int]:
        with self.errors_lock:
            return dict(self.errors)

    def host_ok(self) -> bool:
        return self.headers.get("Host", "") in self.allowed_hosts

    def token_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(str(given).encode(), self.token.encode())

    def write_refused(self) -> str | None:
        """Why this write is refused (None: it may proceed): another Origin, no token or a wrong one, a body
        that is not JSON of a sane size."""
        if not self.host_ok():
            return "this server answers its own address only"
        if self.headers.get("Origin", "") not in self.allowed_origins:
            return "writes are taken from this server's own page only (Origin)"
        if not self.token_ok(self.headers.get(TOKEN_HEADER)):
            return "this write lacks the session's token"
        if not self.headers.get("Content-Type", "").startswith("application/json"):
            return "writes are JSON"
        return None

    def read_json(self) -> Any:
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_BODY:
            raise ValueError(f"a body of at most {MAX_BODY} bytes, with its length")
        return json.loads(self.rfile.read(int(length)).decode("utf-8"))


def bind(handler: type[LocalHandler], port: int, *, idle_s: float = IDLE_S) -> ThreadingHTTPServer:
    """`handler`'s server on 127.0.0.1:`port` (0: any free port), not yet serving; the handler class gets
    its nonce, session token, idle timeout and the hosts and origins it answers, the server its `token` and
    the `url` to open."""
    handler.nonce = secrets.token_urlsafe(18)
    handler.token = secrets.token_urlsafe(24)
    handler.timeout = idle_s
    handler.errors, handler.errors_lock = collections.Counter(), threading.Lock()
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as e:
        raise UserError(f"cannot listen on 127.0.0.1:{port} ({e.strerror}); pick another --port") from None
    server.daemon_threads = True
    bound = server.server_address[1]
    handler.allowed_hosts = {f"127.0.0.1:{bound}", f"localhost:{bound}"}
    handler.allowed_origins = {f"http://{h}" for h in handler.allowed_hosts}
    server.token = handler.token  # type: ignore[attr-defined]
    server.url = f"http://127.0.0.1:{bound}/?t={handler.token}"  # type: ignore[attr-defined]
    return server
