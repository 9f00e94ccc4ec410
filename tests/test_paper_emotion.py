"""--protocol paper for reliability.emotion_recognition (EmoBench EU): the requests rendered from EmoBench's
staged files equal requests built here by hand from the rules PAPER_PROTOCOL.md documents, reach an
OpenAI-compatible server exactly so (system + user, temperature 0.6 and nothing else), and the replies
are read and scored as EmoBench reads them (an unparsable reply: empty answers, wrong)."""

import json

import pytest
import yaml

from conftest import METHODS, run_quiet, run_spec
from trustmh.engine import context, generation_request, prepare
from trustmh.testing.fake_server import FakeLLMServer

# Written out by hand from configs/prompts.yaml sys.en, configs/response.yaml base.en (a folded scalar:
# its first line's trailing space plus the fold give two spaces) and EU.en, and utils.py's res_format.
SYSTEM_EN = (
    "# Instructions\n\n"
    "In this task, you are presented with a scenario, a question, and multiple choices. \n"
    "Carefully analyze the scenario and take the perspective of the individual involved.\n"
    "Then, select the option that best reflects their perspective or emotional response.\n\n"
    "# Output\n"
    "\nProvide only one single correct answer to this question.  Do not provide any additional information "
    "or explanations. The response should be in the following JSON format:\n"
    "\n```json\n    {\n    "
    '"answer_q1": "<Respond to the Question 1 with the corresponding letter numbering>",\n'
    '"answer_q2": "<Respond to the Question 2 with the corresponding letter numbering>"\n'
    "\n    }\n``` \n    ")


def user_en(rec):
    """EU.en by hand, with the choices one per line as 'A) text'."""
    def ranked(cs):
        return "\n".join(f"{'ABCDEFGH'[i]}) {c}" for i, c in enumerate(cs))
    return (f"## Scenario\n{rec['scenario']}\n\n## Question 1\nWhat emotion(s) would {rec['subject']} ultimately "
            f"feel in this situation?\n\n## Choices for Question 1\n{ranked(rec['emotion_choices'])}\n\n"
            f"## Question 2\nWhy would {rec['subject']} feel these emotions in this situation?\n\n"
            f"## Choices for Question 2\n{ranked(rec['cause_choices'])}\n")


def paper_spec(data, **kw):
    return run_spec(models=["openai/x"], base_url="http://127.0.0.1:1/v1", tasks="reliability.emotion_recognition",
                    suite="data", data_dir=str(data), protocol="paper", **kw)


@pytest.mark.needs_methods
def test_requests_render_from_the_method_files(upstream):
    recs = [json.loads(line) for line in (upstream / "emobench/EU.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    spec = paper_spec(upstream, lang="all")
    (p,), _ = prepare(spec, context(spec))
    assert p.not_run is None and len(p.samples) == len(recs) == 400
    en = [i for i, r in enumerate(recs) if r["language"] == "en"]
    zh = [i for i, r in enumerate(recs) if r["language"] == "zh"]
    assert len(en) == len(zh) == 200
    for i in (en[0], en[-1]):
        req = generation_request(p.samples[i], spec)
        assert req.messages == [{"role": "system", "content": SYSTEM_EN}, {"role": "user", "content": user_en(recs[i])}]
        assert req.params == {"temperature": 0.6}  # EB-set: no max_tokens for API models
    for i in (zh[0], zh[-1]):
        r = recs[i]
        sys_msg, user = generation_request(p.samples[i], spec).messages
        assert sys_msg["content"].startswith("# 说明\n")
        assert '"answer_q1": "<用相应的字母进行回答问题1>",\n' in sys_msg["content"]
        assert sys_msg["content"].endswith("\n    }\n``` \n    ")
        assert user["content"].startswith(f"## 场景\n{r['scenario']}\n")
        # the whole user message: EU.zh read here with yaml.safe_load, the choices ranked by hand
        ranked = {k: "\n".join(f"{'ABCDEFGH'[j]}) {c}" for j, c in enumerate(r[f"{k}_choices"]))
                  for k in ("emotion", "cause")}
        eu_zh = yaml.safe_load((METHODS / "Sahandfer+EmoBench/src/configs/prompts.yaml").read_bytes())["EU"]["zh"]
        assert user["content"] == eu_zh.format(scenario=r["scenario"], subject=r["subject"],
                                               emo_choices=ranked["emotion"], cause_choices=ranked["cause"])
        assert user["content"].endswith(f"D) {r['cause_choices'][3]}")  # the file's last line has no newline
        # gold letters as EB/data.py computes them: the index of the label in the choices
        assert p.samples[i].item.target == {"emotion": "ABCDEFGH"[r["emotion_choices"].index(r["emotion_label"])],
                                            "cause": "ABCDEFGH"[r["cause_choices"].index(r["cause_label"])]}


def test_trustmh_protocol_is_unchanged(upstream):
    spec = run_spec(models=["openai/x"], base_url="http://127.0.0.1:1/v1", tasks="reliability.emotion_recognition",
                    suite="data", data_dir=str(upstream), protocol="trustmh")
    (p,), _ = prepare(spec, context(spec))
    req = generation_request(p.samples[0], spec)
    assert [m["role"] for m in req.messages] == ["user"] and req.params.get("temperature") != 0.6


def test_replies_are_parsed_as_emobench_parses_them():
    from trustmh.tasks.reliability.paper_emotion_intervention import eb_parse
    cases = {'{"answer_q1": "A", "answer_q2": "B"}': {"answer_q1": "A", "answer_q2": "B"},
             'Sure!\n```json\n{"answer_q1": "C", "answer_q2": "D"}\n```\nDone': {"answer_q1": "C", "answer_q2": "D"},
             '```json\n{"answer_q1": "C"}': None,          # unclosed fence
             '```\n{"answer_q1": "C"}\n```': None,          # a fence without "json": the whole reply is not JSON
             'Answer: A/B': None, "": None, None: None,
             '[1, 2]': [1, 2]}
    for reply, want in cases.items():
        assert eb_parse(reply) == want, reply


def eu_dir(tmp_path):
    rows = [{"qid": "1", "language": "en", "coarse_category": "c1", "scenario": "S1", "subject": "Ann",
             "emotion_choices": ["Joy", "Anger"], "emotion_label": "Anger", "cause_choices": ["x", "y", "z"],
             "cause_label": "z"},
            {"qid": "2", "language": "en", "coarse_category": "c2", "scenario": "S2", "subject": "Bo",
             "emotion_choices": ["Joy", "Anger"], "emotion_label": "Joy", "cause_choices": ["x", "y"],
             "cause_label": "x"},
            {"qid": "3", "language": "en", "coarse_category": "c2", "scenario": "S3", "subject": "Cy",
             "emotion_choices": ["Joy", "Anger"], "emotion_label": "Joy", "cause_choices": ["x", "y"],
             "cause_label": "y"},
            {"qid": "4", "language": "en", "coarse_category": "c1", "scenario": "S4", "subject": "Di",
             "emotion_choices": ["Joy", "Anger"], "emotion_label": "Joy", "cause_choices": ["x", "y"],
             "cause_label": "x"}]
    d = tmp_path / "data"
    (d / "emobench").mkdir(parents=True)
    (d / "emobench/EU.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return d


@pytest.mark.needs_methods
def test_scores_reach_the_server_and_unparsable_counts_wrong(tmp_path):
    replies = {"S1": '```json\n{"answer_q1": "B", "answer_q2": "C"}\n```',  # both right
               "S2": '{"answer_q1": "A", "answer_q2": "b"}',                  # cause "b" != "B": wrong (exact match)
               "S3": "Emotion: A, cause: B",                                  # unparsable: wrong
               "S4": '{"answer_q1": "A", "answer_q2": "A"}'}                  # both right

    def reply(body):
        return next(r for k, r in replies.items() if f"## Scenario\n{k}\n" in body["messages"][1]["content"])

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, suite="data", data_dir=str(eu_dir(tmp_path)),
                        tasks="reliability.emotion_recognition", protocol="paper")
        _, res, _ = run_quiet(spec, tmp_path / "run")
        sent = srv.requests
    assert len(sent) == 4
    assert all(set(b) == {"model", "messages", "temperature"} and b["temperature"] == 0.6 for b in sent)
    assert all([m["role"] for m in b["messages"]] == ["system", "user"] and b["messages"][0]["content"] == SYSTEM_EN
               for b in sent)
    t = res.models["openai/m"].tasks["reliability.emotion_recognition"]
    assert t.protocol == "paper"
    assert t.value == pytest.approx(2 / 4)  # by hand: S1 and S4 right
    assert t.metrics["emotion_accuracy"].value == pytest.approx(3 / 4)  # S3 unparsable -> ""
    assert t.metrics["cause_accuracy"].value == pytest.approx(2 / 4)
    assert t.metrics["accuracy[category=c1]"].value == pytest.approx(1.0)
    assert t.metrics["accuracy[category=c2]"].value == pytest.approx(0.0)
    assert t.n_no_answer == 1


@pytest.mark.needs_methods
def test_qwen_models_get_emobenchs_no_think_prefix(tmp_path):
    """EB-qwen: EmoBench's init_prompt puts "/no_think" and a blank line (written here by hand from model.py
    l.40-41) in front of the system prompt when "qwen" is in the model's name, in any case; other models
    get the system prompt as it is. Each model's request is its own."""
    seen = []

    def reply(body):
        seen.append((body["model"], body["messages"][0]["content"]))
        return '{"answer_q1": "B", "answer_q2": "C"}'

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/Qwen/Qwen3-8B", "openai/llama-3"], base_url=srv.openai_base_url, suite="data",
                        data_dir=str(eu_dir(tmp_path)), tasks="reliability.emotion_recognition", protocol="paper")
        _, res, _ = run_quiet(spec, tmp_path / "run")
    assert len(seen) == 8
    assert {c for m, c in seen if m == "Qwen/Qwen3-8B"} == {"/no_think\n\n" + SYSTEM_EN}
    assert {c for m, c in seen if m == "llama-3"} == {SYSTEM_EN}
    qwen = res.models["openai/Qwen/Qwen3-8B"].tasks["reliability.emotion_recognition"]
    assert "EB-qwen" in {t["id"] for t in qwen.templates}


@pytest.mark.needs_methods
def test_yaml_extraction_fails_closed():
    from trustmh.data import extract_formats as extract
    from trustmh.data.methods import MethodError
    assert extract.yaml_value("Sahandfer+EmoBench/src/configs/response.yaml", METHODS, "EU", "zh").startswith('"answer_q1"')
    with pytest.raises(MethodError, match="no key 'fr'"):
        extract.yaml_value("Sahandfer+EmoBench/src/configs/prompts.yaml", METHODS, "sys", "fr")
    with pytest.raises(MethodError, match="not a text"):
        extract.yaml_value("Sahandfer+EmoBench/src/configs/prompts.yaml", METHODS, "sys")


@pytest.mark.needs_methods
def test_paper_protocol_runs_both_languages_by_default(upstream):
    """EmoBench's main.py runs --lang all unless told one: so does the paper protocol (trustmh's keeps en)."""
    spec = paper_spec(upstream)
    (p,), _ = prepare(spec, context(spec))
    langs = [s.item.meta["lang"] for s in p.samples]
    assert langs.count("en") == langs.count("zh") == 200
    spec = run_spec(models=["openai/x"], base_url="http://127.0.0.1:1/v1", tasks="reliability.emotion_recognition",
                    suite="data", data_dir=str(upstream), protocol="trustmh")
    (p,), _ = prepare(spec, context(spec))
    assert {s.item.meta["lang"] for s in p.samples} == {"en"}
    spec = paper_spec(upstream, lang="zh")
    (p,), _ = prepare(spec, context(spec))
    assert {s.item.meta["lang"] for s in p.samples} == {"zh"}


@pytest.mark.needs_methods
def test_en_zh_and_all_reported_with_emobenchs_names(tmp_path):
    d = eu_dir(tmp_path)
    zh = [{"qid": "1", "language": "zh", "coarse_category": "c1", "scenario": "Z1", "subject": "A",
           "emotion_choices": ["喜", "怒"], "emotion_label": "怒", "cause_choices": ["x", "y"], "cause_label": "y"},
          {"qid": "2", "language": "zh", "coarse_category": "c1", "scenario": "Z2", "subject": "B",
           "emotion_choices": ["喜", "怒"], "emotion_label": "喜", "cause_choices": ["x", "y"], "cause_label": "x"}]
    with (d / "emobench/EU.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in zh))
    right = {"S1": ("B", "C"), "S2": ("A", "B"), "S3": ("A", "A"), "S4": ("B", "B"), "Z1": ("B", "B"), "Z2": ("B", "A")}

    def reply(body):
        user = body["messages"][1]["content"]
        key = next(k for k in right if f"\n{k}\n" in user)
        return json.dumps({"answer_q1": right[key][0], "answer_q2": right[key][1]})

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, suite="data", data_dir=str(d),
                        tasks="reliability.emotion_recognition", protocol="paper")
        _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models["openai/m"].tasks["reliability.emotion_recognition"]
    # by hand: en S1 right, S2 wrong (cause), S3 wrong (cause), S4 wrong (emotion); zh Z1 right, Z2 wrong
    assert t.value == pytest.approx(2 / 6)
    assert t.metrics["accuracy[lang=en]"].value == pytest.approx(1 / 4) and t.metrics["accuracy[lang=en]"].n == 4
    assert t.metrics["accuracy[lang=zh]"].value == pytest.approx(1 / 2)
    assert t.paper["EU.zh.Overall"] == t.metrics["accuracy[lang=zh]"]
    assert t.paper["EU.en.c1"].value == pytest.approx(1 / 2) and t.paper["EU.en.c2"].value == 0.0
    assert t.paper["EU.zh.c1"].n == 2
