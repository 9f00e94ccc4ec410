"""`--quiet` on every command that shows progress: nothing but errors and warnings, also on a terminal (where
the bars would draw); a document asked for with --format still goes to stdout; errors are still printed."""

import json
import os
import pty
import select
import subprocess
import sys

import pytest



QUICK = ("--tasks", "ethics", "--bootstrap", "0")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quiet")
    from conftest import run_quiet, run_spec
    for name, model in (("a", "baseline/counselor"), ("b", "baseline/refuse")):
        run_quiet(run_spec(models=[model], suite="sample", tasks="ethics", n_boot=0), tmp / name)
    return tmp


def _on_a_terminal(args, cwd) -> tuple[int, bytes]:
    """The command with stdout and stderr on a pseudo-terminal, as a person runs it: what it draws there."""
    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS="120", TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "trustmh.cli", *map(str, args)], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command has ended
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return proc.wait(timeout=60), seen


def test_a_quiet_run_on_a_terminal_draws_nothing(tmp_path):
    code, loud = _on_a_terminal(["run", *QUICK, "--out", tmp_path / "loud"], tmp_path)
    assert code == 0 and b"generate" in loud and b"pillars" in loud  # bars and the summary, without --quiet
    code, quiet = _on_a_terminal(["run", *QUICK, "--out", tmp_path / "quiet", "--quiet"], tmp_path)
    assert code == 0 and quiet == b"", quiet[:500]
    assert (tmp_path / "quiet" / "results.json").is_file() and (tmp_path / "quiet" / "report.html").is_file()


def test_quiet_commands_print_nothing_on_success(cli_here, two_runs, tmp_path, capsys):
    a, b = two_runs / "a", two_runs / "b"
    for args in (("run", *QUICK, "--suite", "sample", "--out", tmp_path / "r", "-q"),
                 ("run", *QUICK, "--suite", "sample", "--out", tmp_path / "r2", "--max-cost", "1", "-q"),
                 ("score", a, "-q"),
                 ("report", a, b, "-o", tmp_path / "both.html", "-q"),
                 ("compare", a, b, "--bootstrap", "100", "-q"),
                 ("validate-judge", "--suite", "sample", "--out", tmp_path / "vj", "-q")):
        code, out, err = cli_here(*args)
        assert code == 0 and out == "" and err == "", (args, out[-500:], err[-500:])
    # and without it they do speak (the same commands, so the silence above is --quiet's)
    code, out, err = cli_here("compare", a, b, "--bootstrap", "100")
    assert code == 0 and "ethics.reasoning" in out
    code, out, err = cli_here("score", a)
    assert code == 0 and "results:" in out


def test_quiet_keeps_the_document_asked_for(cli_here, two_runs, capsys):
    a, b = two_runs / "a", two_runs / "b"
    code, out, err = cli_here("compare", a, b, "--bootstrap", "100", "--format", "json", "-q")
    assert code == 0 and err == "" and json.loads(out)["rows"]
    code, out, err = cli_here("report", a, b, "--format", "csv", "-q")
    assert code == 0 and err == "" and out.splitlines()[0].startswith("pillar")


def test_quiet_still_prints_errors(cli_here, tmp_path, capsys):
    code, out, err = cli_here("run", "--limit", "0", "-q")
    assert code == 2 and "--limit must be at least 1" in err
    # an endpoint where nothing listens (loopback, a closed port): the run stops, and says so
    os.environ["OPENAI_API_KEY"] = "sk-test-not-a-key"
    try:
        code, out, err = cli_here("run", "--model", "openai/nobody", "--base-url", "http://127.0.0.1:9/v1",
                             "--suite", "sample", *QUICK, "--out", tmp_path / "down", "-q", "--max-retries", "0")
    finally:
        del os.environ["OPENAI_API_KEY"]
    assert code == 2 and "error" in err and out == ""


def test_data_pull_quiet(cli_here, upstream, tmp_path, capsys):
    code, out, err = cli_here("data", "pull", "confaide", "--from", upstream, "--data-dir", tmp_path / "d", "-q")
    assert code == 0 and out == "" and err == ""
    assert any((tmp_path / "d").rglob("tier_1.txt"))


def test_a_quiet_command_leaves_no_quiet_console_behind(cli_here, two_runs):
    # The Python API and further commands in the same process print again, whether it ended well or not.
    from trustmh.cli import _base
    for args, want in ((("compare", two_runs / "a", two_runs / "b", "--bootstrap", "100", "-q"), 0),
                       (("run", "--limit", "0", "-q"), 2)):
        code, _, _ = cli_here(*args)
        assert code == want and not _base.out.quiet and not _base.note.quiet, args
