"""Issue 14: a run that cannot work stops early with exit 2 and the reason; failed samples are named and
make the run exit non-zero; --out never harms what it did not create; messages print as plain text."""

import json
import os
import socket
import subprocess
import sys

import pytest

from test_cli import assert_user_error
from trustmh.testing.fake_server import Fault, FakeLLMServer




KEY = {"OPENAI_API_KEY": "sk-test-guards"}


@pytest.fixture
def dead_url():
    """A loopback port bound but not listening: every connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


# --- a run that cannot work -----------------------------------------------------------------------

def test_server_down_stops_the_run_with_the_reason(cli, dead_url, tmp_path):
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
def test_bad_url_or_timeout_refused_at_start(cli, args, needle, tmp_path):
    proc = cli("run", "-m", "openai/m", "--suite", "sample", "--no-progress", "--out", tmp_path / "run", *args,
               cwd=tmp_path, env_extra=KEY, timeout=120)
    assert_user_error(proc, needle)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args,needle", [
    (("--temperature", "nan"), "--temperature must be a finite number from 0 to 2"),
    (("--temperature", "inf"), "--temperature must be a finite number from 0 to 2"),
    (("--temperature", "-1"), "--temperature must be a finite number from 0 to 2"),
    (("--temperature", "2.5"), "--temperature must be a finite number from 0 to 2"),
    (("--base-url", "{url}?api-version=2024"), "must not carry a query or fragment"),
    (("--base-url", "{url}#frag"), "must not carry a query or fragment"),
    (("--judge", "openai/j", "--judge-base-url", "{url}?k=v"), "--judge-base-url must not carry a query"),
])
def test_nonsense_settings_refused_before_anything_is_sent(cli, args, needle, tmp_path, dead_url):
    """Issue 24: `--temperature nan` was sent as a non-JSON NaN body; a base URL with a query or fragment
    sent requests to another URL than the spec records."""
    args = [a.format(url=dead_url) for a in args]
    if "--base-url" not in args:
        args += ["--base-url", dead_url]
    proc = cli("run", "-m", "openai/m", "--suite", "sample", "--no-progress", "--out", tmp_path / "run", *args,
               cwd=tmp_path, env_extra=KEY, timeout=120)
    assert_user_error(proc, needle)
    assert not (tmp_path / "run").exists()


def test_temperature_over_anthropic_s_range_is_refused():
    from conftest import run_spec
    from trustmh.errors import UserError
    with pytest.raises(UserError, match="outside what anthropic/claude accepts"):
        run_spec(models=["anthropic/claude"], temperature=1.5, suite="sample")
    assert run_spec(models=["openai/m"], temperature=1.5, suite="sample").temperature == 1.5


# --- failed samples -------------------------------------------------------------------------------

def _replay_one(tmp_path):
    from conftest import write_replay
    return write_replay(tmp_path / "r.jsonl", [{"task": "privacy.awareness_tier1", "item_id": 0, "response": "4"}])


def test_a_judge_that_fails_every_call_fails_run_and_score(cli, tmp_path):
    """Issue 24: a judge answering HTTP 500 to every call left every judged value empty and `run` exited 0,
    even with --fail-on-error."""
    judge_down = lambda n, body: Fault("status", status=500) if body.get("model") == "judge" else None  # noqa: E731
    with FakeLLMServer(faults=judge_down) as srv:
        url = srv.openai_base_url
        args = ("run", "-m", "openai/m", "--base-url", url, "--judge", "openai/judge", "--judge-base-url", url,
                "--suite", "sample", "--tasks", "ethics", "--max-retries", "0", "--no-progress", "--bootstrap", "0",
                "--out", tmp_path / "run")
        proc = cli(*args, cwd=tmp_path, env_extra=KEY)
        assert_user_error(proc, "no usable judge verdict", "ethics.reasoning", "judge error: server_error",
                          "--max-judge-failed")
        assert (tmp_path / "run" / "results.json").is_file()  # written all the same
        proc = cli(*args, "--fail-on-error", cwd=tmp_path, env_extra=KEY)
        assert proc.returncode == 1 and "judge calls failed (server_error" in proc.stderr, proc.stderr
        proc = cli("score", tmp_path / "run", "--max-retries", "0", "--no-progress", cwd=tmp_path, env_extra=KEY)
        assert_user_error(proc, "no usable judge verdict")
        proc = cli(*args, "--max-judge-failed", "1", cwd=tmp_path, env_extra=KEY)  # the user accepts it
        assert proc.returncode == 0, proc.stderr
        assert_user_error(cli(*args, "--max-judge-failed", "nan", cwd=tmp_path, env_extra=KEY),
                          "--max-judge-failed must be between 0 and 1")


def test_failed_share_over_max_exits_2_and_names_the_kinds(cli, tmp_path):
    rep = _replay_one(tmp_path)
    args = ("run", "-m", f"replay/{rep}", "--suite", "sample", "--tasks", "privacy.awareness_tier1",
            "--no-progress", "--out", tmp_path / "run")
    proc = cli(*args, cwd=tmp_path)
    # Today: exit 0, and the kinds are not named.
    assert_user_error(proc, "not_recorded", "more than 5% of a task's samples failed", "--max-failed")
    assert (tmp_path / "run" / "results.json").exists()  # the results are written all the same
    assert cli(*args, "--max-failed", "1", cwd=tmp_path).returncode == 0
    assert cli(*args, "--max-failed", "1", "--fail-on-error", cwd=tmp_path).returncode == 1
    assert_user_error(cli(*args, "--max-failed", "1.5", cwd=tmp_path), "--max-failed must be between 0 and 1")
    # Re-scoring the same run says the same: its samples still have no reply.
    score = ("score", tmp_path / "run", "--no-progress")
    assert_user_error(cli(*score, cwd=tmp_path), "not_recorded", "more than 5% of a task's samples failed")
    assert cli(*score, "--max-failed", "1", cwd=tmp_path).returncode == 0
    assert cli(*score, "--max-failed", "1", "--fail-on-error", cwd=tmp_path).returncode == 1


# --- the terminal ---------------------------------------------------------------------------------

def test_messages_are_text_not_markup(cli, tmp_path):
    # Today: rich.errors.MarkupError traceback.
    assert_user_error(cli("run", "--suite", "sample", "--tasks", "foo[/]", cwd=tmp_path), "foo[/]")


def test_install_hint_keeps_its_extra(cli_here, monkeypatch):
    from trustmh import cli as cli_mod
    from trustmh.errors import UserError

    def app(**kw):
        raise UserError("hf/x needs torch: pip install 'trustmh[hf]'")
    monkeypatch.setattr(cli_mod, "app", app)
    code, _, err = cli_here()
    assert code == 2
    assert "pip install 'trustmh[hf]'" in err  # today: pip install 'trustmh'


def test_gate_help_keeps_brackets(cli, tmp_path):
    proc = cli("gate", "--help", cwd=tmp_path, env_extra={"COLUMNS": "200"})
    assert proc.returncode == 0
    assert "[min] and [max]" in proc.stdout  # today: "with  and  tables"


@pytest.mark.parametrize("columns", ["80", "120"])
def test_summary_keeps_its_columns_with_a_not_run_task(cli, tmp_path, columns):
    from conftest import make_synthetic_data
    data = make_synthetic_data(tmp_path / "data", 3, 3)
    proc = cli("run", "--suite", "data", "--data-dir", data, "--tasks",
               "privacy.awareness_tier1,privacy.leakage", "--no-progress", "--protocol", "trustmh",
               "--out", tmp_path / "run", cwd=tmp_path, env_extra={"COLUMNS": columns})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= int(columns) for line in lines)
    i = next(i for i, line in enumerate(lines) if " task " in line and " metric " in line)
    head = "\n".join(lines[i - 2:i + 1])
    assert "…" not in head, proc.stdout  # today: headers cut to "metr…", "unsc…", "erro…"
    for col in ("task", "metric", "value", "CI", "trust"):
        assert col in head, proc.stdout
    row = next(line for line in lines if "privacy.awareness_tier1" in line)
    # under 120 columns each task's metric is the line under its id (issue 26's two-table layout)
    narrow = int(columns) < 120
    if narrow:
        assert lines[lines.index(row) + 1].split()[0] == "pearson_r", proc.stdout
    following = lines[lines.index(row) + (2 if narrow else 1)].replace("│", " ").split()
    assert "…" not in row and following[0] == "privacy.leakage", proc.stdout  # no wrapped second line
    # the reason is on a line of its own, below the table, not in a cell
    assert any(line.startswith("  privacy.leakage: not run:") for line in lines), proc.stdout


# --- --out never harms what it did not create -----------------------------------------------------

RUN = ("run", "--suite", "sample", "--tasks", "privacy.awareness_tier1", "--no-progress")


def test_out_refuses_a_non_empty_folder_that_is_not_a_run(cli, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    before = sorted(p.name for p in home.iterdir())
    # Today: the run writes store.sqlite, results.json... into it.
    assert_user_error(cli(*RUN, "--out", home, cwd=tmp_path), "not empty and not a trustmh run directory")
    assert sorted(p.name for p in home.iterdir()) == before


def test_out_leaves_permissions_of_an_existing_folder_alone(cli, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    proc = cli(*RUN, "--out", shared, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert oct(shared.stat().st_mode & 0o777) == "0o755"  # today: chmod to 0700
    created = tmp_path / "new" / "run"
    assert cli(*RUN, "--out", created, cwd=tmp_path).returncode == 0
    assert oct(created.stat().st_mode & 0o777) == "0o700"  # a folder the run made is private


def test_out_empty_string_is_refused(cli, tmp_path):
    # Today: --out "" is the current folder, and the run fills it.
    assert_user_error(cli(*RUN, "--out", "", cwd=tmp_path), "--out is empty")
    assert list(tmp_path.iterdir()) == []


def test_run_dir_refuses_another_spec_unless_forced(cli, tmp_path):
    out = tmp_path / "run"
    assert cli(*RUN, "--out", out, cwd=tmp_path).returncode == 0
    results = (out / "results.json").read_text()
    other = ("run", "--suite", "sample", "--tasks", "privacy", "--no-progress", "--out", out)
    # Today: the subset run silently replaces the results of the first.
    assert_user_error(cli(*other, cwd=tmp_path), "holds a run with another spec", "tasks", "--force")
    assert (out / "results.json").read_text() == results
    assert cli(*RUN, "-m", "baseline/refuse", "--out", out, cwd=tmp_path).returncode == 2
    assert cli(*RUN, "--out", out, cwd=tmp_path).returncode == 0  # the same spec resumes
    forced = cli(*other, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert json.loads((out / "results.json").read_text())["spec"]["tasks"] == "privacy"


# --- the machine fails: one line, exit 2, nothing damaged -----------------------------------------

def _store_ok(run_dir):
    import sqlite3
    con = sqlite3.connect(run_dir / "store.sqlite")
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()


def test_disk_full_is_one_line_and_leaves_results_intact(tmp_path, monkeypatch, cli_here):
    import errno
    out = tmp_path / "run"
    code, _, _ = cli_here(*RUN, "--out", out)
    assert code == 0
    before = (out / "results.json").read_text()

    import contextlib
    from trustmh import files as rundir
    real = rundir._replacing  # the one writer every output goes through

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):  # the disk fills while results.json is written
            self.fh.write(data[:10])
            raise OSError(errno.ENOSPC, "No space left on device")

    @contextlib.contextmanager
    def full(path, binary):
        with real(path, binary) as fh:
            yield Full(fh) if path.name == "results.json" else fh
    monkeypatch.setattr(rundir, "_replacing", full)
    code, _, err = cli_here(*RUN, "--out", out)
    assert code == 2 and "No space left on device" in err and "Traceback" not in err  # today: a traceback
    assert len(err.strip().splitlines()) <= 2, err
    assert (out / "results.json").read_text() == before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # no half-written file left behind
    assert _store_ok(out)


def test_store_write_refused_is_one_line(tmp_path, monkeypatch, cli_here):
    """A read-only run directory (as a non-root user sees it) makes SQLite refuse the write."""
    import sqlite3
    from trustmh.engine._store import Store

    def refuse(self, *a, **kw):
        raise sqlite3.OperationalError("attempt to write a readonly database")
    monkeypatch.setattr(Store, "put_calls", refuse)
    code, _, err = cli_here(*RUN, "--out", tmp_path / "run")
    assert code == 2 and "attempt to write a readonly database" in err and "Traceback" not in err


def test_two_reports_at_once_do_not_collide(cli, tmp_path, monkeypatch):
    from trustmh.report import write_report
    out = tmp_path / "run"
    assert cli(*RUN, "--out", out, cwd=tmp_path).returncode == 0
    real = os.replace
    entered = []

    def replace(src, dst, *a, **kw):  # the second report runs whole while the first is about to rename
        if not entered:
            entered.append(1)
            write_report([out], tmp_path / "r.html", paired=False)
        return real(src, dst, *a, **kw)
    monkeypatch.setattr(os, "replace", replace)
    # Today both write r.html.tmp: the first rename then finds it gone (FileNotFoundError).
    write_report([out], tmp_path / "r.html", paired=False)
    assert "<html" in (tmp_path / "r.html").read_text().lower()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("r.html", ".r.html"))) == ["r.html"]


def test_a_rerun_sweeps_old_temp_files_a_killed_writer_left(cli, tmp_path):
    """kill -9 mid-write leaves NAME.<hex>.tmp behind; the next run on the directory removes trustmh's own
    temp names once they are old, and leaves a fresh one (another `trustmh report` may be writing it) and
    anything else alone."""
    import time
    out = tmp_path / "run"
    assert cli(*RUN, "--out", out, cwd=tmp_path).returncode == 0
    old = [out / "results.json.0a1b2c3d.tmp", out / "report.html.deadbeef.tmp", out / "samples.jsonl.tmp"]
    keep = [out / "report.html.12345678.tmp", out / "notes.tmp", out / "results.json.xyz.tmp"]
    for f in old + keep:
        f.write_text("partial")
    hour_ago = time.time() - 3600
    for f in old + keep[1:]:
        os.utime(f, (hour_ago, hour_ago))
    assert cli(*RUN, "--out", out, cwd=tmp_path).returncode == 0
    assert not [f for f in old if f.exists()]
    assert all(f.exists() for f in keep)


@pytest.mark.parametrize("line,needle", [
    ("[1, 2]", "not a sample record"),
    ('{"task": "privacy.awareness_tier1", "model": "baseline/counselor", "values": [1]}', "field 'values'"),
    ('{"task": "privacy.awareness_tier1", "model": "baseline/counselor", "messages": "hi"}', "field 'messages'"),
])
def test_crafted_samples_jsonl_is_one_line(cli, tmp_path, line, needle):
    out = tmp_path / "run"
    assert cli(*RUN, "--out", out, cwd=tmp_path).returncode == 0
    res = json.loads((out / "results.json").read_text())
    res["outputs"].pop("samples_sha256", None)  # crafted together with its results.json
    (out / "results.json").write_text(json.dumps(res))
    (out / "samples.jsonl").write_text(line + "\n")
    # skipped and counted with its line (issue 38: readers count what they skip), never a traceback
    proc = cli("report", out, "-o", tmp_path / "r.html", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "samples.jsonl: 1 lines skipped (" + needle in " ".join(proc.stderr.split()), proc.stderr
    assert "(first at line 1)" in " ".join(proc.stderr.split())


def test_out_of_file_descriptors_is_not_a_dead_server(tmp_path):
    """EMFILE is this process, not the endpoint: the early stop must not take it for a server that is down
    (connections freed by finished requests let the retries through)."""
    import resource
    with FakeLLMServer(latency_s=0.05) as srv:
        env = dict(os.environ, **KEY)
        proc = subprocess.run(
            [sys.executable, "-m", "trustmh.cli", "run", "-m", "openai/m", "--base-url", srv.openai_base_url,
             "--suite", "sample", "--no-progress", "--out", str(tmp_path / "run"), "--max-connections", "64"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
    assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr
    assert "errors in a row" not in proc.stderr, proc.stderr
    assert _store_ok(tmp_path / "run")


def test_missing_data_dir_is_an_error(cli, tmp_path):
    # Today: a typo falls back to the sample suite and the run exits 0 with sample-suite numbers.
    assert_user_error(cli(*RUN, "--suite", "auto", "--data-dir", tmp_path / "nosuch", "--out", tmp_path / "run",
                          cwd=tmp_path), "--data-dir", "is not a directory")
    assert not (tmp_path / "run").exists()


def test_score_out_writes_beside_the_original(cli, tmp_path):
    import hashlib
    from conftest import write_replay
    orig = tmp_path / "run"
    assert cli(*RUN, "--out", orig, cwd=tmp_path).returncode == 0
    judge = write_replay(tmp_path / "j.jsonl", [])

    def snapshot():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(orig.iterdir()) if p.is_file()}
    before = snapshot()
    new = tmp_path / "rejudged"
    # Today: no such option, and `score` rewrites the run in place.
    proc = cli("score", orig, "--judge", f"replay/{judge}", "--out", new, "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert snapshot() == before  # the original: store, results, samples and report untouched
    assert json.loads((new / "results.json").read_text())["spec"]["judge"] == f"replay/{judge}"
    assert json.loads((orig / "results.json").read_text())["spec"]["judge"] == "rules"
    assert_user_error(cli("score", orig, "--out", new, cwd=tmp_path), "must be a new or empty folder")
    assert_user_error(cli("score", orig, "--out", "", cwd=tmp_path), "--out is empty")


def test_sample_suite_results_carry_a_banner(cli, tmp_path):
    out = tmp_path / "run"
    proc = cli(*RUN, "--out", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    banner = json.loads((out / "results.json").read_text())["banner"]  # today: no such field
    assert banner.startswith("SAMPLE SUITE") and "not benchmark results" in banner
    assert proc.stdout.count("SAMPLE SUITE") == 2  # above and below the tables
    assert "SAMPLE SUITE" in (out / "report.html").read_text()


def test_data_suite_results_carry_no_banner(cli, tmp_path):
    from conftest import make_synthetic_data
    data = make_synthetic_data(tmp_path / "data", 3, 3)
    proc = cli("run", "--suite", "data", "--data-dir", data, "--tasks", "privacy.awareness_tier1", "--no-progress",
               "--protocol", "trustmh", "--out", tmp_path / "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "run" / "results.json").read_text())["banner"] is None
    assert "SAMPLE SUITE" not in proc.stdout + (tmp_path / "run" / "report.html").read_text()


# --- per-model base URLs --------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["at", "paired"])
def test_each_model_is_asked_at_its_own_server(cli, tmp_path, form):
    with FakeLLMServer() as a, FakeLLMServer() as b:
        if form == "at":  # today: "openai/one@http..." is sent as the model name to the default server
            args = ["-m", f"openai/one@{a.openai_base_url}", "-m", f"openai/two@{b.openai_base_url}"]
        else:  # today: a second --base-url silently replaces the first
            args = ["-m", "openai/one", "-m", "openai/two", "--base-url", a.openai_base_url,
                    "--base-url", b.openai_base_url]
        proc = cli("run", *args, "--suite", "sample", "--tasks", "privacy.awareness_tier1", "--limit", "2",
                   "--no-progress", "--out", tmp_path / "run", cwd=tmp_path, env_extra=KEY)
        assert proc.returncode == 0, proc.stderr
        assert {r["model"] for r in a.requests} == {"one"} and {r["model"] for r in b.requests} == {"two"}
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(res["models"]) == {"openai/one", "openai/two"}
    assert res["spec"]["options"]["base_urls"] == {"openai/one": a.openai_base_url, "openai/two": b.openai_base_url}


def test_base_urls_must_pair_with_models(cli, tmp_path):
    assert_user_error(cli("run", "-m", "openai/a", "-m", "openai/b", "-m", "openai/c", "--base-url", "http://x/v1",
                          "--base-url", "http://y/v1", "--suite", "sample", cwd=tmp_path, env_extra=KEY),
                      "2 --base-url for 3 --model")
    assert_user_error(cli("run", "-m", "openai/a@ftp://x", "--suite", "sample", cwd=tmp_path, env_extra=KEY),
                      "--base-url must be an http:// or https:// URL")


def test_validate_judge_stops_on_a_dead_judge(cli, dead_url, tmp_path):
    # The judge endpoint stops early too, and validate-judge says so on one line.
    proc = cli("validate-judge", "--judge", "openai/j", "--judge-base-url", dead_url, "--suite", "sample",
               "--no-progress", "--out", tmp_path / "v", cwd=tmp_path, env_extra=KEY, timeout=120)
    assert_user_error(proc, "judge openai/j", "connection errors in a row")
