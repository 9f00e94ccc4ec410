"""The run directory: one process at a time (a lock), files replaced atomically, the stored spec."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import time
from pathlib import Path

from ..errors import UserError


@contextlib.contextmanager
def run_lock(run_dir: Path):
    """One process per run directory: a second `trustmh run` on it refuses instead of interleaving. The
    lock file is removed when the run ends (a killed run leaves it: it marks the folder as a run's)."""
    path = run_dir / "run.lock"
    while True:
        fh = path.open("a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise UserError(f"another trustmh process is using {run_dir}; wait for it or pass a different --out")
        try:
            current = os.fstat(fh.fileno()).st_ino == path.stat().st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        fh.close()  # the holder before us removed the file as it finished: lock the one there now
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # still held: whoever opens the name next gets a new file
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


# Temp files a killed writer leaves behind: NAME.<8 hex>.tmp from _replacing, NAME.tmp from older writers.
_TEMP = re.compile(r"^(results\.json|samples\.jsonl|report\.html)(\.[0-9a-f]{8})?\.tmp$")
STALE_TEMP_S = 600  # `trustmh report` writes report.html without the lock: never sweep a fresh one


def sweep_temps(run_dir: Path, older_than_s: float = STALE_TEMP_S) -> None:
    """Remove what writers killed mid-write (kill -9) left in a run directory: only trustmh's own temp
    names, only plain files, only older than `older_than_s`. Call it holding the run's lock."""
    cutoff = time.time() - older_than_s
    with os.scandir(run_dir) as entries:
        for entry in entries:
            try:
                if _TEMP.match(entry.name) and entry.is_file(follow_symlinks=False) \
                        and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
            except FileNotFoundError:
                continue  # its writer finished (renamed it) meanwhile


# What makes a folder a trustmh run directory (the lock is there from a run's first moment).
RUN_MARKERS = ("store.sqlite", "run.lock")


def open_run_dir(path: Path) -> Path:
    """The run directory, created 0700 when it does not exist. A folder that exists is used only when it
    is empty or already a run, and its permissions are left as they are: --out must never harm (or
    fill with files) a folder the run did not create."""
    try:
        if path.exists() and not path.is_dir():
            raise UserError(f"--out {path} is a file, not a directory")
        if path.is_dir():
            if any(path.iterdir()) and not any((path / m).exists() for m in RUN_MARKERS):
                raise UserError(f"refusing to use {path}: it is not empty and not a trustmh run directory; "
                                f"give --out a new or empty folder")
        else:
            path.mkdir(parents=True, mode=0o700)
            os.chmod(path, 0o700)  # ours: mkdir's mode is cut by the umask
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to output directory {path}: {e.strerror or e}") from None
    return path


def copy_run(src: Path, dest: Path) -> Path:
    """A new run directory `dest` holding a copy of `src`'s store, for re-scoring beside the original.
    The original is read under its lock and through a read-only connection: it is never written."""
    import sqlite3
    db = src / "store.sqlite"
    if not db.is_file():
        raise UserError(f"{src} is not a trustmh run directory (no store.sqlite)")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UserError(f"--out {dest} must be a new or empty folder (it receives a copy of {src})")
    if dest.resolve() == src.resolve():
        raise UserError("--out is the run itself; leave --out out to re-score in place")
    open_run_dir(dest)
    with run_lock(src):
        # Closed cleanly (no -wal file) the store is one file that no one writes while we hold the lock:
        # immutable=1 then reads it without leaving -wal/-shm files beside the original.
        flags = "?mode=ro" + ("" if db.with_name(db.name + "-wal").exists() else "&immutable=1")
        source = sqlite3.connect(db.resolve().as_uri() + flags, uri=True)
        target = sqlite3.connect(dest / "store.sqlite")
        try:
            os.chmod(dest / "store.sqlite", 0o600)
            source.backup(target)  # consistent, and includes anything still in the WAL
        finally:
            target.close()
            source.close()
    return dest


@contextlib.contextmanager
def _replacing(path: Path):
    """A temporary path that replaces `path` when the block ends without an error. It has a name of its
    own (NAME.<random>.tmp), so two writers (two `trustmh report` at once) never rename each other's, and
    a failed write (disk full, an exception) leaves none behind."""
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text` whole or not at all."""
    with _replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_open(path: Path, *, binary: bool = False):
    """A file to write piece by piece (text in UTF-8, or bytes) that replaces `path` whole or not at all."""
    with _replacing(path) as tmp, (tmp.open("wb") if binary else tmp.open("w", encoding="utf-8")) as fh:
        yield fh


class HashingWriter:
    """Writes bytes to a binary file and keeps their sha256."""

    def __init__(self, fh):
        self.fh, self.sha256 = fh, hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.fh.write(data)
        self.sha256.update(data)

    def flush(self) -> None:
        self.fh.flush()


class Utf8Writer:
    """A text writer over a binary file: each text is encoded once, as it is written."""

    def __init__(self, fh):
        self.fh = fh

    def write(self, text: str) -> None:
        self.fh.write(text.encode("utf-8"))

    def flush(self) -> None:
        self.fh.flush()


def append_part(out: HashingWriter, part) -> None:
    """A temporary binary file's bytes (one task's samples.jsonl lines) onto `out`, closing the part."""
    with part:
        part.seek(0)
        while chunk := part.read(1 << 20):
            out.write(chunk)
