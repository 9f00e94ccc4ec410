"""crisis.conversation's requests, read off the wire of a loopback server that plays the simulated person,
the tested model and the judge with scripted turns.

Under --protocol paper every request must be what VERA-MH's code (f813d29) builds for the same persona and
replies. The expected texts are rendered here from the staged files themselves, independently of trustmh's
extraction (a regular expression over the source, not data/extract.py's syntax tree), and VERA-MH's code is
never run: the persona's system prompt is personas.tsv through csv.DictReader into the template's
str.format (generate_conversations/utils.py:36-46), its first input the literal of
conversation_simulator.py:70, each later input the other side's last message alone; the judge's system
prompt the preamble formatted with the transcript as conversation_utils.py writes it, and each question the
f-string of llm_judge.py:387-394. Under --protocol trustmh: the whole history in the right roles, the
settings pinned, the stop phrase from the third message on."""

import csv
import json
import re
from pathlib import Path

import pytest
from conftest import methods_with_vera, run_quiet, run_spec

from trustmh.testing.fake_server import FakeLLMServer

PERSONA = "Lena"


def script(body: dict) -> str:
    """Scripted replies by role (the model name): deterministic in what each is sent."""
    msgs, who = body["messages"], body["model"]
    last = msgs[-1]["content"]
    if who == "person":
        k = sum(m["role"] == "assistant" for m in msgs) + 1
        return "Thank you, I'm done." if "STOP" in last else f"person line {k} after {len(last)} chars"
    if who == "bot":
        return f"bot reply to: {last[:30]}"
    # the judge: a choice question gets its first option, a yes/no question No
    m = re.search(r"Please answer with one of: \[(.*)\]", last)
    if m:
        opts = m[1].split(", ")
        return f"ANSWER: {opts[0] if opts[:2] != ['Yes', 'No'] else 'No'}\nREASONING: scripted"
    opts = re.findall(r"^- (.+)$", last, re.M)
    if opts:
        return f"ANSWER: {opts[0] if opts[:2] != ['Yes', 'No'] else 'No'}\nREASONING: scripted"
    if "FIRST_HARM" in last:
        return "FIRST_HARM: none\nFIRST_HELP: 2\nREASONING: scripted"
    return "ANSWER: Kept\nREASONING: scripted"


def _run(tmp_path, srv, protocol, **options):
    data = tmp_path / "data"
    data.mkdir()
    (data / "vera-mh").symlink_to(Path(__file__).resolve().parents[2] / "shared/data/external/vera-mh")
    url = srv.openai_base_url
    spec = run_spec(models=["openai/bot"], base_url=url, judge="openai/judge", judge_base_url=url,
                    tasks="crisis.conversation", suite="data", data_dir=str(data), protocol=protocol,
                    methods_dir=str(methods_with_vera(tmp_path)),
                    personas=PERSONA, runs=1, user_model="openai/person", user_model_base_url=url, **options)
    out = tmp_path / "run"
    run_quiet(spec, out)
    return out, [b for b in srv.requests]


def _sent(requests, model):
    return [b for b in requests if b["model"] == model]


def test_paper_requests_are_what_vera_mh_builds(tmp_path, vera):
    with FakeLLMServer(reply=script) as srv:
        out, sent = _run(tmp_path, srv, "paper", turns=6)
    src = (vera / "method/generate_conversations/conversation_simulator.py").read_text()
    start = re.search(r"current_message = '([^']*)'", src)[1]
    with open(vera / "data/personas.tsv", encoding="utf-8", newline="") as fh:
        row = next(r for r in csv.DictReader(fh, delimiter="\t") if r["Name"] == PERSONA)
    persona_prompt = (vera / "data/persona_prompt_template.txt").read_text(encoding="utf-8").format(**row)
    runner = (vera / "method/generate_conversations/runner.py").read_text()
    system = re.search(r'get\("system_prompt", "([^"]*)"\)', runner)[1]

    person, bot, judge = _sent(sent, "person"), _sent(sent, "bot"), _sent(sent, "judge")
    assert len(person) == 3 and len(bot) == 3  # 6 messages, the person first, no stop rule
    for body in person + bot + judge:  # VERA-MH sends no sampling setting to any role
        assert set(body) <= {"model", "messages"}, body.keys()
    # Each side: its own system prompt and the other side's last message alone (no history).
    assert person[0]["messages"] == [{"role": "system", "content": persona_prompt}, {"role": "user", "content": start}]
    said = [script(person[0])]
    for k in range(3):
        assert bot[k]["messages"] == [{"role": "system", "content": system}, {"role": "user", "content": said[-1]}]
        said.append(script(bot[k]))
        if k < 2:
            assert person[k + 1]["messages"] == [{"role": "system", "content": persona_prompt},
                                                 {"role": "user", "content": said[-1]}]
            said.append(script(person[k + 1]))
    # The judge: the preamble formatted with the transcript as conversation_utils.format_conversation_summary
    # writes it, and each question as llm_judge.py's f-string, walked from Q4.
    transcript = "".join(f"{'user:' if i % 2 == 0 else 'chatbot:'} {t}\n" + ("\n" if i < len(said) - 1 else "")
                         for i, t in enumerate(said))
    preamble = (vera / "data/rubric_prompt_beginning.txt").read_text(encoding="utf-8").format(conversation=transcript)
    judge_src = (vera / "method/judge/llm_judge.py").read_text()
    fstring = re.search(r'prompt = f"""(.*?)"""', judge_src, re.S)[1]
    with open(vera / "data/rubric.tsv", encoding="utf-8", newline="") as fh:
        rubric = list(csv.DictReader(fh, delimiter="\t"))
    questions = {r["Question ID"]: r for r in rubric if r["Question ID"]}

    def expected(qid):
        r = questions[qid]
        i = rubric.index(r)
        options = [o["Answer"].strip() for o in [r] + [x for x in rubric[i + 1:i + 5]] if o["Answer"].strip()]
        options = options[:1 + next((n for n, x in enumerate(rubric[i + 1:]) if x["Question ID"]), 0)]
        examples = r["Examples"].strip()
        return (fstring.replace("{question_text}", r["Question"].strip())
                .replace('{f"Examples/Context: {examples_text}" if examples_text else ""}',
                         f"Examples/Context: {examples}" if examples else "")
                .replace("{options_str}", ", ".join(options or ["Yes", "No"])))

    # The scripted judge picks the first option of a choice and No otherwise: Q4 "makes statements" -> 5,
    # No -> 7 -> 8, No through 12 -> 13, first option "denies" -> 25, No through 37.
    path = ["4", "5", "7", "8", "9", "10", "11", "12", "13", *map(str, range(25, 38))]
    assert len(judge) == len(path)
    for body, qid in zip(judge, path):
        assert body["messages"] == [{"role": "system", "content": preamble}, {"role": "user", "content": expected(qid)}]
    res = json.loads((out / "results.json").read_text())["models"]["openai/bot"]["tasks"]["crisis.conversation"]
    assert res["protocol"] == "paper" and res["value"] == 100.0  # all Best Practice: (50 + 100/2) * 1


def test_trustmh_sends_history_in_roles_pinned_settings_and_stops_on_the_phrase(tmp_path, vera):
    def reply(body):
        msgs = body["messages"]
        if body["model"] == "person":
            k = sum(m["role"] == "assistant" for m in msgs) + 1
            # the phrase at message 2 does not stop the conversation; at message 3 it does
            return "Thank you, I'm done." if k in (2, 3) else f"person line {k}"
        return script(body)

    with FakeLLMServer(reply=reply) as srv:
        out, sent = _run(tmp_path, srv, "trustmh", turns=10)
    person, bot = _sent(sent, "person"), _sent(sent, "bot")
    assert len(person) == 3 and len(bot) == 2  # stopped by the phrase at the person's third message
    said = ["person line 1", script(bot[0]), "Thank you, I'm done.", script(bot[1])]
    assert bot[0]["messages"][1:] == [{"role": "user", "content": said[0]}]
    assert bot[1]["messages"][1:] == [{"role": "user", "content": said[0]}, {"role": "assistant", "content": said[1]},
                                      {"role": "user", "content": said[2]}]
    assert bot[0]["messages"][0]["role"] == "system"
    opening = person[0]["messages"]
    assert [m["role"] for m in opening] == ["system", "user"]
    assert person[2]["messages"][2:] == [{"role": "assistant", "content": said[0]}, {"role": "user", "content": said[1]},
                                         {"role": "assistant", "content": said[2]}, {"role": "user", "content": said[3]}]
    # Pinned and recorded: the person at temperature 1 with a seed per run, the model at the run's settings.
    assert person[0]["temperature"] == 1.0 and person[0]["max_tokens"] == 400 and person[0]["seed"] == 1
    assert bot[0]["temperature"] == 0.0 and bot[0]["max_tokens"] == 1024
    line = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
    rec = json.loads(line["response"])
    assert rec["ended"] == "stop_phrase" and len(rec["turns"]) == 5
    assert rec["user_settings"] == {"temperature": 1.0, "max_tokens": 400, "seed": 1}
    # The judge reads the transcript numbered and fenced.
    judge = _sent(sent, "judge")
    assert any("[person 3] Thank you, I'm done." in b["messages"][0]["content"] for b in judge)


@pytest.mark.parametrize("protocol", ["paper", "trustmh"])
def test_the_runs_system_prompt_replaces_the_models_default_one(tmp_path, vera, protocol):
    mine = "You are Sam, the support line's assistant."
    with FakeLLMServer(reply=script) as srv:
        out, sent = _run(tmp_path, srv, protocol, turns=4, system_prompt=mine)
    bot = _sent(sent, "bot")
    assert len(bot) == 2 and all(b["messages"][0] == {"role": "system", "content": mine} for b in bot)
    assert all(sum(m["role"] == "system" for m in b["messages"]) == 1 for b in bot)
    assert all(mine not in json.dumps(b) for b in _sent(sent, "person"))  # the person never sees it
    res = json.loads((out / "results.json").read_text())["models"]["openai/bot"]["tasks"]["crisis.conversation"]
    assert res["status"] == "ok"
