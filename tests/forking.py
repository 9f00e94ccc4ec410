"""`trustmh` commands in processes of their own without a fresh interpreter's start-up each time.

A test that needs a process (kill -9 at a point, a plugin that must not stay registered in the test's
process) used to pay `python -m trustmh.cli`'s start-up, ~0.7 s of imports, at every launch. Here each
command is a child forked from a server (multiprocessing's forkserver, one per test process) that imported
trustmh once: a real process with its own pid, environment, folder, argv and standard streams, which a
signal kills as it would kill `trustmh`. What differs from a fresh interpreter is only when the modules
were imported, so a test of import-time behaviour, or one that sets a variable read at import (see
conftest._READ_AT_IMPORT), starts a real interpreter instead.

Kept free of pytest: the server imports this module to run the children."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import traceback

PRELOAD = ["trustmh.cli", "trustmh.files", "trustmh.engine.score", "forking"]
_context = None


def _forkserver():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _child(argv: list[str], environ: dict[str, str], cwd: str | None, path_first: str | None, out: str,
           err: str) -> None:
    """In the forked process: the streams, environment, folder, path and argv of `python ARGV`, then run it.
    argv is `-m trustmh.cli ARGS` or `-c CODE ARGS`."""
    for fd, name in ((1, out), (2, err)):
        target = os.open(name, os.O_WRONLY | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(environ)
    if cwd is not None:
        os.chdir(cwd)
    if path_first:
        sys.path.insert(0, path_first)
    try:
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            assert argv[:2] == ["-m", "trustmh.cli"], argv
            from trustmh import cli
            sys.argv = ["trustmh", *argv[2:]]
            cli.main()
    except Exception:  # a traceback and exit code 1, as the interpreter ends a process
        traceback.print_exc()
        sys.exit(1)


class Forked:
    """The Popen calls the tests make (poll, wait, send_signal, kill, returncode; stdout and stderr read
    once it has ended), for a command forked from the server."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, cwd=None, path_first=None,
                 merged: bool = False):
        self.args = [sys.executable, *argv]
        self._files = []
        for _ in range(1 if merged else 2):
            fd, name = tempfile.mkstemp(prefix="trustmh-forked-")
            os.close(fd)
            self._files.append(name)
        out, err = self._files[0], self._files[-1]
        self._process = _forkserver().Process(
            target=_child, args=(list(argv), dict(os.environ if env is None else env),
                                 None if cwd is None else str(cwd), None if path_first is None else str(path_first),
                                 out, err))
        self._process.start()
        self.pid = self._process.pid
        self.merged = merged

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode  # -N when killed by signal N, as Popen says

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self):  # a handle whose output nobody read leaves no file behind
        for name in self._files:
            try:
                os.unlink(name)
            except OSError:
                pass

    def output(self) -> tuple[str, str | None]:
        """(stdout, stderr) as text once it has ended (stderr None when merged into stdout); the files go."""
        texts = []
        for name in self._files:
            with open(name, encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
            os.unlink(name)
        self._files = []
        return texts[0], (None if self.merged else texts[-1])


def run(argv: list[str], *, timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
    """subprocess.run(capture_output=True, text=True) for a forked command."""
    proc = Forked(argv, **kw)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        proc.output()
        raise
    out, err = proc.output()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# The server imports trustmh.cli before this module (PRELOAD): typer's click command is built there once
# (trustmh.cli._command keeps it), so that no forked command reads every command's signature again (~20 ms).
if "trustmh.cli" in sys.modules:
    sys.modules["trustmh.cli"]._command(sys.modules["trustmh.cli"].app)
