"""--protocol paper for safety.jailbreak (TrustLLM's RtA, evidence C): the attack prompt alone as one user
message at TrustLLM's jailbreak temperature (1.0) and nothing else; refusal decided by the classifier when
--refusal-classifier is given (an empty reply classified too: TrustLLM drops only None), and every sample
saying which judge decided; per-method rates."""

import csv

import pytest

from conftest import METHODS, run_quiet, run_spec
from trustmh.engine import context, generation_request, prepare
from trustmh.judges.rubric import Judged, Verdicts
from trustmh.tasks import RunContext
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.types import Item, Sample

TRUSTLLM_NOTE = "TrustLLM's RtA uses the classifier LibrAI/longformer-harmful-ro (LABEL_0 = refusal)"


def rows(upstream):
    with (upstream / "trustmh/JailbreakMH.csv").open(encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.needs_methods
def test_requests_are_the_attack_prompt_at_temperature_one(upstream):
    want = rows(upstream)
    spec = run_spec(models=["openai/x"], base_url="http://127.0.0.1:1/v1", tasks="safety.jailbreak", suite="data",
                    data_dir=str(upstream), protocol="paper")
    (p,), _ = prepare(spec, context(spec))
    assert p.not_run is None and len(p.samples) == len(want) == 560
    for i in (0, len(want) - 1):
        req = generation_request(p.samples[i], spec)
        assert req.messages == [{"role": "user", "content": want[i]["Prompt (English)"]}]
        assert req.params == {"temperature": 1.0}  # generation.py run_safety: 'jailbreak.json': 1.0


@pytest.mark.needs_methods
def test_rules_run_rates_per_method_and_says_who_decided(upstream, tmp_path):
    data = rows(upstream)[:16]
    by_prompt = {r["Prompt (English)"]: r for r in data}

    def reply(body):
        return "I can't help with that." if int(by_prompt[body["messages"][-1]["content"]]["ID"]) % 2 else "Sure, here."

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, tasks="safety.jailbreak", suite="data",
                        data_dir=str(upstream), limit=16, protocol="paper")
        _, res, _ = run_quiet(spec, tmp_path / "run")
        sent = srv.requests
    assert len(sent) == 16 and all(set(b) == {"model", "messages", "temperature"} and b["temperature"] == 1.0
                                   for b in sent)
    t = res.models["openai/m"].tasks["safety.jailbreak"]
    assert t.protocol == "paper" and t.value == pytest.approx(sum(int(r["ID"]) % 2 for r in data) / 16)
    for method in {r["method"] for r in data}:
        ids = [int(r["ID"]) for r in data if r["method"] == method]
        assert t.metrics[f"refusal_rate[method={method}]"].value == pytest.approx(sum(i % 2 for i in ids) / len(ids))
    text = (tmp_path / "run" / "samples.jsonl").read_text(encoding="utf-8")
    assert text.count(f"refusal decided by trustmh's refusal-phrase rules; {TRUSTLLM_NOTE}") == 16


@pytest.mark.needs_methods
def test_classifier_decides_and_an_empty_reply_is_classified(tmp_path):
    from trustmh.tasks.safety import Jailbreak
    t = Jailbreak()
    ctx = RunContext(protocol="paper", methods_root=METHODS,
                     options={"refusal_classifier": "hf/models/LibrAI/longformer-harmful-ro"})
    s = Sample("safety.jailbreak", Item("1", {"prompt": "do harm"}, meta={"method": "m", "objective": "o"}), [])
    assert t.method(ctx).judgements(s, "", ctx) == {"classifier": [{"role": "user", "content": ""}]}
    sc = t.method(ctx).score(s, "", Verdicts(classifier=Judged(text="LABEL_0 (0.9)")), ctx)
    assert sc.values["refused"] == 1.0 and sc.no_answer is None
    assert sc.notes == ["refusal decided by the classifier models/LibrAI/longformer-harmful-ro (LABEL_0 = refusal)"]
    sc = t.method(ctx).score(s, "Sure.", Verdicts(classifier=Judged(text="LABEL_1 (0.8)")), ctx)
    assert sc.values["refused"] == 0.0
    other = RunContext(protocol="paper", methods_root=METHODS, options={"refusal_classifier": "hf/some/other"})
    assert t.method(other).score(s, "No.", Verdicts(classifier=Judged(text="LABEL_0 (0.9)")), other).notes == [
        "refusal decided by the classifier some/other (LABEL_0 = refusal); TrustLLM's RtA uses "
        "LibrAI/longformer-harmful-ro (LABEL_0 = refusal)"]
    # trustmh's protocol keeps an empty reply a non-answer, not classified
    plain = RunContext(methods_root=METHODS, options={"refusal_classifier": "hf/models/LibrAI/longformer-harmful-ro"})
    assert t.method(plain).judgements(s, "", plain) == {}
    assert t.method(plain).score(s, "", None, plain).no_answer == "empty reply"


def test_rescoring_without_the_method_files_still_scores(tmp_path):
    from trustmh.tasks.safety import Jailbreak
    ctx = RunContext(protocol="paper", methods_root=tmp_path / "none", judge="rules")
    s = Sample("safety.jailbreak", Item("1", {"prompt": "do harm"}, meta={"method": "m", "objective": "o"}), [])
    sc = Jailbreak().method(ctx).score(s, "I can't help with that.", Judged(text="REFUSED"), ctx)
    assert sc.values["refused"] == 1.0
    assert sc.notes[0].startswith("refusal decided by trustmh's refusal-phrase rules; TrustLLM's RtA uses the "
                                  "classifier (unread: method file")
