"""What a run of one's own tasks says about itself: a plugin task's `pillar = "mine"` forms that pillar
(results.json, terminal, report, gate), outside the paper's overall score; a run of tasks with built-in items
carries no sample-suite banner and prints no rows for the paper's pillars it has no task in; and a --limit run
says how many items and how many samples it took, the same in the terminal, the dry run and the report."""

import json
import re


from test_plugins import INCLUDED, ok

from trustmh.engine.spec import describe_limit


def test_a_plugin_pillar_is_a_pillar_and_its_run_no_sample_suite_try_out(cli, tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(INCLUDED)
    run = tmp_path / "run"
    # 80 columns, a terminal's default: the notes column wraps, and no number is cut to "100…"
    proc = ok(cli("run", "--include", f, "--model", "terse/x", "--tasks", "mine", "--out", run, "--bootstrap", "100",
                  cwd=tmp_path, env_extra={"COLUMNS": "80"}))
    res = json.loads((run / "results.json").read_text())
    mr = res["models"]["terse/x"]
    # the task's own pillar, a row per task, scored as its task; not "beyond the paper", not in the overall
    mine = mr["pillars"]["mine"]
    assert mine["tasks"] == ["mine.short"] and mine["trust_score"] == mr["tasks"]["mine.short"]["trust_score"] == 100
    assert mine["rows"]["mine.short"]["measured"] == ["mine.short"] and (mine["n_rows"], mine["n_rows_measured"]) == (1, 1)
    assert mr["beyond_paper"] == {} and mr["trust_score"] is None and mr["n_pillars_measured"] == 0
    # no banner: nothing of the sample suite was run
    assert res["banner"] is None
    text = proc.stdout + proc.stderr
    assert "SAMPLE SUITE" not in text and "sample suite" not in text
    assert "in no pillar" not in text and "not measured" not in text
    assert not re.search(r"^\W*(reliability|crisis|safety|fairness|privacy|robustness|sycophancy|ethics)\b", text, re.M)
    (row,) = [ln for ln in text.splitlines() if re.match(r"\W*mine\s", ln)]
    assert "100.0" in row and "1 of 1" in row and "…" not in text
    assert "your own pillar, not in the overall score" in " ".join(text.split())
    # the gate checks it by name, and the report ranks it as a pillar column
    gate = cli("gate", run, "--min", "pillar:mine=90", cwd=tmp_path)
    assert gate.returncode == 0 and "gate passed" in gate.stdout, gate.stdout + gate.stderr
    gate = cli("gate", run, "--min", "pillar:mine=100.5", cwd=tmp_path)
    assert gate.returncode == 1 and "pillar:mine = 100 < min 100.5" in gate.stdout
    html = (run / "report.html").read_text()
    head = re.search(r'<table class="board">.*?</thead>', html, re.S).group(0)
    assert re.findall(r"<th>([^<]*)</th>", head) == ["#", "model", "overall", "mine"]
    assert 'title="rank in mine">#1</sup>' in html  # complete on its own pillar: ranked, not starred apart
    assert "A pillar of your own tasks" in html


def test_a_sample_suite_run_keeps_its_banner_and_a_run_beside_a_plugin_too(cli, tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(INCLUDED)
    run = tmp_path / "both"
    proc = ok(cli("run", "--include", f, "--model", "terse/x", "--tasks", "mine,ethics", "--out", run,
                  "--bootstrap", "0", cwd=tmp_path))
    res = json.loads((run / "results.json").read_text())
    assert res["banner"] and res["banner"].startswith("SAMPLE SUITE") and "SAMPLE SUITE" in proc.stdout
    pillars = res["models"]["terse/x"]["pillars"]
    assert pillars["ethics"]["trust_score"] is not None and pillars["mine"]["trust_score"] == 100
    # the overall score is the paper's: the ethics pillar alone, the plugin pillar left out of it
    assert res["models"]["terse/x"]["trust_score"] == pillars["ethics"]["trust_score"]


def test_limit_says_items_and_samples_in_every_view(cli_here, tmp_path, capsys):
    args = ("run", "--tasks", "fairness,ethics", "--limit", "2", "--bootstrap", "0", "--suite", "sample")
    code, plan, err = cli_here(*args, "--dry-run", "--out", tmp_path / "r")
    assert code == 0, err
    code, out, err = cli_here(*args, "--out", tmp_path / "r")
    assert code == 0, err
    res = json.loads((tmp_path / "r" / "results.json").read_text())
    tasks = res["models"]["baseline/counselor"]["tasks"]
    fair, ethics = tasks["fairness.support"]["n_samples"], tasks["ethics.reasoning"]["n_samples"]
    assert ethics == 2 and fair == 2 * 17  # two dialogues, each asked as 17 people
    # the dry run: items and samples, and the task whose items make several samples
    assert describe_limit(2, fair + ethics, {"fairness.support": (2, fair)}) in " ".join(plan.split())
    # the run's summary and the report's banner: the same words, from results.json
    banner = f"SUBSET: {describe_limit(2, fair + ethics)}"
    assert banner in " ".join(out.split())
    html = (tmp_path / "r" / "report.html").read_text()
    assert banner.replace("'", "&#39;") in html
    assert "36 samples per model" in banner  # 2 + 34, counted by hand above


def test_the_documented_limit_20_count_is_the_plan_s(cli_here, upstream, methods, tmp_path, capsys):
    """docs/run.md's figure (items vs samples at --limit 20, the whole public benchmark, the paper's
    protocol) is what the dry run counts on the real data."""
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[1] / "docs" / "run.md").read_text(encoding="utf-8")
    (claimed,) = set(re.findall(r"`--limit 20` is ([\d,]+) samples per model", doc))
    code, plan, err = cli_here("run", "--model", "openai/x", "--judge", "openai/gpt-4.1", "--data-dir",
                                     upstream, "--methods-dir", methods, "--limit", "20", "--dry-run",
                                     "--out", tmp_path / "r")
    assert code == 0, err
    counted = re.search(r"--limit 20: the first 20 items of each task, ([\d,]+) samples per model", " ".join(plan.split()))
    assert counted and counted.group(1) == claimed, (claimed, counted and counted.group(1))
