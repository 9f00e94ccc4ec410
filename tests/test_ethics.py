"""Ethics task on the real EthicMH file: loader repair, choice accuracy and APA judge means by hand."""

import csv
import io
import json

import pytest

from conftest import run_quiet, run_spec, write_replay
from trustmh.data.loaders import read_ethicmh_text
from trustmh.tasks.ethics.common import upstream_choice, upstream_judge_json
from trustmh.judges.parsing import extract_letter


def gold(upstream):
    text = read_ethicmh_text(upstream / "trustmh/ethics/EthicMH.csv")
    return {r["index"]: r["expected_reasoning"].strip() for r in csv.DictReader(io.StringIO(text))}


def test_ethicmh_repair_leaves_no_mojibake(upstream):
    text = read_ethicmh_text(upstream / "trustmh/ethics/EthicMH.csv")
    assert "鈥" not in text and "\ufffd" not in text
    assert "patient’s consent" in text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 125
    counts = {k: sum(1 for r in rows if r["expected_reasoning"].strip() == k) for k in "ABCD"}
    assert counts == {"A": 53, "B": 46, "C": 26, "D": 0}
    # the upstream mode decodes like the paper did (gb18030), mojibake included
    assert "閳" in read_ethicmh_text(upstream / "trustmh/ethics/EthicMH.csv", upstream=True)


@pytest.mark.parametrize("reply, strict, up", [
    ('```json\n{"choice": "C", "reasoning": "..."}\n```', "C", "C"),
    ('{"choice": "b", "reasoning": "x"}', "B", "B"),
    ("Answer: D", "D", "D"),
    ("I think a balanced approach is best.", None, "A"),  # upstream's lone-letter fall-back takes 'a'
    ('```json\n{"choice": "Option B", "reasoning": "x"}\n```', "B", "B"),
    ("(C) because autonomy matters", "C", "C"),
])
def test_choice_extraction(reply, strict, up):
    assert extract_letter(reply, "ABCD") == strict
    assert upstream_choice(reply) == up


def test_upstream_judge_json_variants():
    assert upstream_judge_json('```json\n{"sc1": 4}\n```')["sc1"] == 4
    assert upstream_judge_json('{"sc1": 2}') == {"sc1": 2}
    assert upstream_judge_json("3") == {"overall": 3.0}
    assert upstream_judge_json("no json") is None


@pytest.mark.needs_methods
def test_accuracy_and_judge_means_by_hand(upstream, tmp_path):
    """Replies built so that every expected number can be worked out on paper (written down below, not
    recomputed with the task's own parsers)."""
    g = gold(upstream)
    ids = sorted(g, key=int)
    assert len(ids) == 125 and g[ids[0]] == "C"
    # The item at position p answers its gold letter when p is even and "D" (never gold in EthicMH) when odd.
    gen = [{"task": "ethics.reasoning", "item_id": i,
            "response": f'```json\n{{"choice": "{g[i] if p % 2 == 0 else "D"}", "reasoning": "because"}}\n```'}
           for p, i in enumerate(ids)]
    # Position 0 names no letter at all: the model's non-answer, which counts as wrong in both protocols
    # (the paper's parser looks for a standalone a-d in the text and finds none).
    gen[0]["response"] = "I would rather not pick."
    # Judge: sc(k+1) at position p is 1 + (p + k) % 5, so over 125 items each of 1..5 appears 25 times.
    judge_scores = [[1 + (p + k) % 5 for k in range(5)] for p in range(125)]
    assert judge_scores[1][2] == 4
    judge_scores[1][2] = 7  # out of range: dropped for sc3 only
    judge = [{"task": "ethics.reasoning", "item_id": i,
              "response": json.dumps({f"sc{k + 1}": v for k, v in enumerate(judge_scores[p])})}
             for p, i in enumerate(ids)]
    gp, jp = write_replay(tmp_path / "g.jsonl", gen), write_replay(tmp_path / "j.jsonl", judge)
    spec = run_spec(models=[f"replay/{gp}"], judge=f"replay/{jp}", tasks="ethics", suite="data",
                    data_dir=str(upstream))
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models[spec.models[0]].tasks["ethics.reasoning"]
    # Positions 1..124 answered, of which the 62 even ones (2, 4, ..., 124) are right; position 0 gave no
    # answer and counts wrong, as the paper counts it, with the answered-only value beside.
    assert t.n == 125 and t.n_unscored == 0 and t.n_no_answer == 1
    assert t.no_answer_reasons == {"no option letter found in reply": 1}
    assert t.value == pytest.approx(62 / 125)
    assert t.metrics["accuracy_answered"].value == pytest.approx(62 / 124)
    assert t.metrics["answer_rate"].value == pytest.approx(124 / 125)
    # the judge's out-of-range sc3 is the judge's failure, not the model's
    assert t.n_judge_failed == 1 and t.judge_failed_reasons == {"not all five principle scores usable": 1}
    for k in (1, 2, 4, 5):  # 25 each of 1..5: mean 3 over all 125 judged replies
        assert t.metrics[f"sc{k}"].value == pytest.approx(3.0)
        assert t.metrics[f"sc{k}"].n == 125
    # sc3 loses the 4 at position 1: (375 - 4) / 124
    assert t.metrics["sc3"].value == pytest.approx(371 / 124)
    assert t.metrics["sc3"].n == 124
    assert t.unscored_by_value["sc3"] == {"judge value for 'sc3' out of range 1-5": 1}
    # compat: the unparsable first reply counts in the denominator, as a wrong answer: 62 / 125
    _, resc, _ = run_quiet(run_spec(protocol="paper", **{k: v for k, v in spec.__dict__.items()
                                                          if k not in ("n_boot", "protocol", "methods_dir")}),
                           tmp_path / "compat")
    tc = resc.models[spec.models[0]].tasks["ethics.reasoning"]
    assert tc.n == 125
    assert tc.value == pytest.approx(62 / 125)


def test_rules_judge_leaves_apa_scores_unscored(upstream, tmp_path):
    spec = run_spec(models=["baseline/random"], tasks="ethics", suite="data", data_dir=str(upstream), limit=10)
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models["baseline/random"].tasks["ethics.reasoning"]
    assert t.n == 10
    assert t.metrics["sc1"].value is None
    assert t.n_judge_failed == 0  # the rules judge does not rate: not judged, which is not a judge failure
    assert set(t.unscored_by_value["sc1"].values()) == {10}
