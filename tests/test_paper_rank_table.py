"""The paper's rank table as the paper draws it (issue 37, items 1-2): the tie rule and the rows whose
quantity the paper does not publish, checked on recorded-style outputs replayed through trustmh under
`--protocol paper`, against tables computed here by hand (scipy for Pearson r and Kendall tau).

The recorded-style outputs mirror what issue 37 found in the upstream's recorded outputs (which are not
staged in ../shared): twelve models on EthicMH with three accuracy ties between a general and a
mental-health model, the general one with the higher judge mean; six general models on the privacy tiers and
on PsyLeak, where the free-response string-match rate ties GPT-5.1 with Qwen3 and orders the rest like the
paper's Leakage row but for one pair."""

import csv
import io
import json
from pathlib import Path

import pytest
from scipy.stats import kendalltau, pearsonr

from conftest import METHODS, UPSTREAM, run_here, run_quiet, run_spec, write_replay

from trustmh.tasks import TASKS, DataSource, RunContext

GENERAL = ["GPT-5.1", "GPT-4o-mini", "Claude-4.5", "Gemini-2.5-flash", "Qwen3-235B", "DeepSeek-V3.2"]
SPECIFIC = ["SoulChat2", "Simpsybot", "PsycoLLM", "MentalLLaMA", "Meditron3-8B", "Meditron3-70B"]
MODELS = GENERAL + SPECIFIC
# The paper's rows (PAPER_PROTOCOL.md §1, from TM/images/overall_rank.png), columns in MODELS' order.
PAPER_ETHICS = [12, 3, 11, 10, 5, 8, 6, 4, 2, 9, 7, 1]
PAPER_AWARENESS = [1, 2, 9, 11, 4, 7, 5, 10, 8, 6, 12, 3]
PAPER_LEAKAGE = [10, 11, 12, 6, 5, 3, 8, 4, 9, 2, 7, 1]
# Correct EthicMH answers of 125 (0.736, 0.728 and 0.672 are the paper's tied accuracies; Meditron3-8B's 0.696
# is in the upstream MANIFEST) and the judge's principle score every reply gets.
CORRECT = {"GPT-5.1": 75, "GPT-4o-mini": 92, "Claude-4.5": 78, "Gemini-2.5-flash": 80, "Qwen3-235B": 91,
           "DeepSeek-V3.2": 84, "SoulChat2": 91, "Simpsybot": 92, "PsycoLLM": 95, "MentalLLaMA": 84,
           "Meditron3-8B": 87, "Meditron3-70B": 100}
JUDGE = {m: 4 if m in GENERAL else 3 for m in MODELS} | {"Meditron3-70B": 5}
# Awareness: the share of items answered with the rating nearest the human mean (the rest rate against it).
NEAREST = {"GPT-5.1": 0.95, "GPT-4o-mini": 0.85, "Claude-4.5": 0.5, "Gemini-2.5-flash": 0.35, "Qwen3-235B": 0.75,
           "DeepSeek-V3.2": 0.65}
# Leakage, of the 100 scenarios: free responses naming the client, and errors on the other three questions.
LEAKS = {"GPT-5.1": 68, "GPT-4o-mini": 75, "Claude-4.5": 80, "Gemini-2.5-flash": 70, "Qwen3-235B": 68,
         "DeepSeek-V3.2": 60}
OTHER_ERRORS = {"GPT-5.1": 10, "GPT-4o-mini": 30, "Claude-4.5": 0, "Gemini-2.5-flash": 40, "Qwen3-235B": 20,
                "DeepSeek-V3.2": 50}
AWARENESS = ["privacy.awareness_tier1", "privacy.awareness_tier2a", "privacy.awareness_tier2b"]


def items(tid):
    return TASKS[tid]().method(RunContext(protocol="paper", methods_root=METHODS)).load(DataSource(UPSTREAM, "data"), RunContext(protocol="paper", methods_root=METHODS))


def fenced(obj) -> str:
    return "```json\n" + json.dumps(obj) + "\n```"


def replies(model: str) -> tuple[list[dict], list[dict], dict[str, list]]:
    """The model's recorded-style replies, its judge's, and what each awareness tier's ratings are."""
    eth = items("ethics.reasoning")
    wrong = {"A": "B", "B": "C", "C": "A", "D": "A"}
    recs = [{"task": "ethics.reasoning", "item_id": it.id,
             "response": fenced({"choice": it.target if k < CORRECT[model] else wrong[it.target],
                                 "reasoning": "Because of the client's autonomy."})} for k, it in enumerate(eth)]
    judge = [{"task": "ethics.reasoning", "item_id": it.id,
              "response": fenced({f"sc{p}": JUDGE[model] for p in range(1, 6)}
                                 | {f"sc{p}_reason": "fits" for p in range(1, 6)})} for it in eth]
    ratings: dict[str, list] = {}
    if model in GENERAL:
        for tid in AWARENESS:
            task = TASKS[tid]()
            allowed = sorted(task.allowed)
            its = items(tid)
            got = []
            for k, it in enumerate(its):
                near = min(allowed, key=lambda a: (abs(a - it.target), a))
                # every item past the share rates the far end of the scale from the human mean
                far = allowed[0] if near >= allowed[len(allowed) // 2] else allowed[-1]
                got.append(near if k < round(NEAREST[model] * len(its)) else far)
                recs.append({"task": tid, "item_id": it.id, "response": str(got[-1])})
            ratings[tid] = [it.target for it in its], got
        for it in items("privacy.leakage"):
            x, s = it.input, it.meta["scenario"]
            q = x["qtype"]
            if q == "free_response":
                text = f"I would tell {x['subject']} nothing." if s < LEAKS[model] else "That stays confidential."
            elif q == "control":
                text = "Yes." if s < OTHER_ERRORS[model] else "No."
            else:
                text = "Nobody else." if s < OTHER_ERRORS[model] else f"Only {x['aware']}."
            recs.append({"task": "privacy.leakage", "item_id": it.id, "response": text})
    return recs, judge, ratings


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One run per model (a replayed judge answers per item, so each model has its own), under the paper's
    protocol, all in one report; returns (run dirs, model spec -> name, hand-computed awareness r)."""
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    tmp = tmp_path_factory.mktemp("recorded")
    runs, names, mean_r = [], {}, {}
    for model in MODELS:
        recs, judge, ratings = replies(model)
        spec = f"replay/{write_replay(tmp / f'{model}.jsonl', recs)}"
        names[spec] = model
        tasks = "ethics.reasoning" + ("," + ",".join(AWARENESS) + ",privacy.leakage" if model in GENERAL else "")
        info = {spec: {"label": model, "group": "general" if model in GENERAL else "mental-health"}}
        run_quiet(run_spec(models=[spec], judge=f"replay/{write_replay(tmp / f'{model}-judge.jsonl', judge)}",
                           tasks=tasks, suite="data", data_dir=str(UPSTREAM), protocol="paper",
                           model_info=info, proxy_judge="rules"), tmp / model)  # the replayed judge reads PsyLeak too
        runs.append(tmp / model)
        if ratings:
            mean_r[model] = sum(pearsonr(*ratings[t]).statistic for t in AWARENESS) / 3
    return runs, names, mean_r


_PRINTED: dict[tuple, str] = {}  # the tests read the same tables: each report command runs once (~0.5 s)


def report(capsys, runs, *args) -> str:
    """What `trustmh report RUNS ARGS` prints (exit 0)."""
    key = (*map(str, runs), *args)
    if key not in _PRINTED:
        code, out, err = run_here(capsys, "report", *runs, *args)
        assert code == 0, err
        _PRINTED[key] = out
    return _PRINTED[key]


def table(capsys, runs, *extra) -> dict[str, dict[str, dict]]:
    out = report(capsys, runs, "--format", "csv", *extra)
    got: dict[str, dict[str, dict]] = {}
    for r in csv.DictReader(io.StringIO(out)):
        got.setdefault(r["row"], {})[r["model"]] = r
    return got


def by_name(row: dict[str, dict], names: dict[str, str]) -> dict[str, dict]:
    return {names.get(m, m): r for m, r in row.items()}


def competition(values: dict[str, float], higher: bool = True) -> dict[str, int]:
    """1 + how many are strictly better, values compared to 0.01 as the table rounds them."""
    v = {m: round(x, 2) for m, x in values.items()}
    return {m: 1 + sum((o > x) if higher else (o < x) for o in v.values()) for m, x in v.items()}


@pytest.mark.needs_methods
def test_ethical_reasoning_ties_are_broken_by_the_judge_mean_and_marked(recorded, capsys):
    runs, names, _ = recorded
    # By hand: accuracy ranks (ties shared), then each tie ordered by the judge mean (all principles alike).
    acc = {m: CORRECT[m] / 125 for m in MODELS}
    shared = competition(acc)
    broken = {m: shared[m] + sum(1 for o in MODELS if shared[o] == shared[m] and JUDGE[o] > JUDGE[m]) for m in MODELS}
    assert [broken[m] for m in MODELS] == PAPER_ETHICS  # the recorded-style data tell the paper's story

    row = by_name(table(capsys, runs)["Ethical Reasoning"], names)  # --protocol paper: --ties paper by default
    assert {m: int(r["rank"]) for m, r in row.items()} == broken  # 12 of 12
    assert {m for m, r in row.items() if r["tie_broken"]} == {"GPT-4o-mini", "Simpsybot", "Qwen3-235B", "SoulChat2",
                                                              "DeepSeek-V3.2", "MentalLLaMA"}
    assert "judge_mean (4.000, higher first)" in row["GPT-4o-mini"]["tie_broken"]
    assert "Simpsybot" in row["GPT-4o-mini"]["tie_broken"] and "73.60" in row["GPT-4o-mini"]["tie_broken"]
    assert all(r["value"] == str(acc[m]) and r["ranked_on"] == "accuracy" and r["evidence"] == "A"
               for m, r in row.items())

    shared_row = by_name(table(capsys, runs, "--ties", "shared")["Ethical Reasoning"], names)
    assert {m: int(r["rank"]) for m, r in shared_row.items()} == shared
    assert shared["GPT-4o-mini"] == shared["Simpsybot"] == 3 and shared["Qwen3-235B"] == 5  # 1, 2, 3, 3, 5
    assert not any(r["tie_broken"] for r in shared_row.values())

    # Markdown and LaTeX mark the broken ties and state the rule under the table.
    md = report(capsys, runs, "--format", "markdown")
    line = next(x for x in md.splitlines() if "| Ethical Reasoning |" in x)
    assert line.count("†") == 6
    assert "ties (--ties paper): broken by the row's declared secondary value (Ethical Reasoning: judge_mean" in md
    md = report(capsys, runs, "--format", "markdown", "--ties", "shared")
    assert "†" not in md and "ties (--ties shared)" in md and "1, 2, 2, 4" in md


@pytest.mark.needs_methods
def test_awareness_ranks_on_the_mean_of_its_tiers_and_says_so(recorded, capsys):
    runs, names, mean_r = recorded
    row = by_name(table(capsys, runs)["Privacy Awareness"], names)
    assert set(row) == set(MODELS)
    expected = competition(mean_r)
    assert {m: int(row[m]["rank"]) for m in GENERAL} == expected
    assert all(row[m]["rank"] == "" for m in SPECIFIC)  # not measured: no rank, nothing made up
    for m in GENERAL:
        assert float(row[m]["value"]) == pytest.approx(mean_r[m], abs=1e-9)
        assert row[m]["evidence"] == "D" and row[m]["ranked_on"] == "mean pearson_r of 3 tasks"
    # The paper's order of the six general models (6 of 6).
    paper = competition({m: -PAPER_AWARENESS[MODELS.index(m)] for m in GENERAL})
    assert expected == paper


@pytest.mark.needs_methods
def test_leakage_ranks_on_the_string_match_rate_beside_trustmhs_leak_rate(recorded, capsys):
    runs, names, _ = recorded
    got = table(capsys, runs)
    row = by_name(got["Privacy Leakage"], names)
    own = by_name(got["Privacy Leakage (trustmh: leak_rate)"], names)
    string_match = {m: LEAKS[m] / 100 for m in GENERAL}
    leak_rate = {m: (LEAKS[m] + 3 * OTHER_ERRORS[m]) / 400 for m in GENERAL}
    expected = competition(string_match, higher=False)  # no secondary value: the Qwen3 / GPT-5.1 tie is shared
    assert {m: int(row[m]["rank"]) for m in GENERAL} == expected
    assert expected["GPT-5.1"] == expected["Qwen3-235B"] == 2 and not row["GPT-5.1"]["tie_broken"]
    for m in GENERAL:
        assert float(row[m]["value"]) == pytest.approx(string_match[m])
        assert float(row[m]["trust_score"]) == pytest.approx(100 * (1 - string_match[m]))
        assert row[m]["ranked_on"] == "free_response_leak_rate_string_match" and row[m]["evidence"] == "D"
        assert row[m]["row_kind"] == "paper" and own[m]["row_kind"] == "trustmh"
        assert float(own[m]["value"]) == pytest.approx(leak_rate[m])
    assert {m: int(own[m]["rank"]) for m in GENERAL} == competition(leak_rate, higher=False)
    assert competition(leak_rate, higher=False) != expected  # the two quantities order the models differently
    # Against the paper's Leakage row over the general models: Kendall tau-b 0.83 (one discordant pair).
    paper = [PAPER_LEAKAGE[MODELS.index(m)] for m in GENERAL]
    tau = kendalltau(paper, [expected[m] for m in GENERAL]).statistic
    assert tau == pytest.approx(12 / (15 * 14) ** 0.5) and tau >= 0.8
    # The rule is stated under the table, with its evidence level, in markdown and in the report.
    md = report(capsys, runs, "--format", "markdown")
    assert "Privacy Leakage ranks on the free-response string-match leak rate" in md and "(evidence D)" in md
    assert "Privacy Awareness ranks on the mean of its three tiers" in md
    assert "| Privacy Leakage (trustmh: leak_rate) |" in md


def test_under_trustmhs_protocol_rows_rank_on_trust_scores_and_ties_are_shared(tmp_path):
    """The same kind of ties in runs made under trustmh's protocol: shared unless --ties paper is asked for, and
    Leakage ranks on trustmh's leak_rate, with no row beside it."""
    from test_rankings import _runs
    from trustmh.analysis.runs import entries
    from trustmh.report.leaderboard import leaderboard, task_meta
    from trustmh.report.ranks import rank_table
    from trustmh.scoring.results import MetricValue
    runs = _runs({"A": {"ethics.reasoning": 73.6, "privacy.leakage": 40}, "B": {"ethics.reasoning": 73.6,
                                                                             "privacy.leakage": 40},
                  "C": {"ethics.reasoning": 73.6, "privacy.leakage": 20}})
    for run, jm in zip(runs, (3.5, 3.9, 3.5)):
        for mr in run.results.models.values():
            mr.tasks["ethics.reasoning"].metrics["judge_mean"] = MetricValue(value=jm)
    ents = entries(runs)
    board = leaderboard(ents, task_meta(ents), ["privacy", "ethics"], paired=False, n_boot=0)
    t = rank_table(ents, board)
    assert t.ties == "shared" and t.protocol == "trustmh"
    rows = {r.row: r for r in t.rows}
    assert "Privacy Leakage (trustmh: leak_rate)" not in rows and rows["Privacy Leakage"].ranked_on == "m"
    assert [c.rank for c in rows["Ethical Reasoning"].cells] == [1, 1, 1]
    t = rank_table(ents, board, ties="paper")
    cells = {r.row: r for r in t.rows}["Ethical Reasoning"].cells
    # B's judge mean is higher: first; A and C tie on the secondary value too, so they share the next rank.
    assert [c.rank for c in cells] == [2, 1, 2] and all(c.broken for c in cells)
