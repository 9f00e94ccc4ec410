"""The command line as a user meets it: offline default run, data commands, and bad input."""

import json
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path


from conftest import assert_user_error, write_replay


def test_version_and_python_m(monkeypatch):
    import trustmh
    declared = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["version"]
    for argv in (["-m", "trustmh", "--version"], ["-m", "trustmh.cli", "--version"]):
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"trustmh {declared}"
    # `python -m trustmh` is the full command line, not just --version.
    proc = subprocess.run([sys.executable, "-m", "trustmh", "nonsense"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Usage: trustmh" in proc.stderr
    # Without installed metadata (a bare source tree) the version says it is unknown instead of guessing.
    def missing(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", missing)
    assert trustmh._version() == "0+unknown"


def test_offline_default_run_uses_sample_suite(cli, tmp_path):
    proc = cli("run", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "sample suite" in proc.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    res = json.loads((run_dir / "results.json").read_text())
    tasks = res["models"]["baseline/counselor"]["tasks"]
    for tid in ("privacy.awareness_tier1", "privacy.leakage", "ethics.reasoning"):
        assert tasks[tid]["status"] == "ok" and tasks[tid]["n_samples"] > 0
    assert res["spec"]["judge"] == "rules" and res["data"]["kind"] == "sample"
    assert oct(run_dir.stat().st_mode & 0o777) == "0o700"
    assert oct((run_dir / "store.sqlite").stat().st_mode & 0o777) == "0o600"


def test_data_pull_from_check_and_list(cli, upstream, tmp_path):
    ddir = tmp_path / "data"
    proc = cli("data", "pull", "--from", upstream, "--data-dir", ddir)
    assert proc.returncode == 0, proc.stderr
    assert (ddir / "trustmh/ethics/EthicMH.csv").read_bytes() == (upstream / "trustmh/ethics/EthicMH.csv").read_bytes()
    check = cli("data", "check", "--data-dir", ddir)
    assert check.returncode == 0 and "present" in check.stdout and "not-supplied" in check.stdout
    listing = cli("list", "--data-dir", ddir)
    assert listing.returncode == 0
    rows = {line.split("│")[1].strip(): line for line in listing.stdout.splitlines() if line.count("│") > 3}
    assert rows["privacy.leakage"].split("│")[6].strip() == "400"
    assert rows["ethics.reasoning"].split("│")[6].strip() == "125"
    # corrupt a file: check reports it and exits non-zero
    (ddir / "trustmh/privacy/tier_1_labels.txt").write_text("3.8\n")
    bad = cli("data", "check", "--data-dir", ddir)
    assert bad.returncode == 1 and "corrupt" in bad.stdout


def test_unknown_task_suggests_close_names(cli, tmp_path):
    assert_user_error(cli("run", "--tasks", "privacy.awarenes_tier1", "--suite", "sample", cwd=tmp_path),
                      "unknown task or pillar", "privacy.awareness_tier1")


def test_unknown_provider_suggests(cli, tmp_path):
    assert_user_error(cli("run", "-m", "opnai/gpt-4o", cwd=tmp_path), "unknown model provider", "openai/gpt-4o")


def test_missing_api_key_names_the_variable(cli, tmp_path):
    assert_user_error(cli("run", "-m", "openai/gpt-4o-mini", "--suite", "sample", cwd=tmp_path), "OPENAI_API_KEY")
    assert_user_error(cli("run", "-m", "anthropic/claude", "--suite", "sample", cwd=tmp_path), "ANTHROPIC_API_KEY")


def test_missing_dataset_names_data_pull(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    assert_user_error(cli("run", "--suite", "data", "--data-dir", tmp_path / "empty", "--tasks", "privacy",
                          cwd=tmp_path), "trustmh data pull")


def test_empty_data_dir_runs_no_task_and_prints_no_score(cli, tmp_path):
    """--suite data on an empty folder: safety.over_refusal's built-in items alone must not make a score."""
    (tmp_path / "empty").mkdir()
    proc = cli("run", "--suite", "data", "--data-dir", tmp_path / "empty", "--no-progress", cwd=tmp_path)
    assert_user_error(proc, "no task could run", "trustmh data pull", "safety.over_refusal")
    assert "trust" not in proc.stdout and not list(tmp_path.glob("runs/*/results.json"))


def test_corrupt_data_file_gives_file_and_line(cli, upstream, tmp_path):
    ddir = tmp_path / "data"
    shutil.copytree(upstream / "trustmh/privacy", ddir / "trustmh/privacy")
    labels = ddir / "trustmh/privacy/tier_1_labels.txt"
    lines = labels.read_text().split("\n")
    lines[3] = "three point four"
    labels.write_text("\n".join(lines))
    assert_user_error(cli("run", "--suite", "data", "--data-dir", ddir, "--tasks", "privacy.awareness_tier1",
                          cwd=tmp_path), f"{labels}:4: expected a number")


def test_replay_bad_json_and_unknown_ids(cli, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "privacy.awareness_tier1", "item_id": 0, "response": "4"}\n{oops\n')
    assert_user_error(cli("run", "-m", f"replay/{bad}", "--suite", "sample", "--tasks", "privacy", cwd=tmp_path),
                      f"{bad}:2: invalid JSON")
    unknown = write_replay(tmp_path / "u.jsonl", [{"task": "privacy.awareness_tier1", "item_id": 999,
                                                    "response": "4"}])
    assert_user_error(cli("run", "-m", f"replay/{unknown}", "--suite", "sample", "--tasks", "privacy",
                          cwd=tmp_path), f"{unknown}:1: unknown item id '999'")
    missing_field = write_replay(tmp_path / "m.jsonl", [{"task": "privacy.awareness_tier1", "item_id": 0}])
    assert_user_error(cli("run", "-m", f"replay/{missing_field}", "--suite", "sample", cwd=tmp_path),
                      "missing field 'response'")


def test_replay_missing_item_is_an_error_kind_not_a_score(cli, tmp_path):
    rep = write_replay(tmp_path / "r.jsonl", [{"task": "privacy.awareness_tier1", "item_id": 0, "response": "4"}])
    proc = cli("run", "-m", f"replay/{rep}", "--suite", "sample", "--tasks", "privacy.awareness_tier1",
               "--out", tmp_path / "run", "--max-failed", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    t = json.loads((tmp_path / "run/results.json").read_text())["models"][f"replay/{rep}"]["tasks"][
        "privacy.awareness_tier1"]
    assert t["n"] == 1 and t["error_kinds"] == {"not_recorded": t["n_samples"] - 1}
    fail = cli("run", "-m", f"replay/{rep}", "--suite", "sample", "--tasks", "privacy.awareness_tier1",
               "--out", tmp_path / "run", "--fail-on-error", cwd=tmp_path)
    assert fail.returncode == 1


def test_unwritable_output_dir(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_user_error(cli("run", "--suite", "sample", "--out", blocker / "run", cwd=tmp_path),
                      "cannot write to output directory")


def test_score_rejudges_without_calling_the_model(cli, upstream, tmp_path):
    gen = write_replay(tmp_path / "g.jsonl", [
        {"task": "ethics.reasoning", "item_id": i, "response": '{"choice": "A", "reasoning": "x"}'} for i in range(5)])
    judge = write_replay(tmp_path / "j.jsonl", [
        {"task": "ethics.reasoning", "item_id": i, "response": '{"sc1":5,"sc2":5,"sc3":5,"sc4":5,"sc5":1}'}
        for i in range(5)])
    run = cli("run", "-m", f"replay/{gen}", "--suite", "data", "--data-dir", upstream, "--tasks", "ethics",
              "--limit", "5", "--out", tmp_path / "run", "--protocol", "trustmh", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    gen.write_text("")  # the model's replies now exist only in the store
    proc = cli("score", tmp_path / "run", "--judge", f"replay/{judge}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    t = json.loads((tmp_path / "run/results.json").read_text())["models"][f"replay/{gen}"]["tasks"]["ethics.reasoning"]
    assert t["n"] == 5 and t["n_errors"] == 0 and t["metrics"]["sc5"]["value"] == 1.0


def test_second_concurrent_run_is_refused(cli_process, tmp_path):
    import fcntl
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with (run_dir / "run.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert_user_error(cli_process("run", "--suite", "sample", "--out", run_dir, cwd=tmp_path), "another trustmh process")


def test_torn_results_and_samples_pair_is_detected(cli, tmp_path):
    """results.json names its samples.jsonl by hash: a pair torn by an interrupted write is refused."""
    proc = cli("run", "--suite", "sample", "--tasks", "privacy.awareness_tier1", "--out", tmp_path / "run",
               "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ok = cli("report", tmp_path / "run", "-o", tmp_path / "r.html", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    samples = tmp_path / "run" / "samples.jsonl"
    samples.write_text(samples.read_text().splitlines()[0] + "\n")  # as if a newer, different run wrote it
    torn = cli("report", tmp_path / "run", "-o", tmp_path / "r2.html", cwd=tmp_path)
    assert_user_error(torn, "does not belong to", "rerun the same trustmh command")


def test_loading_turns_the_collector_back_on_and_freezes_only_after_new_imports(tmp_path, monkeypatch):
    import gc

    from trustmh.cli._base import loading
    assert gc.isenabled()
    before = gc.get_freeze_count()
    with loading():
        assert not gc.isenabled()
        made = [[] for _ in range(100)]  # noqa: F841 - objects, but no module loaded
    assert gc.isenabled() and gc.get_freeze_count() == before  # nothing imported: nothing frozen
    (tmp_path / "trustmh_loading_probe.py").write_text("TABLE = [[i] for i in range(1000)]\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with loading():
        import trustmh_loading_probe  # noqa: F401
    assert gc.isenabled() and gc.get_freeze_count() >= before + 1000  # the module's objects frozen
    gc.disable()
    try:
        with loading():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()


def test_main_called_again_in_one_process_leaves_one_exit_handler(tmp_path):
    """main() registers its exit-time gc.freeze once a process: called again in the same process (the
    tests' in-process runs, a program embedding trustmh) it must not pile up one handler a call."""
    import atexit
    from conftest import run_cli
    run_cli("list", cwd=tmp_path)
    after_one = atexit._ncallbacks()
    for _ in range(3):
        assert run_cli("list", cwd=tmp_path).returncode == 0
    assert atexit._ncallbacks() == after_one
