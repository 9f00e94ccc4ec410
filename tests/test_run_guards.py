"""Issue 14: a run that cannot work stops early with exit 2 and the reason; failed samples are named and
make the run exit non-zero; --out never harms what it did not create; messages print as plain text."""

import json
import os
import socket
import subprocess
import sys

import pytest

from trustmh.testing.fake_server import Fault, FakeLLMServer


def cli(*args, cwd=None, env_extra=None, timeout=300):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "trustmh.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def assert_user_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    for n in needles:
        assert n in proc.stderr, proc.stderr


KEY = {"OPENAI_API_KEY": "sk-test-guards"}


@pytest.fixture
def dead_url():
    """A loopback port bound but not listening: every connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


# --- a run that cannot work -----------------------------------------------------------------------

def test_server_down_stops_the_run_with_the_reason(dead_url, tmp_path):
    # Today: every sample is retried 6 times with back-off (3 min 28 s) and the run exits 0.
    proc = cli("run", "-m", "openai/m", "--base-url", dead_url, "--suite", "sample", "--limit", "1",
               "--no-progress", "--out", tmp_path / "run", cwd=tmp_path, env_extra=KEY, timeout=120)
    assert_user_error(proc, "connection errors in a row", "check that the server is running", dead_url)
    assert not (tmp_path / "run" / "results.json").exists()


def test_unknown_model_404_stops_the_endpoint(tmp_path, monkeypatch):
    from trustmh.engine import Limits, run
    from trustmh.errors import UserError
    from conftest import run_spec
    with FakeLLMServer(faults=lambda n, body: Fault("status", status=404)) as srv:
        spec = run_spec(models=["openai/nosuch"], base_url=srv.openai_base_url, suite="sample")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        with pytest.raises(UserError, match="not_found errors in a row.*check the model name"):
            run(spec, tmp_path / "run", limits=Limits(max_connections=1, stop_after=5))
        assert srv.n_requests == 5  # one request per failure counted: nothing more was sent


def test_endpoint_that_answered_waits_out_a_restart(tmp_path, monkeypatch):
    """Once the server has answered, failed attempts that are still being retried do not stop it."""
    from trustmh.engine import Limits, run
    from conftest import run_spec
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    # request 0 answers; then 8 refused-like failures (the connection closed before a reply), then fine
    faults = lambda n, body: Fault("close") if 1 <= n <= 8 else None  # noqa: E731
    with FakeLLMServer(faults=faults) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, suite="sample",
                        tasks="privacy.awareness_tier1", limit=3)
        _, res, _ = run(spec, tmp_path / "run", limits=Limits(max_connections=1, max_retries=10, backoff_base=0.0,
                                                              backoff_max=0.0, stop_after=3))
    assert res.models["openai/m"].tasks["privacy.awareness_tier1"].n_errors == 0


@pytest.mark.parametrize("args,needle", [
    (("--base-url", "notaurl"), "--base-url must be an http:// or https:// URL"),
    (("--base-url", "http://host:notaport/v1"), "--base-url must be an http:// or https:// URL"),
    (("--judge", "openai/j", "--judge-base-url", "ftp://x"), "--judge-base-url must be"),
    (("--timeout", "0"), "--timeout must be a positive number"),
    (("--timeout", "-1"), "--timeout must be a positive number"),
])
def test_bad_url_or_timeout_refused_at_start(args, needle, tmp_path):
    proc = cli("run", "-m", "openai/m", "--suite", "sample", "--no-progress", "--out", tmp_path / "run", *args,
               cwd=tmp_path, env_extra=KEY, timeout=120)
    assert_user_error(proc, needle)
    assert not (tmp_path / "run").exists()
