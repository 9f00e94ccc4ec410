"""Reliability tasks on the real files (USMLE-Mental, EmoBench EU, ESConv, CPsyCounE) and on project-made
SWMH fixtures, through the loopback fake server and replay files; metrics checked by hand and sklearn."""

import collections
import hashlib
import json
import re

import numpy as np
import pytest
from sklearn.metrics import f1_score

from conftest import fenced, run_quiet, run_spec, write_replay
from trustmh.errors import UserError
from trustmh.tasks import DataSource, RunContext
from trustmh.tasks.reliability import (Intervention, Knowledge, Support, option_from_text, parse_emotion_cause,
                                       pick_turns)
from trustmh.judges.parsing import extract_label, extract_letter
from trustmh.testing.fake_server import FakeLLMServer


def h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def samples_of(run_dir, task):
    return [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()
            if json.loads(x)["task"] == task]


# --- parsing ---------------------------------------------------------------------------------------

OPTS = {"A": "Brief psychotic disorder", "B": "Schizophreniform disorder", "C": "Schizophrenia",
        "D": "Schizoaffective disorder", "E": "Delusional disorder"}


@pytest.mark.parametrize("reply, expected", [
    ("Answer: C", "C"), ("(C)", "C"), ("C. Schizophrenia", "C"), ('{"answer": "C"}', "C"),
    ("The findings fit best.\n\n**Answer: D**", "D"),
    ("Schizophrenia", "C"), ("The most likely diagnosis is schizophreniform disorder.", "B"),
    ("Either schizophrenia or schizoaffective disorder.", None),  # two option texts: ambiguous
    ("I am not sure.", None),
])
def test_knowledge_answer_extraction(reply, expected):
    assert (extract_letter(reply, OPTS) or option_from_text(reply, OPTS)) == expected


def test_short_option_texts_are_not_found_in_prose():
    roman = {"A": "i", "B": "ii", "C": "iii"}
    assert option_from_text("I am not sure which one.", roman) is None
    assert option_from_text("ii", roman) == "B"


@pytest.mark.parametrize("reply, expected", [
    ('{"answer_q1": "B", "answer_q2": "D"}', ("B", "D")),
    ('```json\n{"answer_q1": "a", "answer_q2": "(c)"}\n```', ("A", "C")),
    ("Q1: E\nQ2: B", ("E", "B")),
    ("Emotion: C\nCause: A", ("C", "A")),
    ("Answer: B/C", ("B", "C")),
    ('{"answer_q1": "A) Hurt", "answer_q2": "Hurt"}', ("A", None)),
    ("I think she feels hurt.", (None, None)),
])
def test_emotion_cause_parsing(reply, expected):
    assert parse_emotion_cause(reply) == expected


SWMH_VOCAB = {"depression": "depression", "suicidewatch": "SuicideWatch", "anxiety": "Anxiety",
              "bipolar": "bipolar", "off my chest": "offmychest", "offmychest": "offmychest"}


@pytest.mark.parametrize("reply, expected", [
    ('{"label": "SuicideWatch"}', "SuicideWatch"), ('{"label": "self.Anxiety"}', "Anxiety"),
    ('{"label": "PTSD"}', None), ("Label: bipolar\nExplanation: mood swings, not depression", "bipolar"),
    ("This reads like depression.", "depression"), ("Could be depression or anxiety.", None),
    ("Off my chest", "offmychest"),
])
def test_label_extraction(reply, expected):
    assert extract_label(reply, SWMH_VOCAB) == expected


# --- knowledge: the full real file through the fake OpenAI server -------------------------------------

def test_knowledge_full_file_through_fake_server(upstream, tmp_path):
    recs = [json.loads(x) for x in (upstream / "usmle-mental/USMLE-mental.jsonl").read_text().splitlines() if x]
    by_question = {r["question"]: r for r in recs}
    chosen = {}  # question -> letter the fake model means, or None when it answers unparsably

    def reply(body):
        prompt = body["messages"][-1]["content"]
        question = re.search(r"Question:\n(.*?)\n\nOptions:", prompt, re.S).group(1)
        rec = by_question[question]
        letters = sorted(rec["options"])
        k = h(question)
        letter = rec["answer"] if k % 3 else letters[(letters.index(rec["answer"]) + 1) % len(letters)]
        fmt = k % 7
        text = rec["options"][letter]
        if fmt == 4 and (re.match(r"\(?[A-J][.):]?(\s|$)", text) or len(text) < 2):
            fmt = 0
        chosen[question] = None if fmt in (5, 6) else letter
        return {0: f"Let me think.\nAnswer: {letter}", 1: f"({letter})", 2: f"{letter}. {text}",
                3: json.dumps({"answer": letter}), 4: text, 5: "I am not sure which one.",
                6: "Answer: Z"}[fmt]

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="reliability.knowledge",
                        suite="data", data_dir=str(upstream))
        _, res, _ = run_quiet(spec, tmp_path / "run")
        assert srv.n_requests == 727
    t = res.models["openai/fake"].tasks["reliability.knowledge"]
    # A dodged question is wrong: every item is scored, the dodges are counted as non-answers.
    scored = [(r, chosen[r["question"]] == r["answer"]) for r in recs]
    answered = [c for r, c in scored if chosen[r["question"]] is not None]
    assert t.n == 727 and t.n_unscored == 0 and t.n_errors == 0
    assert t.value == pytest.approx(np.mean([c for _, c in scored]))
    assert t.n_no_answer == 727 - len(answered)
    assert t.no_answer_reasons == {"no option letter or option text found in reply": 727 - len(answered)}
    assert t.metrics["answer_rate"].value == pytest.approx(len(answered) / 727)
    assert t.metrics["accuracy_answered"].value == pytest.approx(np.mean(answered))
    for step in ("step1", "step2"):
        vals = [c for r, c in scored if r["meta_info1"] == step]
        assert t.metrics[f"accuracy[step={step}]"].value == pytest.approx(np.mean(vals))
        assert t.metrics[f"accuracy[step={step}]"].n == len(vals)
    for cond in ("depression", "anxiety", "schizophrenia", "ocd"):
        vals = [c for r, c in scored if cond in r["meta_info2"]]
        assert t.metrics[f"accuracy[condition={cond}]"].value == pytest.approx(np.mean(vals))
    lo, hi = t.ci
    assert lo <= t.value <= hi
    # every prompt lists all of the question's options
    prompt = samples_of(tmp_path / "run", "reliability.knowledge")[0]["messages"][0]["content"]
    assert all(f"{k}. {v}" in prompt for k, v in recs[0]["options"].items())


def test_knowledge_dodging_does_not_pay(upstream, tmp_path):
    """10 USMLE items: 5 answered right, 5 dodged. Accuracy is 0.5, not 1.0; the dodges are shown."""
    recs = [json.loads(x) for x in (upstream / "usmle-mental/USMLE-mental.jsonl").read_text(encoding="utf-8")
            .splitlines()[:10]]
    lines = [{"task": "reliability.knowledge", "item_id": str(i),
              "response": f"Answer: {r['answer']}" if i < 5 else "I'd rather not guess."} for i, r in enumerate(recs)]
    replay = write_replay(tmp_path / "r.jsonl", lines)
    spec = run_spec(models=[f"replay/{replay}"], tasks="reliability.knowledge", suite="data",
                    data_dir=str(upstream), limit=10)
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models[spec.models[0]].tasks["reliability.knowledge"]
    assert t.n_samples == 10 and t.n_errors == 0
    assert t.value == 0.5 and t.trust_score == 50.0
    assert t.metrics["answer_rate"].value == 0.5 and t.metrics["accuracy_answered"].value == 1.0
    assert t.n == 10 and t.n_unscored == 0 and t.n_no_answer == 5
    assert t.no_answer_reasons == {"no option letter or option text found in reply": 5}
    # the report shows the dodges as their own column and marks the samples
    from trustmh.report.html import write_report
    html = write_report([tmp_path / "run"], tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<th>no answer</th>" in html and html.count('"st":"no_answer"') == 5
    assert "no answer: no option letter or option text found in reply" in html


def test_knowledge_out_of_range_letter_reason(upstream):
    task = Knowledge()
    item = next(i for i in task.method(RunContext()).load(DataSource(upstream, "data"), RunContext()) if len(i.input["options"]) == 5)
    sc = task.method(RunContext()).score(task.method(RunContext()).samples(item, RunContext())[0], "Answer: G", None, RunContext())
    # an answer off the options is the model's non-answer: wrong, with its reason
    assert sc.values == {"correct": 0.0, "answered": 0.0} and sc.no_answer == "answer G is not one of the options A-E"


# --- emotion recognition --------------------------------------------------------------------------

def test_emotion_accuracy_by_hand_and_languages(upstream, tmp_path):
    recs = [json.loads(x) for x in (upstream / "emobench/EU.jsonl").read_text(encoding="utf-8").splitlines() if x]
    en = [r for r in recs if r["language"] == "en"]
    L = "ABCDEFG"
    rng = np.random.default_rng(11)
    lines, expect = [], {}
    for r in en:
        e_gold = L[r["emotion_choices"].index(r["emotion_label"])]
        c_gold = L[r["cause_choices"].index(r["cause_label"])]
        e = e_gold if rng.random() < 0.7 else L[(L.index(e_gold) + 1) % 6]
        c = c_gold if rng.random() < 0.7 else L[(L.index(c_gold) + 1) % len(r["cause_choices"])]
        lines.append({"task": "reliability.emotion_recognition", "item_id": f"en:{r['qid']}",
                      "response": json.dumps({"answer_q1": e, "answer_q2": c})})
        expect[r["qid"]] = (e == e_gold, c == c_gold)
    lines[0]["response"] = "She probably feels upset."           # no letter: wrong, as EmoBench counts it
    lines[1]["response"] = '{"answer_q1": "A", "answer_q2": "H"}'  # cause H does not exist: wrong
    answered_only = [a and b for q, (a, b) in expect.items() if q not in (en[0]["qid"], en[1]["qid"])]
    expect[en[0]["qid"]] = (False, False)
    expect[en[1]["qid"]] = (en[1]["emotion_choices"][0] == en[1]["emotion_label"], False)
    replay = write_replay(tmp_path / "r.jsonl", lines)
    spec = run_spec(models=[f"replay/{replay}"], tasks="reliability.emotion_recognition", suite="data",
                    data_dir=str(upstream))
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models[spec.models[0]].tasks["reliability.emotion_recognition"]
    assert t.n == 200 and t.n_unscored == 0 and t.n_no_answer == 2
    assert t.no_answer_reasons == {"no emotion letter found in reply; no cause letter found in reply": 1,
                                   "cause answer H is not one of the options A-D": 1}
    assert t.value == pytest.approx(np.mean([a and b for a, b in expect.values()]))
    assert t.metrics["answer_rate"].value == pytest.approx(198 / 200)
    assert t.metrics["accuracy_answered"].value == pytest.approx(np.mean(answered_only))
    # the second item's emotion answer (A) is scored as given; its cause counts wrong
    assert t.metrics["emotion_accuracy"].value == pytest.approx(np.mean([a for a, _ in expect.values()]))
    assert t.metrics["emotion_accuracy"].n == 200 and t.metrics["cause_accuracy"].n == 200
    cats = collections.defaultdict(list)
    for r in en:
        if r["qid"] in expect:
            cats[r["coarse_category"]].append(all(expect[r["qid"]]))
    for cat, vals in cats.items():
        assert t.metrics[f"accuracy[category={cat}]"].value == pytest.approx(np.mean(vals))
        assert t.metrics[f"accuracy[category={cat}]"].n == len(vals)
    # --lang zh / all through RunSpec.lang
    for lang, n in (("zh", 200), ("all", 400)):
        _, r2, _ = run_quiet(run_spec(models=["baseline/random"], tasks="reliability.emotion_recognition",
                                      suite="data", data_dir=str(upstream), lang=lang),
                             tmp_path / lang)
        t2 = r2.models["baseline/random"].tasks["reliability.emotion_recognition"]
        assert t2.n == n and t2.n_samples == n
    assert t2.metrics["accuracy[lang=zh]"].n == 200
    with pytest.raises(UserError, match="--lang"):
        run_quiet(run_spec(models=["baseline/random"], tasks="reliability.emotion_recognition", suite="sample",
                           lang="fr"), tmp_path / "fr")


# --- diagnosis (SWMH is gated: project-made fixtures only) ------------------------------------------

def test_diagnosis_not_run_without_swmh(upstream, tmp_path):
    spec = run_spec(models=["baseline/random"], tasks="reliability.diagnosis,reliability.knowledge",
                    suite="data", data_dir=str(upstream), limit=1)
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models["baseline/random"].tasks["reliability.diagnosis"]
    assert t.status == "not run" and "swmh/test.csv" in t.reason and "huggingface.co" in t.reason


def test_diagnosis_macro_f1_matches_sklearn_on_fixture(tmp_path):
    labels = ["self.depression", "self.SuicideWatch", "self.Anxiety", "self.bipolar", "self.offmychest"]
    rows = [(f"Fixture post {i}: some days are harder than others.", labels[i % 5]) for i in range(40)]
    rows += [("Fixture post with an unknown forum.", "self.cooking"), ("   ", "self.depression")]
    data = tmp_path / "data"
    (data / "swmh").mkdir(parents=True)
    with (data / "swmh/test.csv").open("w", encoding="utf-8", newline="") as fh:
        import csv
        w = csv.writer(fh)
        w.writerow(["text", "label"])
        w.writerows(rows)
    names = ["depression", "SuicideWatch", "Anxiety", "bipolar", "offmychest"]
    rng = np.random.default_rng(5)
    preds, lines = {}, []
    for i, (_text, lab) in enumerate(rows):
        p = names[labels.index(lab)] if lab in labels and rng.random() < 0.6 else names[rng.integers(5)]
        preds[i] = p
        resp = json.dumps({"label": p}) if i % 2 else f"Answer: {p}"
        lines.append({"task": "reliability.diagnosis", "item_id": i, "response": resp})
    lines[3]["response"] = "It could be depression or anxiety."  # ambiguous
    lines[7]["response"] = '{"label": "PTSD"}'                     # outside the label set
    replay = write_replay(tmp_path / "r.jsonl", lines)
    spec = run_spec(models=[f"replay/{replay}"], tasks="reliability.diagnosis", suite="data", data_dir=str(data))
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models[spec.models[0]].tasks["reliability.diagnosis"]
    # Items 3 and 7 give no usable label: a miss for their gold class (sklearn sees a prediction outside
    # the label list), never left out. Only the two broken items are unscored.
    gold = [names[labels.index(rows[i][1])] for i in range(40)]
    pred = [preds[i] if i not in (3, 7) else "(no answer)" for i in range(40)]
    assert t.n == 40 and t.n_unscored == 2 and t.n_no_answer == 2
    assert t.no_answer_reasons == {"no single SWMH label found in reply": 1, "label 'PTSD' is not in the label set": 1}
    assert t.unscored_reasons == {"gold label 'self.cooking' is not an SWMH label": 1, "post is empty": 1}
    assert t.value == pytest.approx(f1_score(gold, pred, labels=names, average="macro"), abs=1e-12)
    per_class = f1_score(gold, pred, labels=names, average=None)
    for name, v in zip(names, per_class):
        assert t.metrics[f"f1[{name}]"].value == pytest.approx(v, abs=1e-12)
    assert t.metrics["accuracy"].value == pytest.approx(np.mean([g == p for g, p in zip(gold, pred)]))
    keep = [i for i in range(40) if i not in (3, 7)]
    assert t.metrics["answer_rate"].value == pytest.approx(38 / 40)
    assert t.metrics["macro_f1_answered"].value == pytest.approx(
        f1_score([gold[i] for i in keep], [pred[i] for i in keep], average="macro"), abs=1e-12)


def test_diagnosis_runs_on_sample_suite(tmp_path):
    _, res, _ = run_quiet(run_spec(models=["baseline/random"], tasks="reliability.diagnosis", suite="sample"),
                          tmp_path / "run")
    t = res.models["baseline/random"].tasks["reliability.diagnosis"]
    assert t.status == "ok" and t.n == 10 and t.value is not None


# --- support (ESConv) ------------------------------------------------------------------------------

def _esconv(upstream):
    return [json.loads(x) for x in (upstream / "esconv/test.json").read_text(encoding="utf-8").split("\n") if x.strip()]


def test_support_turn_sampling_is_seeded_and_well_formed(upstream):
    dialogues = _esconv(upstream)
    ds = DataSource(upstream, "data")
    a = Support().method(RunContext(seed=0)).load(ds, RunContext(seed=0))
    assert [i.id for i in a] == [i.id for i in Support().method(RunContext(seed=0)).load(ds, RunContext(seed=0))]
    b = Support().method(RunContext(seed=1)).load(ds, RunContext(seed=1))
    assert {i.id for i in a} != {i.id for i in b}
    per_dialogue = collections.Counter(i.id.split(":")[0] for i in a)
    assert len(per_dialogue) == 195 and set(per_dialogue.values()) == {2}
    for it in a:
        d, t = map(int, it.id.split(":"))
        dialog = dialogues[d]["dialog"]
        assert dialog[t]["speaker"] == "sys" and dialog[t - 1]["speaker"] == "usr"
        assert it.target == dialog[t]["text"]
        assert [c["text"] for c in it.input["context"]] == [x["text"] for x in dialog[max(0, t - 6):t]]
    assert pick_turns([3, 5, 9, 11], 0, 7) == pick_turns([3, 5, 9, 11], 0, 7)
    # perturbation touches the seeker's words only
    edited = Support().method(RunContext()).perturb(a[0], str.upper)
    for old, new in zip(a[0].input["context"], edited.input["context"]):
        assert new["text"] == (old["text"].upper() if old["speaker"] == "seeker" else old["text"])


def test_support_judged_through_fake_server(upstream, tmp_path):
    def scores(reference: str) -> dict:
        k = h(reference)
        s = {"fluency": k % 6, "professionalism": (k >> 3) % 6, "empathy": (k >> 6) % 6, "helpfulness": (k >> 9) % 6}
        if k % 5 == 0:
            s["empathy"] = 6  # out of range: that value only is unscored
        return s

    def reply(body):
        prompt = body["messages"][-1]["content"]
        if "Rate the reply" in prompt:
            reference = fenced(prompt, "reference")
            return json.dumps(scores(reference))
        return "That sounds really hard. What has been the toughest part for you?"

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, judge="openai/judge",
                        judge_base_url=srv.openai_base_url, tasks="reliability.support", suite="data",
                        data_dir=str(upstream), limit=30)
        _, res, _ = run_quiet(spec, tmp_path / "run")
        assert srv.n_requests == 60
    t = res.models["openai/fake"].tasks["reliability.support"]
    dialogues = _esconv(upstream)
    refs = {s["item_id"]: dialogues[int(s["item_id"].split(":")[0])]["dialog"][int(s["item_id"].split(":")[1])]["text"]
            for s in samples_of(tmp_path / "run", "reliability.support")}
    assert len(refs) == 30
    table = [scores(r) for r in refs.values()]
    for c in ("fluency", "professionalism", "empathy", "helpfulness"):
        vals = [s[c] for s in table if s[c] <= 5]
        assert t.metrics[c].value == pytest.approx(np.mean(vals)) and t.metrics[c].n == len(vals)
    full = [np.mean(list(s.values())) for s in table if s["empathy"] <= 5]
    assert t.value == pytest.approx(np.mean(full)) and t.n == len(full)
    n_bad = sum(s["empathy"] > 5 for s in table)
    assert n_bad > 0 and t.unscored_by_value["empathy"] == {"judge value for 'empathy' out of range 0-5": n_bad}


def test_support_rules_judge_leaves_ratings_unscored(tmp_path):
    _, res, _ = run_quiet(run_spec(models=["baseline/counselor"], tasks="reliability.support", suite="sample"),
                          tmp_path / "run")
    t = res.models["baseline/counselor"].tasks["reliability.support"]
    assert t.n == 0 and t.n_unscored == t.n_samples == 6 and t.value is None
    assert all("needs an LLM judge" in r for r in t.unscored_reasons)


# --- intervention (CPsyCounE) ---------------------------------------------------------------------

def test_intervention_per_dialogue_then_overall_by_hand(upstream, tmp_path):
    items = Intervention().method(RunContext()).load(DataSource(upstream, "data"), RunContext())
    assert len(items) == 296 and len({i.id for i in items}) == 296
    assert all(i.input["history"][-1]["speaker"] == "client" for i in items)
    dialogues = {i.meta["dialogue"] for i in items}
    assert len(dialogues) == 45
    rng = np.random.default_rng(3)
    gen, judge, expect = [], [], {}
    maxima = {"comprehensiveness": 2, "professionalism": 3, "authenticity": 3, "safety": 1}
    for k, it in enumerate(items):
        gen.append({"task": "reliability.intervention", "item_id": it.id, "response": "我理解你的感受。"})
        s = {c: int(rng.integers(0, m + 1)) for c, m in maxima.items()}
        text = json.dumps(s)
        if k % 37 == 0:
            s["safety"], text = None, json.dumps({**s, "safety": 3})  # out of range
        elif k % 41 == 0:
            s["authenticity"], text = None, json.dumps({**s, "authenticity": 1.5})  # not a whole number
        elif k % 53 == 0:
            s, text = {c: None for c in maxima}, "评分：很好"  # no JSON at all
        judge.append({"task": "reliability.intervention", "item_id": it.id, "response": text})
        expect[it.id] = (it.meta["dialogue"], s)
    g, j = write_replay(tmp_path / "g.jsonl", gen), write_replay(tmp_path / "j.jsonl", judge)
    spec = run_spec(models=[f"replay/{g}"], judge=f"replay/{j}", tasks="reliability.intervention", suite="data",
                    data_dir=str(upstream))
    _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models[spec.models[0]].tasks["reliability.intervention"]

    def per_dialogue_mean(value):
        per = collections.defaultdict(list)
        for d, s in expect.values():
            v = value(s)
            if v is not None:
                per[d].append(v)
        return np.mean([np.mean(v) for v in per.values()])

    for c in maxima:
        assert t.metrics[c].value == pytest.approx(per_dialogue_mean(lambda s: s[c]))
    overall = per_dialogue_mean(lambda s: None if None in s.values() else np.mean([s[c] / maxima[c] for c in maxima]))
    assert t.value == pytest.approx(overall)
    assert t.unscored_by_value["safety"]["judge value for 'safety' out of range 0-1"] == 8
    assert t.unscored_by_value["authenticity"]["judge value for 'authenticity' is not a whole number"] >= 1
    assert "judge reply has no JSON object" in t.unscored_by_value["comprehensiveness"]
    assert len(res.data["sha256"]) == 45  # every dialogue file read is checksummed


@pytest.mark.parametrize("language", [None, "", "fr", ["en"]])
def test_an_emobench_record_without_a_known_language_names_its_file_and_line(tmp_path, language):
    # EmoBench's prompts are per language (en, zh): a record of another was asked with a key of none (a
    # MethodError from the prompt file, found by tests/test_parsers_property.py), not named as bad data.
    from trustmh.tasks.reliability.common import read_emobench
    good = {"qid": "1", "language": "en", "scenario": "s", "subject": "P", "emotion_choices": ["Hurt", "Joy"],
            "emotion_label": "Hurt", "cause_choices": ["a", "b"], "cause_label": "a"}
    bad = {k: v for k, v in good.items() if k != "language"} | ({} if language is None else {"language": language})
    path = tmp_path / "EU.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad | {"qid": "2"}) + "\n", encoding="utf-8")
    for lang in ("all", "en", "zh"):
        with pytest.raises(UserError, match=rf"{re.escape(str(path))}:2: language must be one of en, zh"):
            read_emobench(path, lang)
    path.write_text(json.dumps(good) + "\n", encoding="utf-8")
    assert [it.id for it in read_emobench(path, "all")] == ["en:1"]
