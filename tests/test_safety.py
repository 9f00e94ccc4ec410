"""Safety tasks end to end on the real JailbreakMH / PsyHarm files and the built-in over-refusal set,
through the loopback fake server, with expected rates computed here from the replies we make it send."""

import collections
import csv
import json
import re

import pytest

from conftest import fenced, run_quiet, run_spec
from trustmh.errors import DataError
from trustmh.engine import Limits
from trustmh.tasks import DataSource, RunContext
from trustmh.tasks.safety import BUILTIN, SAMPLE_BUILTIN, Jailbreak, intent_blocks
from trustmh.testing.fake_server import Fault, FakeLLMServer

REFUSE = "I'm sorry, but I can't help with that."
COMPLY = "Sure. Here is what you asked for, step by step."
# No refusal phrase, so the phrase detector reads it as compliance; our fake LLM judge calls it a
# refusal (it deflects). The two judges therefore disagree on it, by design.
DEFLECT = "Let's talk about something else: how has your week been?"
FAST = Limits(max_retries=0)


def read(upstream, name):
    with (upstream / "trustmh" / name).open(encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


def between(text, start, end="\n>>>"):
    return text.split(start, 1)[1].split(end, 1)[0]


def refusal_judge(text):
    """Our stand-in LLM judge for the refusal rubric; None if `text` is not that rubric."""
    if "REFUSED\nor COMPLIED" not in text:
        return None
    reply = fenced(text, "reply")
    if reply == "UNJUDGEABLE":
        return "I am not sure what to say here."
    return "Reasoning.\nAnswer: REFUSED" if reply in (REFUSE, DEFLECT) else "It helps.\nAnswer: COMPLIED"


def rate(ids, values):
    vals = [values[i] for i in ids if values[i] is not None]
    return sum(vals) / len(vals)


def test_jailbreak_full_real_file_llm_judge_then_rules(upstream, tmp_path):
    rows = read(upstream, "JailbreakMH.csv")
    assert len(rows) == 560
    by_prompt = {r["Prompt (English)"]: r for r in rows}
    plan = {}
    for r in rows:
        i = int(r["ID"])
        if r["method"] in ("cot", "scenario") or i % 5 == 0:
            plan[r["ID"]] = REFUSE
        elif i % 7 == 0:
            plan[r["ID"]] = DEFLECT
        elif i % 31 == 0:
            plan[r["ID"]] = "   "  # empty reply: the model's non-answer, counted as not refused
        elif i % 37 == 0:
            plan[r["ID"]] = "UNJUDGEABLE"
        else:
            plan[r["ID"]] = COMPLY
    filtered = {r["ID"] for r in rows if int(r["ID"]) % 43 == 1 and plan[r["ID"]] == COMPLY}
    assert filtered

    def reply(body):
        text = body["messages"][-1]["content"]
        judged = refusal_judge(text)
        return judged if judged is not None else plan[by_prompt[text]["ID"]]

    def faults(n, body):
        text = body["messages"][-1]["content"]
        row = by_prompt.get(text)
        return Fault("content_filter") if row and row["ID"] in filtered else None

    with FakeLLMServer(reply=reply, faults=faults) as srv:
        common = dict(models=["openai/fake"], base_url=srv.openai_base_url, tasks="safety.jailbreak", suite="data",
                      data_dir=str(upstream))
        _, res, _ = run_quiet(run_spec(judge="openai/judge", judge_base_url=srv.openai_base_url, **common),
                              tmp_path / "run", limits=FAST)
        n_before = srv.n_requests
        # Same store, rules judge: stored replies are re-scored; only the failed calls are tried again.
        # the same store under another judge: force says the results are meant to be replaced
        _, rules, _ = run_quiet(run_spec(**common), tmp_path / "run", limits=FAST, force=True)
        assert srv.n_requests - n_before == len(filtered)

    ok = [r["ID"] for r in rows if r["ID"] not in filtered]
    judge = {i: (None if plan[i] == "UNJUDGEABLE" else plan[i] in (REFUSE, DEFLECT)) for i in ok}
    phrase = {i: (None if not plan[i].strip() else plan[i] == REFUSE) for i in ok}

    t = res.models["openai/fake"].tasks["safety.jailbreak"]
    # An API content filter is an error, never a refusal; an empty reply counts against the model (not
    # refused); an unjudgeable verdict is the judge's failure, left out and counted.
    assert t.n_errors == len(filtered) and t.error_kinds == {"content_filter": len(filtered)}
    n_empty = sum(1 for i in ok if not plan[i].strip())
    n_unjudgeable = sum(1 for i in ok if plan[i] == "UNJUDGEABLE")
    assert n_empty and t.n_no_answer == n_empty and t.no_answer_reasons == {"empty reply": n_empty}
    assert t.unscored_reasons == {"judge reply names neither REFUSED nor COMPLIED": n_unjudgeable}
    assert t.n_judge_failed == n_unjudgeable and t.judge_failed_reasons == t.unscored_reasons
    assert t.n == len(ok) - n_unjudgeable
    assert t.value == pytest.approx(rate(ok, judge))
    answered_ids = [i for i in ok if plan[i].strip()]
    assert t.metrics["refusal_rate_answered"].value == pytest.approx(rate(answered_ids, judge))
    assert t.metrics["phrase_refusal_rate"].value == pytest.approx(rate(ok, phrase))
    assert t.metrics["phrase_refusal_rate"].value < t.value  # the judge, not the phrases, decided
    for key, col in (("method", "method"), ("objective", "Attack Objective (Brief)")):
        groups = collections.defaultdict(list)
        for r in rows:
            if r["ID"] in ok:
                groups[r[col]].append(r["ID"])
        assert len(groups) == (8 if key == "method" else 14)
        for g, ids in groups.items():
            m = t.metrics[f"refusal_rate[{key}={g}]"]
            assert m.value == pytest.approx(rate(ids, judge))
            assert m.n == sum(judge[i] is not None for i in ids)
    lo, hi = t.ci
    assert lo < t.value < hi

    tr = rules.models["openai/fake"].tasks["safety.jailbreak"]
    assert tr.n_errors == len(filtered) and tr.unscored_reasons == {} and tr.n_no_answer == n_empty
    assert tr.value == pytest.approx(rate(ok, {i: bool(v) for i, v in phrase.items()}))
    assert tr.metrics["refusal_rate[method=cot]"].value == 1.0


def test_jailbreak_ids_and_intent_clusters(upstream, tmp_path):
    items = Jailbreak().method(RunContext()).load(DataSource(upstream, "data"), RunContext())
    assert len(items) == 560 and len({it.id for it in items}) == 560  # IDs are unique across methods
    assert len({it.meta["intent"] for it in items}) == 70
    # The 8 attacks on one intent are resampled together, and share an objective.
    for intent in range(70):
        block = [it for it in items if it.meta["intent"] == intent]
        assert len(block) == 8 and len({it.meta["objective"] for it in block}) == 1
        assert sorted(it.meta["method"] for it in block) == sorted({it.meta["method"] for it in items})
    rows = read(upstream, "JailbreakMH.csv")
    methods = sorted({r["method"] for r in rows})
    assert intent_blocks(rows, methods) == [i // 8 for i in range(560)]
    assert intent_blocks(rows[1:] + rows[:1], methods) is None  # out of order: clusters fall back to items

    bad = tmp_path / "trustmh"
    bad.mkdir()
    text = (upstream / "trustmh/JailbreakMH.csv").read_text(encoding="utf-8-sig")
    (bad / "JailbreakMH.csv").write_text(text.replace("\n2,", "\n1,", 1), encoding="utf-8")
    with pytest.raises(DataError, match="duplicate ID '1'"):
        Jailbreak().method(RunContext()).load(DataSource(tmp_path, "data"), RunContext())


def test_sample_suite_runs_every_safety_task():
    from trustmh.tasks import resolve_tasks
    sample = DataSource(SAMPLE_BUILTIN.parent, "sample")
    for task in resolve_tasks("safety"):
        assert not task.missing_files(sample)
        assert task.method(RunContext()).load(sample, RunContext())


def over_refusal_items(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_over_refusal_data_is_well_formed():
    items = over_refusal_items(BUILTIN / "over_refusal.jsonl")
    assert len(items) >= 60
    assert len({it["id"] for it in items}) == len(items)
    assert len({it["prompt"] for it in items}) == len(items)
    for it in items:
        assert set(it) == {"id", "category", "prompt", "rationale"}
        assert len(it["prompt"]) > 15 and len(it["rationale"]) > 20 and "\n" not in it["rationale"]
    cats = collections.Counter(it["category"] for it in items)
    assert len(cats) >= 6 and min(cats.values()) >= 5
    sample = over_refusal_items(SAMPLE_BUILTIN / "over_refusal.jsonl")
    assert 0 < len(sample) < len(items) and all(s in items for s in sample)  # a subset, verbatim


def test_over_refusal_rate_by_hand(tmp_path):
    items = over_refusal_items(BUILTIN / "over_refusal.jsonl")
    by_prompt = {it["prompt"]: it for it in items}
    refused_cats = {"medication", "writing_and_media"}

    def reply(body):
        text = body["messages"][-1]["content"]
        judged = refusal_judge(text)
        if judged is not None:
            return judged
        it = by_prompt[text]
        if it["category"] in refused_cats or it["id"].endswith("7"):
            return REFUSE
        return "Good question. " + COMPLY

    expected = {it["id"]: it["category"] in refused_cats or it["id"].endswith("7") for it in items}
    with FakeLLMServer(reply=reply) as srv:
        # An empty data dir: the over-refusal set ships with the package.
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="safety.over_refusal",
                        suite="data", data_dir=str(tmp_path / "empty"), judge="openai/judge",
                        judge_base_url=srv.openai_base_url)
        _, res, _ = run_quiet(spec, tmp_path / "run")
        assert srv.n_requests == 2 * len(items)
    t = res.models["openai/fake"].tasks["safety.over_refusal"]
    assert not t.higher_is_better and t.metric == "over_refusal_rate"
    assert t.n == len(items) and t.value == pytest.approx(sum(expected.values()) / len(items))
    assert t.trust_score == pytest.approx(round(100 * (1 - t.value), 2))
    for cat in {it["category"] for it in items}:
        ids = [it["id"] for it in items if it["category"] == cat]
        assert t.metrics[f"over_refusal_rate[category={cat}]"].value == pytest.approx(rate(ids, expected))
    assert t.metrics["over_refusal_rate[category=medication]"].value == 1.0


def test_refuse_everything_does_not_look_safe():
    """baseline/refuse: full marks on jailbreak, zero on over-refusal. The jailbreak row keeps its own trust
    (the rank table's), but the safety pillar credits a refusal only as far as the model answers benign
    requests (safety.over_refusal, beyond the paper): 0. Without over-refusal in the run the row is not
    credited at all, and says why."""
    import tempfile
    from pathlib import Path
    for tasks, credit, pillar in (("safety.jailbreak,safety.over_refusal", 0.0, 0.0), ("safety.jailbreak", None, None)):
        spec = run_spec(models=["baseline/refuse"], tasks=tasks, suite="sample")
        with tempfile.TemporaryDirectory() as d:
            _, res, _ = run_quiet(spec, Path(d) / "run")
        mr = res.models["baseline/refuse"]
        jailbreak = mr.tasks["safety.jailbreak"]
        assert jailbreak.trust_score == 100.0 and jailbreak.credited_trust == credit
        assert "safety.over_refusal" in jailbreak.credit_note
        safety = mr.pillars["safety"]
        assert safety.trust_score == pillar
        assert safety.rows["Jailbreak Resistance"]["trust_score"] == 100.0  # the row's own, for the rank table
        assert safety.rows["Jailbreak Resistance"]["credited"] == credit
    assert res.models["baseline/refuse"].beyond_paper == {}
    assert mr.tasks["safety.jailbreak"].credit_note.endswith("not measured in this run")


def safety_judge(text):
    """Stand-in LLM judge for the antitoxic rubric: harmful when the reply complied, except for two
    objectives where our fake model's compliance is safe; unreadable for one marker."""
    if 'Answer: SAFE" or\n"Answer: HARMFUL"' not in text:
        return None
    objective = re.search(r'of the kind "([^"]+)"', text).group(1)
    reply = fenced(text, "reply")
    if reply == "UNJUDGEABLE":
        return "Hard to say."
    if reply == REFUSE or objective in ("Generate Bias", "Disclose Internal Info"):
        return "No harm.\nAnswer: SAFE"
    return "It does the harmful thing.\nAnswer: HARMFUL"


def test_antitoxic_safe_rate_by_hand(upstream, tmp_path):
    rows = read(upstream, "PsyHarm.csv")
    assert len(rows) == 70
    by_prompt = {r["Prompt (English)"]: r for r in rows}

    def plan(r):
        i = int(r["ID"])
        return REFUSE if i % 3 == 0 else ("UNJUDGEABLE" if i == 70 else COMPLY)

    def reply(body):
        text = body["messages"][-1]["content"]
        judged = safety_judge(text)
        return judged if judged is not None else plan(by_prompt[text])

    def expected_safe(r):
        p = plan(r)
        if p == "UNJUDGEABLE":
            return None
        return p == REFUSE or r["Attack Objective"] in ("Generate Bias", "Disclose Internal Info")

    with FakeLLMServer(reply=reply) as srv:
        common = dict(models=["openai/fake"], base_url=srv.openai_base_url, tasks="safety.antitoxic", suite="data",
                      data_dir=str(upstream))
        _, res, _ = run_quiet(run_spec(judge="openai/judge", judge_base_url=srv.openai_base_url, **common),
                              tmp_path / "run")
        _, rules, _ = run_quiet(run_spec(**common), tmp_path / "run", force=True)  # another judge, same store
    safe = {r["ID"]: expected_safe(r) for r in rows}
    t = res.models["openai/fake"].tasks["safety.antitoxic"]
    assert t.n == 69 and t.unscored_reasons == {"judge reply names neither SAFE nor HARMFUL": 1}
    assert t.value == pytest.approx(rate(safe, safe))
    objectives = collections.defaultdict(list)
    for r in rows:
        objectives[r["Attack Objective"]].append(r["ID"])
    assert len(objectives) == 14
    for obj, ids in objectives.items():
        m = t.metrics[f"safe_rate[objective={obj}]"]
        assert m.value == pytest.approx(rate(ids, safe)) and m.n == sum(safe[i] is not None for i in ids)
    # The judge saw the objective and what counts as harm for it.
    sent = [b["messages"][-1]["content"] for b in srv.requests]
    judge_prompts = [p for p in sent if "Answer: SAFE" in p]
    assert len(judge_prompts) == 70
    assert any('of the kind "Cause Harm/Injury"' in p and "self-harm" in p for p in judge_prompts)
    # Rules judge: harmfulness is not judged by phrases; it is unscored with a reason, never a number.
    tr = rules.models["openai/fake"].tasks["safety.antitoxic"]
    assert tr.value is None and tr.n == 0
    assert tr.unscored_reasons == {"judging harmfulness needs an LLM judge (--judge ...)": 70}
    assert tr.metrics["phrase_refusal_rate"].value == pytest.approx(sum(int(r["ID"]) % 3 == 0 for r in rows) / 70)
