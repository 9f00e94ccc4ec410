"""Rankings nobody can game (issue 22): a model that does not answer, or answers the same to everything, never
outranks one that answers; partial scores are never ranked against complete ones; a judge that never parses
marks its task and fails the gate; the rank table equals ranks computed by hand."""

import csv
import io
from pathlib import Path

import pytest

from conftest import UPSTREAM, run_quiet, run_spec, write_replay

from trustmh.analysis.runs import load_run
from trustmh.tasks import TASKS, DataSource, RunContext

AWARENESS = "privacy.awareness_tier1,privacy.awareness_tier2a,privacy.awareness_tier2b"
TIERS = AWARENESS.split(",")


def nearest(value: float, allowed) -> int:
    return min(allowed, key=lambda a: (abs(a - value), a))


def awareness_replays(tmp: Path) -> dict[str, str]:
    """'answers': the allowed rating nearest the human mean (a high correlation); 'constant': the same
    rating for every item (a Pearson r that is undefined by the model's doing)."""
    answers, constant = [], []
    for tid in TIERS:
        task = TASKS[tid]()
        for it in task.method(RunContext()).load(DataSource(UPSTREAM, "data"), RunContext()):
            answers.append({"task": tid, "item_id": it.id, "response": f"Answer: {nearest(it.target, task.allowed)}"})
            constant.append({"task": tid, "item_id": it.id, "response": f"Answer: {task.allowed[0]}"})
    return {"answers": f"replay/{write_replay(tmp / 'answers.jsonl', answers)}",
            "constant": f"replay/{write_replay(tmp / 'constant.jsonl', constant)}"}


@pytest.fixture(scope="module")
def awareness(tmp_path_factory):
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    tmp = tmp_path_factory.mktemp("awareness")
    models = awareness_replays(tmp)
    spec = run_spec(models=[models["answers"], models["constant"], "baseline/refuse"], tasks=AWARENESS,
                    suite="data", data_dir=str(UPSTREAM))
    run_quiet(spec, tmp / "run")
    # The answering model alone, as a baseline for the gate.
    run_quiet(run_spec(models=[models["answers"]], tasks=AWARENESS, suite="data", data_dir=str(UPSTREAM)),
              tmp / "base")
    return {"run": tmp / "run", "base": tmp / "base", **models, "refuse": "baseline/refuse"}


def test_undefined_by_the_model_is_the_worst_trust_score_with_its_reason(awareness):
    res = load_run(awareness["run"]).results.models
    for tid in TIERS:
        good = res[awareness["answers"]].tasks[tid]
        assert good.value is not None and good.value > 0.5 and good.undefined_by_model is None
        for who, why in (("constant", "constant answers"), ("refuse", "no answers")):
            t = res[awareness[who]].tasks[tid]
            assert t.value is None  # the metric itself stays undefined: no number is made up
            assert t.trust_score == 0.0 and why in t.undefined_by_model and why in t.reason
            assert t.trust_score < good.trust_score
    # Pillar and overall: the awareness row is 0 for both, never left out to rest on nothing.
    for who in ("constant", "refuse"):
        m = res[awareness[who]]
        row = m.pillars["privacy"].rows["Privacy Awareness"]
        assert row["trust_score"] == 0.0 and row["measured"] == TIERS
        assert m.pillars["privacy"].trust_score < res[awareness["answers"]].pillars["privacy"].trust_score
        assert m.trust_score < res[awareness["answers"]].trust_score


def test_undefined_by_the_model_is_decided_from_the_table_alone():
    import numpy as np
    from trustmh.scoring.metrics import Table
    from trustmh.scoring.pillars import undefined_by_model
    task = TASKS["privacy.awareness_tier1"]()
    # A constant human column with varying ratings: not the model's doing, left unscored.
    t = Table({"rating": np.array([1.0, 2, 3]), "human": np.array([2.0, 2, 2]), "answered": np.ones(3)},
              np.array(["0", "1", "2"], dtype=object))
    assert undefined_by_model(task, t, None) is None
    # A defined value is never overridden.
    t2 = Table({"rating": np.array([2.0, 2, 2]), "answered": np.ones(3)}, np.array(["0", "1", "2"], dtype=object))
    assert undefined_by_model(task, t2, 0.3) is None
    assert "constant answers" in undefined_by_model(task, t2, None)
    # Nothing scored at all (every judge verdict failed): not the model's doing either.
    t3 = Table({"rating": np.full(3, np.nan)}, np.array(["0", "1", "2"], dtype=object))
    assert undefined_by_model(task, t3, None) is None
    # One predicted class only, from the labels.
    t4 = Table({"correct": np.array([1.0, 0, 0])}, np.array(["0", "1", "2"], dtype=object),
               {"pred": np.array(["a", "a", "a"], dtype=object), "gold": np.array(["a", "b", "c"], dtype=object)})
    assert "one class only" in undefined_by_model(TASKS["crisis.identification"](), t4, None)


def test_gate_baseline_fails_a_candidate_whose_rows_went_undefined(cli_here, awareness, tmp_path, capsys):
    """The nine-model grid passed this: the candidate's awareness rows went undefined and its privacy pillar
    rose. Now the task's trust falls to 0 (a significant regression), and a value that is gone fails."""
    run = load_run(awareness["run"])
    for who in ("constant", "refuse"):
        out_dir = tmp_path / who
        spec = run_spec(models=[awareness[who]], tasks=AWARENESS, suite="data", data_dir=str(UPSTREAM))
        run_quiet(spec, out_dir)
        code, out, _ = cli_here("gate", out_dir, "--baseline", awareness["base"], "--allow-partial")
        assert code == 1, out
        for tid in TIERS:
            assert f"{tid}: pearson_r undefined ({'constant answers' if who == 'constant' else 'no answers'}" in out
            assert "but 0.9" in out or "but 0.8" in out
        assert "pillar:privacy regressed" in out and "overall regressed" in out
    assert run.results.models[awareness["refuse"]].tasks[TIERS[0]].n_no_answer > 0


# --- one resampling per comparison ------------------------------------------------------------------

def test_interval_and_p_value_by_hand():
    import numpy as np
    from trustmh.analysis.compare import _interval, _p_value
    draws = np.arange(-2.0, 38.0)  # 40 draws: -2, -1, 0 at or below zero; 0 .. 37 (38) at or above
    assert _p_value(draws) == pytest.approx(2 * 3 / 40)
    # 95 %: j = ceil(40 * 0.025) = 1, the extremes; holds 0, as p = 0.15 > 0.05 says.
    assert _interval(draws, 0.95) == (-2.0, 37.0)
    # 80 %: j = ceil(40 * 0.1) = 4, the 4th smallest and largest draws; excludes 0, as p = 0.15 < 0.2 says.
    assert _interval(draws, 0.80) == (1.0, 34.0)
    # 70 %: j = 6 → (3, 32); at 1 - 0.15 = 0.85 exactly: j = ceil(3) = 3 → (0, 35): holds 0, p < 0.15 false.
    assert _interval(draws, 0.85) == (0.0, 35.0)
    assert _p_value(np.array([1.0] * 20)) == 0.0 and _p_value(np.array([0.0] * 20)) == 1.0
    assert _p_value(np.array([1.0] * 9 + [np.nan] * 30)) is None  # too few defined draws


def test_interval_p_and_verdict_agree_on_random_draws():
    import numpy as np
    from trustmh.analysis.compare import Diff, _interval, _p_value
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(10, 400))
        draws = np.round(rng.normal(rng.normal(0, 1), 1, n), 1)  # rounding makes ties with 0 happen
        for alpha in (0.01, 0.05, 0.1, 0.2):
            lo, hi = _interval(draws, 1 - alpha)
            p = _p_value(draws)
            d = Diff("task", "t", 0, 1, float(np.median(draws)) or 0.1, (lo, hi), p)
            assert (lo > 0 or hi < 0) == (p < alpha) == (d.verdict(alpha) in ("better", "worse"))


def test_batched_paired_draws_equal_the_per_resample_path(awareness):
    import numpy as np
    from trustmh.analysis.compare import paired_draws
    from trustmh.analysis.runs import read_rows, run_context
    run = load_run(awareness["run"])
    rows = read_rows(run)
    for tid in TIERS:
        task = TASKS[tid]()
        ka, kb = rows[(awareness["answers"], tid)], rows[(awareness["constant"], tid)]
        keys = [k for k in ka.keys if k in kb]
        ta, tb = ka.table(keys), kb.table(keys)
        names = [task.metric.name, "mean_rating", "answer_rate"]
        fast = paired_draws(task, run_context(run), ta, tb, names, 300, 0, tid, zero=(False, True))
        slow = paired_draws(task, run_context(run), ta, tb, names, 300, 0, tid, zero=(False, True), batched=False)
        for name in names + ["__trust__"]:
            np.testing.assert_allclose(fast[name], slow[name], rtol=1e-9, atol=1e-9, equal_nan=True)
        # The constant side is 0 in every draw: the trust difference is minus the answering side's trust.
        assert np.isnan(fast["pearson_r"]).all() and (fast["__trust__"] < 0).mean() > 0.9


def test_pillar_and_overall_differences_say_they_are_on_shared_tasks(awareness):
    from trustmh.analysis.compare import compare_runs
    [c1, c2] = compare_runs([load_run(awareness["run"])], n_boot=200)
    p = c1.get("pillar:privacy")
    assert p.n_tasks == 3 and "b − a on 3 shared tasks" in p.note and "partial" in p.note
    o = c1.get("overall")
    assert o.n_tasks == 3 and "shared task" in o.note
    assert p.verdict(0.05) == "worse" and o.verdict(0.05) == "worse"
    t = c2.get(TIERS[0])
    assert t.diff is None and "no answers" in t.note and "trust 0" in t.note


# --- the judge's usable-verdict rate ------------------------------------------------------------------

@pytest.mark.needs_methods
def test_a_judge_that_never_parses_marks_the_task_and_fails_the_gate(cli_here, upstream, tmp_path, capsys):
    """Under the paper's protocol sycophancy.oeq reads a judge reply without a digit as "not endorsing", as the
    paper's code does: a judge that never parses gives every model a perfect 100. The value stays the paper's,
    but the usable-verdict rate (0) is on the result, the task is marked, and the gate fails it."""
    from trustmh.scoring.pillars import judge_mark
    # A model whose reply follows the item (stock replies would earn the row no credit at all: a constant with
    # the item id in it is one).
    model = "replay/" + str(write_replay(tmp_path / "m.jsonl", [
        {"task": "sycophancy.oeq", "item_id": it.id,
         "response": f"You wrote: {' '.join(it.input['text'].split()[:10])}. Weigh how the others felt."}
        for it in _oeq_items(upstream)]))
    spec = run_spec(models=[model], judge="baseline/refuse", tasks="sycophancy.oeq", suite="data",
                    data_dir=str(upstream), limit=20, protocol="paper")
    run_quiet(spec, tmp_path / "run")
    t = load_run(tmp_path / "run").results.models[model].tasks["sycophancy.oeq"]
    assert t.value == 0.0 and t.trust_score == 100.0 and t.metrics["judge_unparsed_rate"].value == 1.0
    assert t.n_judged == t.n_samples > 0 and t.judge_usable_rate == 0.0
    assert "usable for 0%" in judge_mark(t)
    code, out, _ = cli_here("gate", tmp_path / "run", "--min", "sycophancy.oeq=0", "--allow-partial")
    assert code == 1 and "judge verdicts usable for only 0.0%" in out, out
    # the summary counts it as a check of its own (the threshold, its credit, the task's coverage, its verdicts: 4)
    assert "2 of 4 checks failed (too few samples: 1, unusable judge verdicts: 1)" in out, out
    code, out, _ = cli_here("gate", tmp_path / "run", "--min", "sycophancy.oeq=0", "--allow-partial",
                       "--max-unscored", "1")
    assert code == 0, out
    # A judge that parses: every verdict usable, nothing marked.
    judge = write_replay(tmp_path / "j.jsonl", [{"task": "sycophancy.oeq", "item_id": it.id, "response": "0"}
                                                for it in _oeq_items(upstream)])
    spec = run_spec(models=[model], judge=f"replay/{judge}", tasks="sycophancy.oeq",
                    suite="data", data_dir=str(upstream), limit=20, protocol="paper")
    run_quiet(spec, tmp_path / "run2")
    t = load_run(tmp_path / "run2").results.models[model].tasks["sycophancy.oeq"]
    assert t.judge_usable_rate == 1.0 and judge_mark(t) == ""


def _oeq_items(upstream):
    from conftest import METHODS
    return TASKS["sycophancy.oeq"]().method(RunContext(protocol="paper", methods_root=METHODS)).load(DataSource(upstream, "data"),
                                          RunContext(protocol="paper", methods_root=METHODS))


# --- the paper's rank table ----------------------------------------------------------------------------

def _tr(task, trust):
    from trustmh.scoring.results import TaskResult
    from trustmh.tasks import paper_tasks
    return TaskResult(task=task, pillar=paper_tasks().get(task, "safety"), status="ok", metric="m", value=trust / 100,
                      trust_score=trust, higher_is_better=True, trust_range=(0.0, 1.0), n_samples=10, n=10)


def _runs(scores: dict[str, dict[str, float]]):
    """One in-memory run per model (label = model name) with the given task trust scores."""
    from trustmh.analysis.runs import Run
    from trustmh.scoring.pillars import model_summary
    from trustmh.scoring.results import RunResults
    runs = []
    for model, tasks in scores.items():
        mr = model_summary(model, {t: _tr(t, v) for t, v in tasks.items()})
        runs.append(Run(Path("/nonexistent") / model, RunResults(
            run_id=model, created="", spec={}, data={}, versions={}, bootstrap={}, models={model: mr})))
    return runs


def test_rank_table_equals_hand_ranked_values_with_ties_and_partial_rows_apart():
    from trustmh.analysis.runs import entries
    from trustmh.report.leaderboard import leaderboard, task_meta
    from trustmh.report.ranks import rank_csv, rank_markdown, rank_table
    tiers = {t: 50.0 for t in TIERS}
    runs = _runs({
        "A": {"reliability.knowledge": 80, **tiers, "privacy.leakage": 10},
        "B": {"reliability.knowledge": 60, "privacy.awareness_tier1": 90, "privacy.leakage": 20},  # a tier missing
        "C": {"reliability.knowledge": 80, **tiers, "privacy.leakage": 30},
        "D": {"reliability.knowledge": 40, **{t: 70.0 for t in TIERS}, "privacy.leakage": 30},
    })
    ents = entries(runs, groups={"A": "general", "B": "mental-health", "C": "general", "D": "mental-health"})
    board = leaderboard(ents, task_meta(ents), ["reliability", "privacy"], paired=False, n_boot=0)
    table = rank_table(ents, board, {e.label: e.group for e in ents})
    rows = {r.row: r for r in table.rows}
    by = lambda row: {table.labels[i]: (c.rank, bool(c.apart)) for i, c in enumerate(rows[row].cells)}
    # Knowledge 80, 60, 80, 40 → A and C tie at 1, B 3 (the next rank skips), D 4.
    assert by("Knowledge") == {"A": (1, False), "B": (3, False), "C": (1, False), "D": (4, False)}
    # Awareness: B has one tier of three (90) and is ranked apart, alone; A, C (50) tie below D (70).
    assert by("Privacy Awareness") == {"A": (2, False), "B": (1, True), "C": (2, False), "D": (1, False)}
    assert by("Privacy Leakage") == {"A": (4, False), "B": (3, False), "C": (1, False), "D": (1, False)}
    # Pillar privacy: A 30, C 40, D 50 complete; B (90 + 20) / 2 = 55 partial, ranked apart and never above them.
    priv = {ents[i].label: (board.cells[(i, "privacy")].rank, board.cells[(i, "privacy")].apart) for i in range(4)}
    assert priv["D"] == (1, "") and priv["C"] == (2, "") and priv["A"] == (3, "") and priv["B"][0] == 1 and priv["B"][1]
    # One overall ordering: the complete models by overall score, the partial B after them, wherever shown.
    overall = {e.label: board.cells[(i, "overall")].score for i, e in enumerate(ents)}
    assert overall == {"A": pytest.approx((80 + 30) / 2), "B": pytest.approx((60 + 55) / 2),
                       "C": pytest.approx((80 + 40) / 2), "D": pytest.approx((40 + 50) / 2)}
    assert [ents[i].label for i in board.order] == ["C", "A", "D", "B"]
    # Columns grouped in the order the groups first appear in the overall ordering, each by that ordering.
    assert [table.labels[i] for i in table.columns] == ["C", "A", "D", "B"]
    assert table.groups == [("general", 2), ("mental-health", 2)]
    csv_rows = rank_csv(table).splitlines()
    assert csv_rows[0] == "pillar,row,model,spec,group,trust_score,rank,ranked_apart,tie_broken,row_kind,ranked_on,value,evidence,bracket,undefined,rank_low,rank_high,not_separated"
    assert "reliability,Knowledge,C,C,general,80.0,1,,,paper,m,0.8,E,80.0,,,," in csv_rows
    md = rank_markdown(table)
    assert "| reliability | Knowledge | 1 (80.0) | 1 (80.0) | 4 (40.0) | 3 (60.0) |" in md
    assert "1* (90.0)" in md and "1, 2, 2, 4" in md


def test_a_partial_model_never_outranks_a_complete_one_on_the_leaderboard(awareness):
    """In the three-model awareness run all three are measured on the same tasks: the answering model is first;
    refuse and constant tie at 0 below it."""
    from trustmh.analysis.runs import entries
    from trustmh.report.leaderboard import leaderboard, task_meta
    ents = entries([load_run(awareness["run"])])
    board = leaderboard(ents, task_meta(ents), ["privacy"], paired=True, n_boot=200)
    ranks = {e.model: board.cells[(i, "overall")].rank for i, e in enumerate(ents)}
    assert ranks == {awareness["answers"]: 1, awareness["constant"]: 2, awareness["refuse"]: 2}
    assert ents[board.order[0]].model == awareness["answers"]


def test_rank_table_from_the_command_line(cli_here, awareness, tmp_path, capsys):
    code, out, _ = cli_here("report", awareness["run"], "--format", "csv")
    assert code == 0 and out.splitlines()[0] == "pillar,row,model,spec,group,trust_score,rank,ranked_apart,tie_broken,row_kind,ranked_on,value,evidence,bracket,undefined,rank_low,rank_high,not_separated"
    rows = list(csv.DictReader(io.StringIO(out)))
    # The constant and refusing models leave the tiers' Pearson r undefined (issue 47): no rank, the reason.
    assert {(r["model"], r["rank"]) for r in rows} == {(awareness["answers"], "1"), (awareness["constant"], ""),
                                                        (awareness["refuse"], "")}
    assert all(bool(r["undefined"]) == (r["model"] != awareness["answers"]) for r in rows), rows
    code, out, _ = cli_here("report", awareness["run"], "--format", "markdown", "--group",
                       f"{awareness['refuse']}=general", "-o", tmp_path / "ranks.md")
    md = (tmp_path / "ranks.md").read_text()
    # Columns by group, the groups in the order their best model comes in the overall ordering.
    assert code == 0 and "| privacy | Privacy Awareness | 1 (" in md and md.splitlines()[0] == (
        f"groups: other: {awareness['answers']}, {awareness['constant']}; general: baseline/refuse")
    code, out, _ = cli_here("compare", awareness["run"], "--ranks", "--format", "markdown")
    assert code == 0 and "Privacy Awareness" in out
    code, out, err = cli_here("report", awareness["run"], "--format", "pdf")
    assert code == 2 and "--format must be html, csv, markdown or latex" in err
    code, out, err = cli_here("report", awareness["run"], "--format", "csv", "--group", "nogroup")
    assert code == 2 and "--group expects LABEL=GROUP" in err
    # compare's interval is the (1 - alpha) interval of the same draws as p
    code, out, _ = cli_here("compare", awareness["run"], "--format", "csv", "--alpha", "0.1", "--bootstrap", "200")
    assert code == 0
    for r in csv.DictReader(io.StringIO(out)):
        if r["p"] and r["ci_low"]:
            excludes = float(r["ci_low"]) > 0 or float(r["ci_high"]) < 0
            assert excludes == (float(r["p"]) < 0.1) == (r["verdict"] in ("better", "worse")), r


def test_a_multi_model_run_ends_with_one_leaderboard_in_the_overall_ordering(cli_here, awareness, tmp_path, capsys):
    code, out, _ = cli_here("run", "-m", awareness["answers"], "-m", "baseline/refuse", "-m", awareness["constant"],
                       "--tasks", AWARENESS, "--suite", "data", "--data-dir", UPSTREAM, "--protocol", "trustmh",
                       "--out", tmp_path / "run", "--no-progress")
    assert code == 0, out
    board = out[out.index("leaderboard (0-100 trust"):]
    lines = [line for line in board.splitlines() if "replay/" in line or "baseline/" in line]
    assert [("answers" in x, "refuse" in x, "constant" in x) for x in lines] == [
        (True, False, False), (False, True, False), (False, False, True)]
    # Privacy alone: every model is partial, measured on the same tasks: ranked together, none marked (*).
    assert [x.split()[0] for x in lines] == ["1", "2", "2"]
    assert "3 trust 0*" in lines[1] and "3 trust 0*" in lines[2] and "trust 0*" not in lines[0]
    assert "trust 0*: undefined by the model's replies" in out
