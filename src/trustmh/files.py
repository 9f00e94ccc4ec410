"""The one writer, and the run directory: files replaced atomically (never through a link, never over what
trustmh did not create), one process at a time per run folder (a lock), what an output path may be, a run
copied for re-scoring. A leaf module: data/, models/, report/ and the engine all write through it, and it
imports nothing of theirs."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import stat
import time
from pathlib import Path

from .errors import UserError


def _open_lock(path: Path):
    """The lock file, opened without following a link and without blocking on a FIFO planted there."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as e:
        raise UserError(f"cannot open {path}: {e.strerror or e} (a run's lock must be a regular file)") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"refusing to use {path}: not a regular file")
    return os.fdopen(fd, "r+b")


@contextlib.contextmanager
def run_lock(run_dir: Path, name: str = "run.lock", busy: str | None = None):
    """One process per run directory: a second `trustmh run` on it refuses instead of interleaving. The
    lock file is removed when the run ends (a killed run leaves it: it marks the folder as a run's).
    Another `name` is another lock (`trustmh annotate` holds annotate.lock while it serves)."""
    path = run_dir / name
    while True:
        fh = _open_lock(path)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise UserError(busy or f"another trustmh process is using {run_dir}; wait for it or pass a different --out")
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
_TEMP = re.compile(r"^(results\.json|samples\.jsonl|report\.html|annotation\.json)(\.[0-9a-f]{8})?\.tmp$")
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
        # A probe of a random name, created exclusively: never a file (or link) someone put there.
        probe = path / f".write-test.{secrets.token_hex(4)}"
        os.close(os.open(probe, _OPEN_FLAGS, 0o600))
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


# --- the one writer ---------------------------------------------------------------------------------
# Every file trustmh writes goes through here: a temporary file created exclusively (O_EXCL: never an
# existing file, a link or a FIFO someone placed there) under a random name in the target's folder, checked
# to be a regular file, then renamed over the target in one step. The target itself is replaced only when
# it is absent or a regular file: a symlink, a device, a FIFO or a folder is refused with the reason, so no
# output path can write through a link or turn a device into a file.

# The files that make up a run: `report -o` / `compare --html` may never name one (they hold paid replies).
RUN_FILES = ("store.sqlite", "store.sqlite-wal", "store.sqlite-shm", "store.sqlite-journal", "results.json",
             "samples.jsonl", "run.lock", "annotation.json")
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _what(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_replaceable(path: Path, what: str = "output") -> None:
    """Refuse (UserError, with the reason) a target that exists and is not a regular file."""
    if str(path) in ("", "."):
        raise UserError(f"{what} path is empty; give a file name")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UserError(f"{what} {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"refusing to write {what} {path}: it is {_what(st.st_mode)}; trustmh replaces only "
                        f"regular files (give another path)")


def check_output_target(path: Path, runs=(), what: str = "-o") -> Path:
    """An output a user names (`report -o`, `compare --html`): absent or a regular file, and never one of a
    run's own files (store, results, samples, lock), by name inside a run folder or by identity."""
    path = Path(path)
    check_replaceable(path, what)
    folder = path.parent
    in_run = any((folder / m).exists() for m in (*RUN_MARKERS, "results.json"))
    own = [Path(r) / f for r in runs for f in RUN_FILES]
    same = False
    if path.exists():
        for f in own:
            with contextlib.suppress(OSError):
                same = same or os.path.samefile(path, f)
    if (in_run and path.name in RUN_FILES) or same:
        raise UserError(f"refusing to write {what} {path}: it is a run's own file ({path.name}), which holds its "
                        f"results and stored replies; give another path (e.g. report.html)")
    return path


@contextlib.contextmanager
def _replacing(path: Path, binary: bool):
    """An open file that replaces `path` when the block ends without an error. It has a name of its own
    (NAME.<random>.tmp, created exclusively), so two writers (two `trustmh report` at once) never touch
    each other's, a planted link or FIFO at that name is never opened, and a failed write (disk full, an
    exception) leaves none behind."""
    path = Path(path)
    check_replaceable(path)
    for _ in range(100):
        tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, _OPEN_FLAGS, 0o666)
            break
        except FileExistsError:
            continue  # someone holds that name (or planted something there): draw another
    else:
        raise UserError(f"cannot create a temporary file beside {path}")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # O_EXCL makes this impossible; checked all the same
            os.close(fd)
            raise UserError(f"refusing to write {tmp}: not a regular file")
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as fh:
            yield fh
        check_replaceable(path)  # a link made meanwhile is refused too, not replaced
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write(path: Path, text: str | bytes) -> None:
    """Replace `path` with `text` (or bytes) whole or not at all."""
    with _replacing(path, isinstance(text, bytes)) as fh:
        fh.write(text)


@contextlib.contextmanager
def atomic_open(path: Path, *, binary: bool = False):
    """A file to write piece by piece (text in UTF-8, or bytes) that replaces `path` whole or not at all."""
    with _replacing(path, binary) as fh:
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
