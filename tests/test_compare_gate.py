"""`trustmh compare` and `trustmh gate` on replay runs whose differences are known by construction."""

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import UPSTREAM, run_quiet, run_spec, write_replay
from trustmh.analysis.compare import compare_runs
from trustmh.analysis.runs import load_run
from trustmh.analysis.compare_format import to_csv, to_json, to_markdown
from trustmh.tasks import TASKS, DataSource, RunContext

SAMPLE = Path(__file__).resolve().parents[1] / "src" / "trustmh" / "data" / "sample"
N_CORRECT_B = 60  # model B answers the first 60 gold items right and the rest wrong


def wrong(letter: str) -> str:
    return "B" if letter == "A" else "A"


def ethics_replay(path: Path, items, n_right: int | None) -> Path:
    """Answer the gold letter on the first `n_right` gold items (all when None), a wrong one after."""
    recs, seen = [], 0
    for it in items:
        right = it.target is not None and (n_right is None or seen < n_right)
        seen += it.target is not None
        letter = it.target if right else wrong(it.target or "A")
        recs.append({"task": "ethics.reasoning", "item_id": it.id, "response": f"Answer: {letter}"})
    return write_replay(path, recs)


def ethics_run(tmp: Path, name: str, n_right: int | None):
    items = TASKS["ethics.reasoning"]().method(RunContext()).load(DataSource(UPSTREAM, "data"), RunContext())
    replay = ethics_replay(tmp / f"{name}.jsonl", items, n_right)
    spec = run_spec(models=[f"replay/{replay}"], tasks="ethics.reasoning", suite="data", data_dir=str(UPSTREAM))
    run_quiet(spec, tmp / name)
    return tmp / name, items


@pytest.fixture(scope="module")
def ethics_runs(tmp_path_factory):
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    tmp = tmp_path_factory.mktemp("ethics")
    a, items = ethics_run(tmp, "a", None)
    b, _ = ethics_run(tmp, "b", N_CORRECT_B)
    a2, _ = ethics_run(tmp, "a2", None)  # the same replies as a, in another run
    gold = sum(it.target is not None for it in items)
    return {"a": a, "b": b, "a2": a2, "n_items": len(items), "n_gold": gold}


def test_compare_finds_a_known_difference(ethics_runs):
    [c] = compare_runs([load_run(ethics_runs["a"]), load_run(ethics_runs["b"])], n_boot=300)
    d = c.get("ethics.reasoning")
    expected = N_CORRECT_B / ethics_runs["n_gold"] - 1.0
    assert d.diff == pytest.approx(expected)
    assert (d.a, d.b) == pytest.approx((1.0, N_CORRECT_B / ethics_runs["n_gold"]))
    assert d.ci[0] <= expected <= d.ci[1] and d.ci[1] < 0
    assert d.p < 0.01 and d.verdict(0.05) == "worse"
    assert d.n_shared == ethics_runs["n_items"]
    # One task in the pillar, one pillar overall: both move by the same trust-score points.
    assert c.get("pillar:ethics").diff == pytest.approx(100 * expected)
    assert c.get("overall").diff == pytest.approx(100 * expected)
    assert c.get("overall").verdict(0.05) == "worse"


def test_compare_of_identical_replies_is_not_significant(ethics_runs):
    [c] = compare_runs([load_run(ethics_runs["a"]), load_run(ethics_runs["a2"])], n_boot=300)
    d = c.get("ethics.reasoning")
    assert d.diff == 0 and d.p == 1.0 and d.verdict(0.05) == "n.s."


def test_compare_output_formats(ethics_runs):
    cs = compare_runs([load_run(ethics_runs["a"]), load_run(ethics_runs["b"])], n_boot=200, all_metrics=True)
    rows = json.loads(to_json(cs))["rows"]
    by_name = {r["name"]: r for r in rows}
    assert by_name["ethics.reasoning"]["verdict"] == "worse"
    # Sub-metrics are compared too with --all-metrics, named as `trustmh gate` names them: per subcategory,
    # B is right on the gold items among the first N_CORRECT_B, A on all of them.
    items = TASKS["ethics.reasoning"]().method(RunContext()).load(DataSource(UPSTREAM, "data"), RunContext())
    gold = [it for it in items if it.target is not None]
    sub = gold[0].meta["subcategory"]
    in_sub = [i for i, it in enumerate(gold) if it.meta["subcategory"] == sub]
    expected = sum(i < N_CORRECT_B for i in in_sub) / len(in_sub) - 1.0
    assert by_name[f"ethics.reasoning:accuracy[{sub}]"]["diff"] == pytest.approx(expected)
    table = list(csv.DictReader(io.StringIO(to_csv(cs))))
    assert [r["name"] for r in table] == [r["name"] for r in rows]
    md = to_markdown(cs)
    assert "| ethics.reasoning |" in md and "| overall |" in md


def test_compare_cli_formats(cli_here, ethics_runs, capsys):
    code, out, _ = cli_here("compare", ethics_runs["a"], ethics_runs["b"], "--format", "json", "--bootstrap", "200")
    assert code == 0
    assert {r["name"] for r in json.loads(out)["rows"]} >= {"ethics.reasoning", "pillar:ethics", "overall"}
    code, out, _ = cli_here("compare", ethics_runs["a"], ethics_runs["b"], "--bootstrap", "200")
    assert code == 0 and "ethics.reasoning" in out and "worse" in out
    code, _, err = cli_here("compare", ethics_runs["a"], "--format", "yaml")
    assert code == 2 and "--format" in err


def tier1_replay(path: Path, ratings: list[int], items) -> Path:
    return write_replay(path, [{"task": "privacy.awareness_tier1", "item_id": it.id, "response": f"Answer: {r}"}
                               for it, r in zip(items, ratings)])


def test_compare_recomputes_a_correlation_on_shared_items(tmp_path):
    """Pearson r is not a mean of per-sample values: the paired bootstrap must re-run the task's aggregate."""
    data = DataSource(SAMPLE, "sample")
    items = TASKS["privacy.awareness_tier1"]().method(RunContext()).load(data, RunContext())
    human = np.array([float(it.target) for it in items])
    ra = [int(min(4, max(1, round(h)))) for h in human]
    rb = [5 - r for r in ra]
    runs = []
    for name, ratings in (("a", ra), ("b", rb)):
        replay = tier1_replay(tmp_path / f"{name}.jsonl", ratings, items)
        run_quiet(run_spec(models=[f"replay/{replay}"], tasks="privacy.awareness_tier1", suite="sample"),
                  tmp_path / name)
        runs.append(load_run(tmp_path / name))
    [c] = compare_runs(runs, n_boot=200)
    d = c.get("privacy.awareness_tier1")
    expected = np.corrcoef(rb, human)[0, 1] - np.corrcoef(ra, human)[0, 1]
    assert d.diff == pytest.approx(expected)


def test_compare_uses_clusters_and_labels_from_samples(tmp_path):
    """privacy.leakage needs each sample's question type (a label) to compute leak_rate at all: the
    recomputed difference on all items must equal the difference of the reported values."""
    spec = run_spec(models=["baseline/counselor", "baseline/random"], tasks="privacy.leakage", suite="sample")
    run_quiet(spec, tmp_path / "run")
    run = load_run(tmp_path / "run")
    [c] = compare_runs([run], n_boot=200)
    d = c.get("privacy.leakage")
    ta = run.results.models["baseline/counselor"].tasks["privacy.leakage"]
    tb = run.results.models["baseline/random"].tasks["privacy.leakage"]
    assert d.diff == pytest.approx(tb.value - ta.value)
    assert d.n_shared == ta.n_samples


def test_compare_falls_back_for_a_task_this_version_does_not_know(ethics_runs, tmp_path):
    renamed = []
    for key in ("a", "b"):
        src = ethics_runs[key]
        dst = tmp_path / key
        dst.mkdir()
        res = json.loads((src / "results.json").read_text().replace("ethics.reasoning", "ethics.future_task"))
        res["outputs"] = {}  # the rewritten samples.jsonl no longer matches the recorded hash
        (dst / "results.json").write_text(json.dumps(res))
        (dst / "samples.jsonl").write_text((src / "samples.jsonl").read_text().replace("ethics.reasoning",
                                                                                      "ethics.future_task"))
        renamed.append(load_run(dst))
    [c] = compare_runs(renamed, n_boot=200)
    d = c.get("ethics.future_task")
    assert d.diff == pytest.approx(d.b - d.a) and d.p is None
    assert "unknown to this trustmh version" in d.note


# --------------------------------------------------------------------------------------------------
# gate

def test_gate_passes_when_every_threshold_holds(cli_here, ethics_runs, capsys):
    args = ("gate", ethics_runs["a"], "--min", "ethics.reasoning=0.95", "--min", "pillar:ethics=90",
            "--min", "overall=90", "--max", "ethics.reasoning:differs_from_upstream_parse=0.5")
    # The overall score of a run of one pillar is partial: the gate fails it unless told to accept that.
    code, out, _ = cli_here(*args)
    assert code == 1 and [line for line in out.splitlines() if line.startswith("FAIL")] == [
        f"FAIL {load_run(ethics_runs['a']).results.spec['models'][0]}: overall is partial (1 of 8 pillars measured, "
        f"or a partial pillar); --allow-partial to accept it"]
    code, out, _ = cli_here(*args, "--allow-partial")
    assert code == 0, out
    assert "gate passed" in out


def test_gate_fails_with_one_line_per_failure(cli_here, ethics_runs, capsys):
    code, out, _ = cli_here("gate", ethics_runs["b"], "--min", "ethics.reasoning=0.95", "--min",
                       "pillar:ethics=90", "--max", "ethics.reasoning:accuracy=0.1", "--min", "overall=0",
                       "--allow-partial")
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert code == 1
    assert len(fails) == 3
    assert any("ethics.reasoning =" in f and "min 0.95" in f for f in fails)
    assert any("pillar:ethics" in f for f in fails)
    assert any("ethics.reasoning:accuracy" in f and "max 0.1" in f for f in fails)


def test_gate_fails_a_task_with_too_many_judge_failures(cli_here, tmp_path, capsys):
    """10 of 100 judge verdicts are garbage: left out and counted, never the model's fault; the gate fails the
    task at the default 5 % and passes it with --max-unscored 0.2."""
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    items = TASKS["ethics.reasoning"]().method(RunContext()).load(DataSource(UPSTREAM, "data"), RunContext())[:100]
    replay = ethics_replay(tmp_path / "g.jsonl", items, None)
    judge = write_replay(tmp_path / "j.jsonl", [
        {"task": "ethics.reasoning", "item_id": it.id,
         "response": "I cannot rate this." if k % 10 == 3 else json.dumps({f"sc{j}": 4 for j in range(1, 6)})}
        for k, it in enumerate(items)])
    spec = run_spec(models=[f"replay/{replay}"], judge=f"replay/{judge}", tasks="ethics.reasoning", suite="data",
                    data_dir=str(UPSTREAM), limit=100)
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models[spec.models[0]].tasks["ethics.reasoning"]
    assert t.n_samples == 100 and t.n_judge_failed == 10 and t.n_no_answer == 0 and t.value == 1.0
    assert sum(t.judge_failed_reasons.values()) == 10
    code, out, _ = cli_here("gate", tmp_path / "run", "--min", "ethics.reasoning=0.9")
    assert code == 1 and "ethics.reasoning rests on too few samples" in out and "10.0% judge-failed" in out
    code, out, _ = cli_here("gate", tmp_path / "run", "--min", "ethics.reasoning=0.9", "--max-unscored", "0.2")
    assert code == 0, out
    code, _, err = cli_here("gate", tmp_path / "run", "--min", "ethics.reasoning=0.9", "--max-unscored", "2")
    assert code == 2 and "--max-unscored" in err
    # The same share from a config file; the command line still wins over it.
    cfg = tmp_path / "gate.toml"
    cfg.write_text('max_unscored = 0.2\n[min]\n"ethics.reasoning" = 0.9\n')
    code, out, _ = cli_here("gate", tmp_path / "run", "--config", cfg)
    assert code == 0, out
    code, out, _ = cli_here("gate", tmp_path / "run", "--config", cfg, "--max-unscored", "0.05")
    assert code == 1 and "rests on too few samples" in out
    cfg.write_text('max_unscored = "lots"\n')
    code, _, err = cli_here("gate", tmp_path / "run", "--config", cfg)
    assert code == 2 and "max_unscored must be a number between 0 and 1" in err


def test_gate_counts_a_task_not_run_as_a_failure(cli_here, ethics_runs, capsys):
    code, out, _ = cli_here("gate", ethics_runs["a"], "--min", "privacy.leakage=0")
    assert code == 1
    assert "privacy.leakage not run" in out


def test_gate_unknown_names_are_usage_errors(cli_here, ethics_runs, capsys):
    code, _, err = cli_here("gate", ethics_runs["a"], "--min", "ethic.reasoning=0.5")
    assert code == 2 and "did you mean ethics.reasoning" in err
    code, _, err = cli_here("gate", ethics_runs["a"], "--min", "ethics.reasoning:acuracy=0.5")
    assert code == 2 and "ethics.reasoning:accuracy" in err
    code, _, err = cli_here("gate", ethics_runs["a"], "--min", "pillar:ethic=1")
    assert code == 2 and "pillar:ethics" in err
    code, _, err = cli_here("gate", ethics_runs["a"], "--min", "ethics.reasoning")
    assert code == 2 and "NAME=VALUE" in err
    code, _, err = cli_here("gate", ethics_runs["a"])
    assert code == 2 and "nothing to check" in err


def test_gate_reads_thresholds_and_baseline_from_toml(cli_here, ethics_runs, tmp_path, capsys):
    cfg = tmp_path / "gate.toml"
    # A quoted key and a bare dotted key (which TOML reads as nested tables) name the same kind of thing.
    cfg.write_text(f'baseline = "{ethics_runs["a"]}"\n[min]\n"pillar:ethics" = 10\nethics.reasoning = 0.3\n'
                   f'[max]\n"ethics.reasoning:accuracy" = 0.9\n')
    code, out, _ = cli_here("gate", ethics_runs["b"], "--config", cfg, "--bootstrap", "200")
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert code == 1
    assert not any("pillar:ethics =" in f for f in fails)  # 48 >= 10 holds
    assert any("regressed against the baseline" in f and "ethics.reasoning" in f for f in fails)
    cfg.write_text('[min]\n"ethics.reasoning" = "high"\n')
    code, _, err = cli_here("gate", ethics_runs["b"], "--config", cfg)
    assert code == 2 and "must be a number" in err


def test_gate_baseline_fails_only_on_significant_regressions(cli_here, ethics_runs, capsys):
    code, out, _ = cli_here("gate", ethics_runs["b"], "--baseline", ethics_runs["a"], "--bootstrap", "200")
    assert code == 1
    assert "ethics.reasoning regressed against the baseline" in out
    # The other way round is an improvement, and the same replies are no change: both pass.
    code, out, _ = cli_here("gate", ethics_runs["a"], "--baseline", ethics_runs["b"], "--bootstrap", "200")
    assert code == 0, out
    code, out, _ = cli_here("gate", ethics_runs["a2"], "--baseline", ethics_runs["a"], "--bootstrap", "200")
    assert code == 0, out


@pytest.mark.parametrize("literal", ["nan", "+nan", "-nan"])
def test_gate_toml_refuses_a_nan_threshold(tmp_path, literal):
    """A NaN bound compares false both ways, so it would pass any value: refused like on the command line."""
    from trustmh.errors import UserError
    from trustmh.analysis.gate import load_config
    cfg = tmp_path / "gate.toml"
    cfg.write_text(f'[min]\n"crisis.identification" = {literal}\n', encoding="utf-8")
    with pytest.raises(UserError, match="crisis.identification must be a number"):
        load_config(cfg)


# --- issue 24: the gate fails closed ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("gate24") / "run"
    run_quiet(run_spec(models=["baseline/counselor"], suite="sample", tasks="ethics", n_boot=0), run)
    return run


def crafted(src: Path, dest: Path, results=None, samples=None) -> Path:
    """A copy of run `src` whose results.json (as text: NaN is no Python JSON) and samples.jsonl were
    edited, with the samples hash recomputed as a forger would."""
    import hashlib
    import shutil
    shutil.copytree(src, dest)
    if samples is not None:
        (dest / "samples.jsonl").write_text(samples(((src / "samples.jsonl").read_text())))
    res = json.loads((src / "results.json").read_text())
    res["outputs"]["samples_sha256"] = hashlib.sha256((dest / "samples.jsonl").read_bytes()).hexdigest()
    text = json.dumps(res, indent=2)
    (dest / "results.json").write_text(results(text) if results else text)
    return dest


GATE_ETHICS = ("--min", "ethics.reasoning=0.99", "--allow-partial")


def test_gate_with_no_models_checks_nothing_and_does_not_pass(cli_here, sample_run, tmp_path, capsys):
    empty = crafted(sample_run, tmp_path / "empty", results=lambda t: json.dumps(dict(json.loads(t), models={})))
    code, out, err = cli_here("gate", empty, *GATE_ETHICS)
    assert code == 2 and "nothing can be checked" in err, (code, out, err)  # before: "gate passed: 0 checks"
    assert "gate passed" not in out


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_gate_refuses_non_finite_values(cli_here, sample_run, tmp_path, capsys, literal):
    def poison(text):
        res = json.loads(text)
        res["models"]["baseline/counselor"]["tasks"]["ethics.reasoning"]["value"] = "@@"
        return json.dumps(res).replace('"@@"', literal)
    run = crafted(sample_run, tmp_path / "nan", results=poison)
    code, out, err = cli_here("gate", run, *GATE_ETHICS)
    assert code == 2 and "not a valid results.json" in err and "finite" in err, (code, out, err)


@pytest.mark.parametrize("field,value", [("n", 10**6), ("n_judge_failed", -100), ("n_errors", -5),
                                         ("trust_score", 1e9)])
def test_gate_refuses_impossible_counts(cli_here, sample_run, tmp_path, capsys, field, value):
    def forge(text):
        res = json.loads(text)
        task = res["models"]["baseline/counselor"]["tasks"]["ethics.reasoning"]
        task[field] = value
        task["value"] = 1.0  # so that the threshold alone would pass
        return json.dumps(res)
    run = crafted(sample_run, tmp_path / "forged", results=forge)
    code, out, err = cli_here("gate", run, *GATE_ETHICS, "--max-unscored", "0.05")
    assert code == 2 and "gate passed" not in out, (code, out, err)  # before: passed
    assert "impossible counts" in err or "outside 0-100" in err or "greater than or equal to 0" in err, err


@pytest.mark.parametrize("n_boot", ["0", "1", "-3", "99"])
def test_gate_baseline_refuses_a_bootstrap_under_compare_s_minimum(cli_here, ethics_runs, capsys, n_boot):
    # b is 100 points worse than a on a fifth of the items: with 0 or 1 resamples it could not be seen.
    code, out, err = cli_here("gate", ethics_runs["b"], "--baseline", ethics_runs["a"], "--bootstrap", n_boot)
    assert code == 2 and "--bootstrap must be at least 100" in err, (code, out, err)  # before: pass / traceback


def test_gate_config_that_cannot_be_read_is_a_usage_error(cli_here, tmp_path, sample_run, capsys):
    import os
    bad = tmp_path / "latin1.toml"
    bad.write_bytes('[min]\n"ethics.reasoning" = 0.5 # caf\xe9\n'.encode("latin-1"))
    code, _, err = cli_here("gate", sample_run, "--config", bad)
    assert code == 2 and "not valid UTF-8" in err, err  # before: exit 1, the code of a failed threshold
    fifo = tmp_path / "gate.fifo"
    os.mkfifo(fifo)
    for special in (fifo, Path("/dev/zero")):  # before: a hang; a MemoryError
        code, _, err = cli_here("gate", sample_run, "--config", special)
        assert code == 2 and "must be a regular file" in err, err


@pytest.mark.parametrize("line", ['{"values": {"x": ' + "9" * 5000 + "}}", "[" * 100_000 + "]" * 100_000],
                         ids=["5000-digits", "nested-100000"])
def test_report_compare_gate_read_a_hostile_samples_line_as_one_error(cli_here, sample_run, tmp_path, capsys, line):
    """The line is skipped and counted, by reason and line, by every reader (issue 38: readers count what
    they skip); the gate, which rests a verdict on the lines, refuses the run."""
    run = crafted(sample_run, tmp_path / "hostile", samples=lambda t: t + line + "\n")
    n = len((sample_run / "samples.jsonl").read_text().splitlines()) + 1
    for args in (("compare", run, run, "--format", "json"), ("report", run, "-o", tmp_path / "r.html"),
                 ("gate", run, "--baseline", run, "--allow-partial")):
        code, out, err = cli_here(*args)
        err = " ".join(err.split())
        assert code == (2 if args[0] == "gate" else 0), (args, code, err[-300:])
        assert "samples.jsonl: 1 lines skipped (unreadable JSON" in err and f"(first at line {n})" in err, err


def test_gate_prints_no_terminal_escapes_from_a_results_file(cli_here, sample_run, tmp_path, capsys):
    evil = "baseline/\x1b]0;owned\x07\x1b[2J\x1b[31mred\r\u202egnp.\u2066x"
    def rename(text):
        res = json.loads(text)
        res["models"] = {evil: dict(res["models"]["baseline/counselor"], model=evil)}
        return json.dumps(res)
    run = crafted(sample_run, tmp_path / "escapes", results=rename)
    code, out, err = cli_here("gate", run, "--min", "ethics.reasoning=2", "--allow-partial")
    assert code == 1 and "FAIL" in out
    assert not any(c in out + err for c in "\x1b\x07\r\u202e\u2066"), repr(out)  # shown as \x1b ..., never raw
    assert "\\x1b]0;owned" in out and "\\u202egnp.\\u2066x" in out
