"""The first hour of a new user (issue 26): what `list`, `run` and the Python API tell them."""

import json

from conftest import write_replay


def _items(stdout: str) -> dict[str, list[str]]:
    return {cells[1].strip(): [c.strip() for c in cells[6:-1]] for line in stdout.splitlines()
            if (cells := line.split("│")) and len(cells) > 6}


def test_list_counts_the_protocol_run_uses_and_both_on_request(fresh_cli, upstream, methods, tmp_path):
    paper = fresh_cli("list", "--data-dir", upstream, "--methods-dir", methods)
    assert paper.returncode == 0, paper.stderr
    assert "items under the paper protocol" in paper.stdout
    # the paper's support reads the whole corpus (2 turns of all 1,300 dialogues), trustmh's the test split
    assert _items(paper.stdout)["reliability.support"] == ["2600"]
    ours = fresh_cli("list", "--data-dir", upstream, "--protocol", "trustmh")
    assert int(_items(ours.stdout)["reliability.support"][0]) < 2600
    both = fresh_cli("list", "--data-dir", upstream, "--methods-dir", methods, "--protocol", "both")
    assert "items (paper)" in both.stdout and "items (trustmh)" in both.stdout
    assert _items(both.stdout)["reliability.support"] == ["2600", _items(ours.stdout)["reliability.support"][0]]
    assert _items(both.stdout)["ethics.reasoning"] == ["125", "125"]


def test_list_notice_is_a_paragraph_of_its_own(fresh_cli, tmp_path):
    proc = fresh_cli("list", "--data-dir", tmp_path, merged=True)
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.rstrip().endswith("for the full benchmark."))  # (wrapped)
    assert lines[at + 1].strip() == "" and "trustmh tasks (sample suite" in lines[at + 2], lines[:4]
    assert "items under the trustmh protocol" in proc.stdout


def test_replay_gaps_say_a_rerun_cannot_help_and_no_lock_is_left(fresh_cli, tmp_path):
    # the sample suite's tier-1 items, one of them recorded
    rep = write_replay(tmp_path / "r.jsonl", [{"task": "privacy.awareness_tier1", "item_id": "0",
                                               "response": "Answer: 3)"}])
    proc = fresh_cli("run", "--suite", "sample", "--model", f"replay/{rep}", "--tasks", "privacy.awareness_tier1",
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


def test_gate_ends_with_n_of_m_failed_and_says_why_a_pillar_is_partial(fresh_cli, tmp_path):
    run = fresh_cli("run", "--suite", "sample", "--model", "baseline/random", "--tasks",
              "privacy.awareness_tier1,safety.over_refusal", "--out", tmp_path / "run", "--no-progress", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    gate = fresh_cli("gate", tmp_path / "run", "--min", "pillar:privacy=10", "--max", "safety.over_refusal=0.5")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    lines = gate.stdout.strip().splitlines()
    # 2 thresholds, the privacy pillar's partial check, and the coverage of the 2 tasks they rest on
    assert lines[-1] == ("gate failed: 2 of 5 checks failed (thresholds missed: 1, partial scores: 1) "
                         "on 1 model(s)")
    (partial,) = [ln for ln in lines if "is partial" in ln]
    assert "privacy.leakage not in this run" in partial and "privacy.awareness_tier2a not in this run" in partial
    ok = fresh_cli("gate", tmp_path / "run", "--max", "safety.over_refusal=1")
    assert ok.returncode == 0 and ok.stdout.strip().splitlines()[-1] == "gate passed: 2 checks on 1 model(s)"


def test_dry_run_plans_a_large_task_from_a_spread_of_items_and_says_each_reason_once(fresh_cli, tmp_path, monkeypatch):
    from conftest import make_synthetic_data, run_spec

    from trustmh.engine import context, prepare
    from trustmh.engine._plan import PLAN_ITEMS, plan
    from trustmh.tasks.privacy import AwarenessTier1
    data = make_synthetic_data(tmp_path / "data", n_tier1=250, n_ethics=3)
    spec = run_spec(models=["baseline/refuse"], tasks="privacy.awareness_tier1", suite="data", data_dir=str(data))
    ctx = context(spec)
    built = []
    own = type(AwarenessTier1().method(ctx))
    real = own.samples
    monkeypatch.setattr(own, "samples", lambda self, item, c: built.append(item.id) or real(self, item, c))
    prepared, _ = prepare(spec, ctx, lazy=True)
    (row,) = plan(spec, ctx, prepared, tmp_path / "no-run")
    assert len(built) == PLAN_ITEMS < 250  # not every item: a spread of them
    assert built[:3] == ["0", "2", "5"] and built[-1] == str(99 * 250 // PLAN_ITEMS)
    assert row.estimated and row.samples == row.model_calls == 250  # one sample per item, scaled back up
    # on the command line: one row per task, one line per model, each not-run reason once
    args = ["run", "--data-dir", data, "--protocol", "trustmh", "--tasks",
            "privacy.awareness_tier1,ethics.reasoning,reliability.diagnosis,robustness.diagnosis",
            "--model", "baseline/refuse", "--model", "baseline/random", "--model", "baseline/counselor",
            "--dry-run", "--out", tmp_path / "run"]
    dry = fresh_cli(*args, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    text = dry.stdout
    assert text.count("swmh missing") == 1
    assert "reliability.diagnosis, robustness.diagnosis: not run: swmh missing" in " ".join(text.split())
    rows = [ln for ln in text.splitlines() if ln.startswith("│ privacy.awareness_tier1")]
    assert len(rows) == 1 and "~750" in rows[0] and "3 models" in rows[0]  # 250 items x 3 models
    per_model = [ln for ln in text.splitlines() if ln.startswith("│ baseline/")]
    assert len(per_model) == 3 and all("~253" in ln for ln in per_model), per_model
    assert not (tmp_path / "run").exists()


def test_the_summary_reads_whole_at_80_columns(tmp_path, fresh_cli):
    proc = fresh_cli("run", "--suite", "sample", "--out", tmp_path / "run", "--no-progress", "--bootstrap", "50",
                     env_extra={"COLUMNS": "80"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "…" not in text  # no header, metric or number cut to an ellipsis
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    tasks = res["models"]["baseline/counselor"]["tasks"]
    lines = text.splitlines()
    for tid, t in tasks.items():
        assert any(ln.split()[:1] == [tid] for ln in lines), tid  # every task id whole, at a row's start
        if t["status"] == "ok":
            assert any(ln.strip().startswith(t["metric"] + " ") for ln in lines), t["metric"]
            if t["trust_score"] is not None:
                row = next(ln for ln in lines if ln.split()[:1] == [tid])
                mark = "*" if t.get("undefined_by_model") else ""  # trust 0 undefined by the model's replies
                assert row.split()[-1] == f"{t['trust_score']:.1f}{mark}", row
    # the framed tables keep within 80 columns (prose lines wrap as the terminal does)
    table_lines = [ln for ln in lines if ln.startswith(" ") and not ln.startswith("  ")]
    assert table_lines and max(map(len, table_lines)) <= 80


def test_progress_totals_are_known_from_the_start_and_add_up_over_models(tmp_path):
    from pathlib import Path

    from trustmh.cli.render import _ProgressView
    from trustmh.engine import PhaseProgress, RunSpec, TaskProgress, run
    from trustmh.testing.fake_server import FakeLLMServer
    # ethics' replies recorded for 2 of its 5 items: the other 3 are errors of that task
    rep = write_replay(tmp_path / "r.jsonl", [{"task": "ethics.reasoning", "item_id": str(i), "response": "Answer: A"}
                                              for i in range(2)])
    events = []
    with FakeLLMServer(reply=lambda body: "Answer: A. 3") as srv:
        spec = RunSpec(models=["openai/a", f"replay/{rep}"], judge="openai/j", suite="sample",
                       tasks="ethics,fairness.support,robustness.crisis", base_url=srv.openai_base_url,
                       judge_base_url=srv.openai_base_url, n_boot=50)
        view = _ProgressView(False)
        with view:
            _, results, _ = run(spec, Path(tmp_path / "run"), events=lambda e: (events.append(e), view(e)))
    for model, mr in results.models.items():
        gen = [e for e in events if isinstance(e, PhaseProgress) and e.phase == "generate" and e.label == model]
        n_samples = sum(t.n_samples for t in mr.tasks.values())
        # the total is the run's from the first report on (robustness builds its variants as it goes)
        assert gen and {e.total for e in gen} == {n_samples}, (model, [(e.done, e.total) for e in gen[:3]])
        final = {e.task: e for e in events if isinstance(e, TaskProgress) and e.model == model and e.finished}
        assert set(final) == set(mr.tasks)
        for tid, t in mr.tasks.items():
            assert (final[tid].done, final[tid].total, final[tid].errors) == (t.n_samples, t.n_samples, t.n_errors)
    assert results.models[f"replay/{rep}"].tasks["ethics.reasoning"].n_errors == 3
    # one judge bar per judge, shared by the models as its endpoint is (engine/judge/_pool.py): the models'
    # counts add up in it instead of one model's replacing another's, and its total never falls under done
    judge = [e for e in events if isinstance(e, PhaseProgress) and e.phase == "judge"]
    judge_labels = {e.label for e in judge}
    assert judge_labels == {"judge openai/j"}
    assert all(e.done <= e.total for e in judge) and judge[-1].done == judge[-1].total > 0
    last = {e.label: e for e in events if isinstance(e, PhaseProgress)}
    done, total, errors, approx = view.phase_totals("generate")
    assert done == total == sum(last[m].total for m in results.models) and not approx
    assert view.phase_totals("judge")[:2] == (sum(last[lb].done for lb in judge_labels),) * 2


def test_a_data_dir_holding_only_method_files_runs_the_sample_suite(fresh_cli, methods, tmp_path):
    """The authors' method files are no task's items: a data dir with nothing else in it is no benchmark data,
    and the run says so and takes the sample suite instead of running every task as "not run"."""
    import shutil
    data = tmp_path / "data"
    shutil.copytree(methods, data / "methods")
    dry = fresh_cli("run", "--data-dir", data, "--tasks", "ethics.reasoning", "--dry-run", "--out", tmp_path / "run",
              cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "No datasets in" in dry.stderr and "sample suite" in dry.stderr, dry.stderr
