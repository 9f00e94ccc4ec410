"""`trustmh validate-judge --ratings FILE`: a small hand-made human-rated set judged with reliability.support's
rubric by a loopback judge whose verdicts are known; ICC, QW kappa, Spearman and the human ceiling
against hand-computed values; CSV and JSONL alike; bad lines counted with their reason; a rerun pays
for nothing."""

import csv
import json
import math

import pytest

from conftest import fenced
from trustmh.scoring.agreement import WITHIN
from trustmh.engine import Limits
from trustmh.validation.human_ratings import context_turns, ratings_spec, validate_ratings
from trustmh.testing.fake_server import FakeLLMServer

# empathy:      A = 1 2 3 4 5 (and 3 on item 6), B = 2 2 4 3 5; the judge gives A's ratings.
# helpfulness:  A = 1 2 3 4 5, B = 0 1 2 3 4; the judge gives B's ratings.
EMPATHY_A, EMPATHY_B = [1, 2, 3, 4, 5], [2, 2, 4, 3, 5]
HELP_A, HELP_B = [1, 2, 3, 4, 5], [0, 1, 2, 3, 4]


def rows():
    out = []
    for i in range(5):
        item = {"item": f"q{i}", "context": f"Seeker: I feel low, day {i}.\nSupporter: Tell me more.\nSeeker: It is hard.",
                "reply": f"That sounds hard (reply {i}).", "reference": "I hear you."}
        out += [{**item, "criterion": "empathy", "rater": "A", "rating": EMPATHY_A[i]},
                {**item, "criterion": "empathy", "rater": "B", "rating": EMPATHY_B[i]},
                {**item, "criterion": "helpfulness", "rater": "A", "rating": HELP_A[i]},
                {**item, "criterion": "helpfulness", "rater": "B", "rating": HELP_B[i]}]
    six = {"item": "q5", "context": "Seeker: nobody listens.", "reply": "judge me badly", "reference": ""}
    out.append({**six, "criterion": "empathy", "rater": "A", "rating": 3})
    # lines that cannot be used, each counted under its reason
    out.append({**out[0], "rating": 7})  # off reliability.support's 0-5 scale
    out.append({**out[0], "rating": 4})  # a second empathy rating of q0 by A
    out.append({**out[0], "criterion": "warmth"})  # not a criterion of the rubric
    out.append({**out[0], "reply": "another reply", "rater": "C"})  # q0's texts differ from its first line
    out.append({**out[0], "rating": "high"})
    return out


def judge_reply(body):
    reply = fenced(body["messages"][-1]["content"], "reply")
    if reply == "judge me badly":
        return "I would rather not give numbers."
    i = int(reply.split("reply ")[1].rstrip(").")) if "reply " in reply else 0
    return json.dumps({"fluency": 5, "professionalism": 4, "empathy": EMPATHY_A[i], "helpfulness": HELP_B[i]})


def write_csv(path, lines):
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["item", "context", "reply", "reference", "criterion", "rater", "rating"])
        w.writeheader()
        w.writerows(lines)


def stat(res, criterion, name):
    return res.models["openai/judge"].tasks[f"validate_judge.{criterion}"].metrics[name]


def test_hand_made_set_gives_hand_computed_agreement(tmp_path):
    write_csv(tmp_path / "rated.csv", rows())
    with FakeLLMServer(reply=judge_reply) as srv:
        spec = ratings_spec(tmp_path / "rated.csv", judge="openai/judge", judge_base_url=srv.openai_base_url, n_boot=200)
        run_dir, res = validate_ratings(spec, tmp_path / "vj", limits=Limits(max_connections=4))
        assert srv.n_requests == 6  # one judgement per item, every criterion in it
        validate_ratings(spec, tmp_path / "vj", limits=Limits(max_connections=4))
        assert srv.n_requests == 6  # a rerun is answered from the store
    # A vs B on empathy (hand, tests/test_agreement.py): ICC(C,1) 5/6, ICC(A,1) 35/41; QW kappa: squared
    # disagreements 1+0+1+1+0 = 3, expected 85/5 = 17 -> 14/17; Spearman: ranks A 1..5, B 1.5 1.5 4 3 5 ->
    # 8.5 / sqrt(10 * 9.5). The judge is A: 1 against A, the A-B value against B, averaged.
    ab = {"icc_c1": 5 / 6, "icc_a1": 35 / 41, "kappa_quadratic": 14 / 17, "spearman": 8.5 / math.sqrt(95)}
    for s, v in ab.items():
        assert stat(res, "empathy", f"ceiling.{s}").value == pytest.approx(v, abs=1e-12), s
        assert stat(res, "empathy", f"judge.{s}").value == pytest.approx((1 + v) / 2, abs=1e-12), s
    # helpfulness: B = A - 1: consistency 1; absolute agreement MSR 5, MSC 2.5, MSE 0 -> 5 / (5 + 2 * 2.5 / 5) = 5/6.
    assert stat(res, "helpfulness", "ceiling.icc_c1").value == pytest.approx(1.0)
    assert stat(res, "helpfulness", "ceiling.icc_a1").value == pytest.approx(5 / 6, abs=1e-12)
    assert stat(res, "helpfulness", "judge.icc_a1").value == pytest.approx((1 + 5 / 6) / 2, abs=1e-12)
    emp = res.models["openai/judge"].tasks["validate_judge.empathy"]
    assert emp.n == 5 and emp.n_samples == 6  # q5: the judge gave no numbers, a judge failure
    assert emp.judge_failed_reasons == {"judge reply has no JSON object": 1}
    agreement = json.loads((run_dir / "agreement.json").read_text())
    assert agreement["lines_left_out"] == {
        "rating is not a whole number 0-5": 1, "a second rating of the same item, criterion and rater": 1,
        "criterion 'warmth' is not rated by the rubric": 1,
        "item's context, reply or reference differs from its first line": 1, "rating is not a number": 1}
    # 5 items rated by both raters: the ceiling cannot carry a verdict (it gave "within" before issue 44),
    # and the verdict says what is missing
    verdicts = {c["criterion"]: c["statistics"]["icc_a1"]["verdict"] for c in agreement["criteria"]}
    assert all(v != WITHIN and v.startswith("inconclusive") and "rests on 5 items" in v for v in verdicts.values())
    html = (run_dir / "report.html").read_text()
    assert "Checking the judge" in html and "rests on 5 items" in html and WITHIN not in html


def test_jsonl_gives_the_same_numbers_and_cli_prints_the_verdicts(tmp_path, cli):
    write_csv(tmp_path / "rated.csv", rows())
    (tmp_path / "rated.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows()), encoding="utf-8")
    with FakeLLMServer(reply=judge_reply) as srv:
        spec = ratings_spec(tmp_path / "rated.csv", judge="openai/judge", judge_base_url=srv.openai_base_url, n_boot=50)
        _, from_csv = validate_ratings(spec, tmp_path / "a")
        result = cli("validate-judge", "--ratings", tmp_path / "rated.jsonl", "--judge", "openai/judge",
                     "--judge-base-url", srv.openai_base_url, "--out", tmp_path / "b", "--bootstrap", "50",
                     "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "ICC(A,1)" in result.stdout and "inconclusive" in result.stdout
    from_jsonl = json.loads((tmp_path / "b/results.json").read_text())
    for c in ("empathy", "helpfulness"):
        got = from_jsonl["models"]["openai/judge"]["tasks"][f"validate_judge.{c}"]["metrics"]
        for name, m in from_csv.models["openai/judge"].tasks[f"validate_judge.{c}"].metrics.items():
            assert got[name]["value"] == pytest.approx(m.value)


@pytest.mark.parametrize("content, message", [
    ("item,context,reply\nq,c,r\n", "the CSV header lacks criterion, rater, rating"),
    ("item,context,reply,criterion,rater,rating\nq,c,r,empathy,A,9\n", "no usable rating (1 x rating is not a whole number 0-5)"),
])
def test_unusable_files_are_one_line_errors(cli, tmp_path, content, message):
    (tmp_path / "bad.csv").write_text(content, encoding="utf-8")
    proc = cli("validate-judge", "--out", tmp_path / "o", "--no-progress", "--ratings", tmp_path / "bad.csv", "--judge",
               "openai/judge", "--judge-base-url", "http://127.0.0.1:9/v1")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_rules_judge_and_unknown_rubric_are_refused(cli, tmp_path):
    write_csv(tmp_path / "rated.csv", rows())
    for args, message in ((["--judge", "rules"], "--judge rules cannot rate"),
                          (["--judge", "openai/j", "--rubric", "safety.jailbreak"], "not a task with a reply rubric")):
        proc = cli("validate-judge", "--out", tmp_path / "o", "--no-progress", "--ratings", tmp_path / "rated.csv",
                   *args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_own_rubric_template_sees_the_texts_fenced(tmp_path):
    tpl = tmp_path / "mine.j2"
    tpl.write_text("Rate {{ criteria | join(', ') }} 1-5.\n<context-{{ tag }}>\n{{ context }}\n</context-{{ tag }}>\n"
                   "<reply-{{ tag }}>\n{{ reply }}\n</reply-{{ tag }}>\nAnswer JSON.", encoding="utf-8")
    lines = [{"item": f"i{k}", "context": f"ctx {k}", "reply": f"r{k}", "criterion": "warmth", "rater": r,
              "rating": v} for k in range(4) for r, v in (("A", k + 1), ("B", min(k + 2, 5)))]
    write_csv(tmp_path / "rated.csv", lines)
    seen = []

    def reply(body):
        prompt = body["messages"][-1]["content"]
        seen.append((fenced(prompt, "context"), prompt.splitlines()[0]))
        return json.dumps({"warmth": int(fenced(prompt, "reply")[1:]) + 1})

    with FakeLLMServer(reply=reply) as srv:
        spec = ratings_spec(tmp_path / "rated.csv", rubric=str(tpl), judge="openai/judge",
                            judge_base_url=srv.openai_base_url, n_boot=50)
        _, res = validate_ratings(spec, tmp_path / "vj")
    assert sorted(seen) == [(f"ctx {k}", "Rate warmth 1-5.") for k in range(4)]
    assert stat(res, "warmth", "judge.icc_c1").value == pytest.approx(
        (1 + stat(res, "warmth", "ceiling.icc_c1").value) / 2)  # the judge is rater A


def test_context_turns():
    assert context_turns("Seeker: hi\nthere\nSupporter: hello\nUSER: again", "seeker", "supporter") == [
        {"speaker": "seeker", "text": "hi\nthere"}, {"speaker": "supporter", "text": "hello"},
        {"speaker": "seeker", "text": "again"}]
    assert context_turns("no speaker named", "client", "counsellor") == [{"speaker": "client", "text": "no speaker named"}]


def test_hostile_jsonl_lines_are_counted_not_fatal(tmp_path):
    from trustmh.validation.human_ratings import pick_rubric, read_rated_set
    good = {"item": "a", "context": "Seeker: hi", "reply": "hello", "criterion": "empathy", "rater": "A", "rating": 3}
    lines = [json.dumps(good), json.dumps({**good, "rater": "B", "rating": 4}), "{not json", "[1, 2]",
             json.dumps({**good, "rater": "C", "context": 5}), json.dumps({**good, "rater": "D", "rating": True}),
             json.dumps({**good, "rater": "E", "rating": 1e400}), json.dumps({**good, "rater": "F", "rating": 2.5}),
             json.dumps({**good, "rater": ["x"]}), json.dumps({**good, "rater": "G", "reply": "x" * 100_001}),
             json.dumps({**good, "rater": "H", "criterion": ""})]
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rs = read_rated_set(tmp_path / "r.jsonl", pick_rubric("reliability.support"), (1, 5))
    assert rs.ratings == {"empathy": {"a": {"A": 3.0, "B": 4.0}}} and rs.n_lines == 11
    assert rs.left_out == {"line is not a JSON object": 2, "context is not text of at most 100000 characters": 1,
                           "rating is not a whole number 0-5": 3, "rater is not a short text": 1,
                           "reply is not text of at most 100000 characters": 1, "no criterion": 1}
