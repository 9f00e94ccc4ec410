"""The run directory: one process at a time (a lock), files replaced atomically, the stored spec."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path

from ..errors import UserError


@contextlib.contextmanager
def run_lock(run_dir: Path):
    """One process per run directory: a second `trustmh run` on it refuses instead of interleaving."""
    fh = (run_dir / "run.lock").open("a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise UserError(f"another trustmh process is using {run_dir}; wait for it or pass a different --out")
    try:
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def open_run_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to output directory {path}: {e.strerror or e}") from None
    return path


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class HashingWriter:
    """Writes text lines to a file and keeps the sha256 of the bytes written."""

    def __init__(self, fh):
        self.fh, self.sha256 = fh, hashlib.sha256()

    def write(self, text: str) -> None:
        self.fh.write(text)
        self.sha256.update(text.encode("utf-8"))

    def flush(self) -> None:
        self.fh.flush()
