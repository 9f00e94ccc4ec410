"""Secrets and their removal: which API keys the environment holds, and the one function that takes them
out of any text trustmh shows or stores (error messages, quoted data, reply text), plus URLs without
their credentials.

A leaf: it imports nothing from trustmh, so that errors.py, the data readers and the model backends can
all redact through it without importing each other."""

from __future__ import annotations

import os
import urllib.parse
from typing import Iterable

KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
REDACTED = "[redacted]"


def env_secrets() -> list[str]:
    """The API keys set in the environment, as they are sent: what any printed message must not contain."""
    return [key for name in KEY_VARS if (key := (os.environ.get(name) or "").strip())]


def scrub(text: str, secrets: Iterable[str] | None = None) -> str:
    """`text` without any of `secrets` (default: the keys in the environment), each replaced by
    [redacted]. Callers that cut a text to length cut after this, so no part of a key is left at the cut."""
    for key in env_secrets() if secrets is None else secrets:
        if key and key in text:
            text = text.replace(key, REDACTED)
    return text


def redact_url(url: str | None) -> str | None:
    """A URL without user:password@, query or fragment (gateways take credentials in any of them: a
    ?key=, a signed query). None of them changes which model answers, and they must never reach the
    store, results, report or an error message."""
    if not url:
        return url
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, a bad IPv6 literal: show nothing of it
        return "(unreadable URL)"
    if parts.username is None and parts.password is None and not parts.query and not parts.fragment \
            and "#" not in url and "?" not in url:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))
