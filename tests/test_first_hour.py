"""The first hour of a new user (issue 26): what `list`, `run` and the Python API tell them."""

import json
import os
import subprocess
import sys

from conftest import write_replay


def cli(*args, cwd=None, merged=False):
    env = {k: v for k, v in os.environ.items() if k != "TRUSTMH_METHODS_DIR"}
    return subprocess.run([sys.executable, "-m", "trustmh.cli", *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True, cwd=cwd, env=env,
                          timeout=300)


def _items(stdout: str) -> dict[str, list[str]]:
    return {cells[1].strip(): [c.strip() for c in cells[6:-1]] for line in stdout.splitlines()
            if (cells := line.split("│")) and len(cells) > 6}


def test_list_counts_the_protocol_run_uses_and_both_on_request(upstream, methods, tmp_path):
    paper = cli("list", "--data-dir", upstream, "--methods-dir", methods)
    assert paper.returncode == 0, paper.stderr
    assert "items under the paper protocol" in paper.stdout
    # the paper's support reads the whole corpus (2 turns of all 1,300 dialogues), trustmh's the test split
    assert _items(paper.stdout)["reliability.support"] == ["2600"]
    ours = cli("list", "--data-dir", upstream, "--protocol", "trustmh")
    assert int(_items(ours.stdout)["reliability.support"][0]) < 2600
    both = cli("list", "--data-dir", upstream, "--methods-dir", methods, "--protocol", "both")
    assert "items (paper)" in both.stdout and "items (trustmh)" in both.stdout
    assert _items(both.stdout)["reliability.support"] == ["2600", _items(ours.stdout)["reliability.support"][0]]
    assert _items(both.stdout)["ethics.reasoning"] == ["125", "125"]


def test_list_notice_is_a_paragraph_of_its_own(tmp_path):
    proc = cli("list", "--data-dir", tmp_path, merged=True)
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.rstrip().endswith("for the full benchmark."))  # (wrapped)
    assert lines[at + 1].strip() == "" and "trustmh tasks (sample suite" in lines[at + 2], lines[:4]
    assert "items under the trustmh protocol" in proc.stdout


def test_replay_gaps_say_a_rerun_cannot_help_and_no_lock_is_left(tmp_path):
    # the sample suite's tier-1 items, one of them recorded
    rep = write_replay(tmp_path / "r.jsonl", [{"task": "privacy.awareness_tier1", "item_id": "0",
                                               "response": "Answer: 3)"}])
    proc = cli("run", "--suite", "sample", "--model", f"replay/{rep}", "--tasks", "privacy.awareness_tier1",
               "--out", tmp_path / "run", "--no-progress", "--max-failed", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "not_recorded" in proc.stderr and "a rerun cannot help" in proc.stderr
    assert "rerun the same command to retry" not in proc.stderr
    assert "the replay file holds no reply for them" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if not p.name.startswith("store.sqlite")) == [
        "report.html", "results.json", "samples.jsonl"]  # run.lock went with the run


def test_the_python_api_writes_the_report_as_the_cli_does(tmp_path):
    import trustmh
    run_dir, results, _ = trustmh.run(trustmh.RunSpec(models=["baseline/refuse"], tasks="privacy.awareness_tier1",
                                                      suite="sample", n_boot=50), tmp_path / "run")
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "privacy.awareness_tier1" in page and "baseline/refuse" in page
    assert json.loads((run_dir / "results.json").read_text())["models"]["baseline/refuse"]
    assert not (run_dir / "run.lock").exists()
    trustmh.run(trustmh.RunSpec(models=["baseline/refuse"], tasks="privacy.awareness_tier1", suite="sample",
                                n_boot=50), tmp_path / "bare", report=False)
    assert not (tmp_path / "bare" / "report.html").exists()


def test_gate_ends_with_n_of_m_failed_and_says_why_a_pillar_is_partial(tmp_path):
    run = cli("run", "--suite", "sample", "--model", "baseline/random", "--tasks",
              "privacy.awareness_tier1,safety.over_refusal", "--out", tmp_path / "run", "--no-progress", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    gate = cli("gate", tmp_path / "run", "--min", "pillar:privacy=10", "--max", "safety.over_refusal=0.5")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    lines = gate.stdout.strip().splitlines()
    # 2 thresholds, the privacy pillar's partial check, and the coverage of the 2 tasks they rest on
    assert lines[-1] == ("gate failed: 2 of 5 checks failed (thresholds missed: 1, partial scores: 1) "
                         "on 1 model(s)")
    (partial,) = [ln for ln in lines if "is partial" in ln]
    assert "privacy.leakage not in this run" in partial and "privacy.awareness_tier2a not in this run" in partial
    ok = cli("gate", tmp_path / "run", "--max", "safety.over_refusal=1")
    assert ok.returncode == 0 and ok.stdout.strip().splitlines()[-1] == "gate passed: 2 checks on 1 model(s)"
