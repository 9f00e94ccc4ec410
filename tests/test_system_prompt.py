"""`trustmh run --system-prompt TEXT|@FILE`: the deployed assistant's system prompt goes first in every request
to the tested model and never to the judge, is recorded in the spec (so in every cache key and the run id;
a run without it keeps its id), and under --protocol paper a task whose request has a system message of its
own is not run, with the reason, while the others take it."""

import json

import pytest

from conftest import METHODS, run_here


PROMPT = "You are Sunny, the wellbeing assistant of Acme Health.\nNever give a diagnosis."


def _reply(body):
    if body["model"] == "judge":  # an ethics judge verdict, the five APA principles
        return json.dumps({f"sc{k}": 4 for k in range(1, 6)})
    return "Answer: A. I hear you; talking to someone you trust can help."


@pytest.fixture
def server(monkeypatch, fake_llm):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    return fake_llm(reply=_reply)


def _run(capsys, srv, out, *extra):
    return run_here(capsys, "run", "--model", "openai/assistant", "--base-url", srv.openai_base_url, "--judge",
               "openai/judge", "--judge-base-url", srv.openai_base_url, "--suite", "sample", "--tasks",
               "ethics", "--bootstrap", "0", "--no-progress", "--out", out, *extra)


def test_the_system_prompt_goes_first_to_the_model_and_never_to_the_judge(server, tmp_path, capsys):
    (tmp_path / "prompt.txt").write_text(PROMPT + "\n", encoding="utf-8")
    code, _, err = _run(capsys, server, tmp_path / "with", "--system-prompt", f"@{tmp_path / 'prompt.txt'}")
    assert code == 0, err
    gens = [b for b in server.requests if b["model"] == "assistant"]
    judged = [b for b in server.requests if b["model"] == "judge"]
    assert gens and judged
    # the file's text less its final line break, first, then the task's own messages unchanged
    assert all(b["messages"][0] == {"role": "system", "content": PROMPT} for b in gens)
    assert all(m["role"] != "system" for b in gens for m in b["messages"][1:])
    assert not any(PROMPT in json.dumps(b) for b in judged)
    spec = json.loads((tmp_path / "with" / "results.json").read_text())["spec"]
    assert spec["options"]["system_prompt"] == PROMPT

    # the same command again resumes: every request is stored, nothing is sent
    server.reset_counters()
    code, _, err = _run(capsys, server, tmp_path / "with", "--system-prompt", f"@{tmp_path / 'prompt.txt'}")
    assert code == 0 and server.n_requests == 0, err

    # without it: the task's own messages, a spec without the option, and another run id
    server.reset_counters()
    code, _, err = _run(capsys, server, tmp_path / "without")
    assert code == 0, err
    gens_without = [b for b in server.requests if b["model"] == "assistant"]
    assert len(gens_without) == len(gens)
    assert [b["messages"] for b in gens_without] == [b["messages"][1:] for b in gens]
    plain = json.loads((tmp_path / "without" / "results.json").read_text())
    assert "system_prompt" not in plain["spec"]["options"]
    from trustmh.engine import RunSpec
    with_spec = RunSpec.from_json({k: v for k, v in spec.items() if k != "task_origins"})
    plain_spec = RunSpec.from_json(plain["spec"])
    assert with_spec.run_id() != plain_spec.run_id()
    plain_spec.system_prompt = PROMPT
    assert plain_spec.run_id() == with_spec.run_id()  # the option is all that tells them apart


def test_a_system_prompt_file_that_cannot_be_used_is_a_usage_error(server, tmp_path, capsys):
    code, _, err = _run(capsys, server, tmp_path / "a", "--system-prompt", f"@{tmp_path / 'missing.txt'}")
    assert code == 2 and "system prompt file not found" in err
    (tmp_path / "blank.txt").write_text("  \n", encoding="utf-8")
    code, _, err = _run(capsys, server, tmp_path / "b", "--system-prompt", f"@{tmp_path / 'blank.txt'}")
    assert code == 2 and "--system-prompt is empty" in err
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe")
    code, _, err = _run(capsys, server, tmp_path / "c", "--system-prompt", f"@{tmp_path / 'bin.txt'}")
    assert code == 2 and "not valid UTF-8" in err
    code, _, err = _run(capsys, server, tmp_path / "d", "--system-prompt", f"@{tmp_path}")
    assert code == 2 and "must be a regular file" in err
    assert server.n_requests == 0  # all before anything is sent


def test_under_the_paper_protocol_a_task_with_its_own_system_message_is_refused(cli_here, server, upstream, tmp_path, capsys):
    if not METHODS.is_dir():
        pytest.skip(f"method files not found at {METHODS}")
    args = ("run", "--model", "openai/assistant", "--base-url", server.openai_base_url, "--judge", "rules",
            "--suite", "data", "--data-dir", upstream, "--methods-dir", METHODS, "--protocol", "paper",
            "--tasks", "reliability.emotion_recognition,crisis.identification", "--limit", "2", "--bootstrap", "0",
            "--no-progress", "--system-prompt", "Be kind.", "--out", tmp_path / "paper")
    code, out, err = cli_here(*args)
    assert code == 0, err
    res = json.loads((tmp_path / "paper" / "results.json").read_text())["models"]["openai/assistant"]["tasks"]
    emo = res["reliability.emotion_recognition"]
    assert emo["status"] != "ok" and "its own" in emo["reason"] and "--system-prompt" in emo["reason"]
    assert "reliability.emotion_recognition" in out and "--system-prompt refused" in out  # the summary says why
    assert res["crisis.identification"]["status"] == "ok"
    bodies = server.requests
    assert len(bodies) == 2 and all(b["messages"][0] == {"role": "system", "content": "Be kind."} for b in bodies)
    # the paper's own request follows it unchanged: one user message, as the original sends
    assert all([m["role"] for m in b["messages"]] == ["system", "user"] for b in bodies)


def test_a_task_s_own_system_message_follows_the_run_s_in_one_message():
    """trustmh's protocol (a plugin's task may have a system message): one system message, the deployment's
    first; without --system-prompt the task's messages are sent as they are."""
    from trustmh import Item, Sample
    from trustmh.engine import RunSpec, generation_request
    own = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Hello"}]
    sample = Sample(task="mine.x", item=Item(id="1", input={}), messages=own)
    spec = RunSpec(models=["baseline/counselor"], system_prompt="You are Sunny.")
    assert generation_request(sample, spec).messages == [
        {"role": "system", "content": "You are Sunny.\n\nAnswer in one word."}, {"role": "user", "content": "Hello"}]
    assert generation_request(sample, RunSpec(models=["baseline/counselor"])).messages == own


def test_a_run_whose_every_task_is_refused_says_why_and_exits_2(cli_here, server, upstream, tmp_path, capsys):
    if not METHODS.is_dir():
        pytest.skip(f"method files not found at {METHODS}")
    code, _, err = cli_here("run", "--model", "openai/assistant", "--base-url", server.openai_base_url, "--judge",
                       "rules", "--suite", "data", "--data-dir", upstream, "--methods-dir", METHODS, "--protocol",
                       "paper", "--tasks", "reliability.emotion_recognition", "--system-prompt", "Be kind.",
                       "--out", tmp_path / "none")
    assert code == 2 and "no task could run" in err and "--system-prompt refused" in err
    assert "has its data" not in err  # the data is there: the reason is the system prompt, and says so
    assert server.n_requests == 0
