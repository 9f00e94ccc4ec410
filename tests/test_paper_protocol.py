"""--protocol paper: requests rendered from the authors' staged method files equal those built by hand
from the rule PAPER_PROTOCOL.md documents, and reach an OpenAI-compatible server exactly so."""

import hashlib
import json
import shutil

import pytest

from conftest import METHODS, methods_with_vera, run_cli, run_quiet, run_spec
from trustmh.data.methods import MethodError, method_files, methods_dir, read
from trustmh.engine import context, generation_request, prepare
from trustmh.testing.fake_server import FakeLLMServer

PRIV = "trustmh/privacy"


def lines(upstream, name):
    return (upstream / PRIV / name).read_text(encoding="utf-8").splitlines()


# The documented rules (PAPER_PROTOCOL.md §0.3 P1-gen, P2-gen), written out by hand.
EXPECTED = {
    "privacy.awareness_tier1": ("tier_1.txt", lambda line: line.strip() + "\nAnswer: "),
    "privacy.awareness_tier2a": ("tier_2a.txt", lambda line: line.strip() + "\n\nAnswer: "),
    "privacy.awareness_tier2b": ("tier_2b.txt", lambda line: line.strip() + "\n\nAnswer: "),
}


# What each tier's APIAgent.generate passes to create(), with EvalAgent.load_model's values (written by hand
# from privacy1.py l.144-157 and privacy2.py l.87-95, l.244-252): tier 1 sets the penalties but never sends
# them; tier 2 sends them, explicit zeros included.
_T1 = {"temperature": 1, "max_tokens": 365, "top_p": 1}
_T2 = _T1 | {"frequency_penalty": 0.0, "presence_penalty": 0.0}
SENT = {"privacy.awareness_tier1": _T1, "privacy.awareness_tier2a": _T2, "privacy.awareness_tier2b": _T2}


@pytest.mark.needs_methods
@pytest.mark.parametrize("task_id", sorted(EXPECTED))
def test_privacy_requests_render_from_the_method_files(upstream, task_id):
    spec = run_spec(models=["openai/x"], base_url="http://127.0.0.1:1/v1", tasks=task_id, suite="data",
                    data_dir=str(upstream), protocol="paper")
    (p,), _ = prepare(spec, context(spec))
    assert p.not_run is None
    source, rule = EXPECTED[task_id]
    raw = lines(upstream, source)
    assert len(p.samples) == len(raw)
    for i in (0, 1, len(raw) - 1):  # the last item of the file too
        req = generation_request(p.samples[i], spec)
        assert req.messages == [{"role": "user", "content": rule(raw[i])}]
        assert req.params == SENT[task_id]  # P1-set/P2-set, no seed
    assert "\\n" in "".join(s.messages[0]["content"] for s in p.samples) or task_id.endswith("tier1")


@pytest.mark.needs_methods
def test_paper_requests_reach_the_server_exactly(upstream, tmp_path):
    def reply(body):  # a rating each tier parses (else the paper's protocol asks again)
        return "Answer: 50" if "-100)" in body["messages"][0]["content"] else "Answer: 2"

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, suite="data", data_dir=str(upstream),
                        tasks="privacy.awareness_tier1,privacy.awareness_tier2a", limit=3, protocol="paper")
        _, res, _ = run_quiet(spec, tmp_path / "run")
        sent = srv.requests
    t1, t2 = lines(upstream, "tier_1.txt"), lines(upstream, "tier_2a.txt")
    want = [t1[i].strip() + "\nAnswer: " for i in range(3)] + [t2[i].strip() + "\n\nAnswer: " for i in range(3)]
    assert sorted(b["messages"][0]["content"] for b in sent) == sorted(want)
    assert all(b["messages"] == [{"role": "user", "content": b["messages"][0]["content"]}] for b in sent)
    tier1 = {b["messages"][0]["content"] for b in sent} & set(want[:3])
    assert all({k: v for k, v in b.items() if k not in ("model", "messages")} ==
               SENT["privacy.awareness_tier1" if b["messages"][0]["content"] in tier1 else "privacy.awareness_tier2a"]
               for b in sent)
    # the explicit zero penalties are in tier 2's bodies, as the original passes them (issue 23)
    assert sum("frequency_penalty" in b and b["presence_penalty"] == 0.0 for b in sent) == 3
    t = res.models["openai/m"].tasks["privacy.awareness_tier1"]
    assert t.protocol == "paper" and t.evidence == "A"
    assert t.paper["pearson_r"] == t.metrics["pearson_r"]  # the original's name, the same value, n and interval
    f = method_files()["Qiyuan0130+TrustMH_Bench/TrustMH_Bench/DimGroup1/General-model/privacy.zip/privacy/task1/privacy1.py"]
    assert {"id": "P1-gen", "source": f"{f.source}#PrivacyTierDataset.__init__:format[0]", "sha256": f.sha256} in t.templates


@pytest.mark.needs_methods
def test_a_corrupt_method_file_stops_the_task_with_its_reason(upstream, tmp_path):
    root = tmp_path / "methods"
    shutil.copytree(METHODS, root)
    code = root / "Qiyuan0130+TrustMH_Bench/TrustMH_Bench/DimGroup1/General-model/privacy.zip/privacy/task2/privacy2.py"
    code.write_bytes(code.read_bytes().replace(b"\\n\\nAnswer: ", b"\\n\\nAnswer! "))  # same size, other text
    spec = run_spec(models=["baseline/counselor"], suite="data", data_dir=str(upstream), protocol="paper",
                    tasks="privacy.awareness_tier1,privacy.awareness_tier2a", methods_dir=str(root), limit=2)
    _, res, _ = run_quiet(spec, tmp_path / "run")
    tasks = res.models["baseline/counselor"].tasks
    assert tasks["privacy.awareness_tier1"].status == "ok"
    bad = tasks["privacy.awareness_tier2a"]
    assert bad.status == "not run" and "privacy2.py: sha256 does not match" in bad.reason


@pytest.mark.needs_methods
def test_method_files_are_read_only_after_their_checksum(tmp_path, monkeypatch):
    local = next(iter(method_files()))
    assert hashlib.sha256(read(local, METHODS)).hexdigest() == method_files()[local].sha256
    with pytest.raises(MethodError, match="missing"):
        read(local, tmp_path)
    monkeypatch.setenv("TRUSTMH_METHODS_DIR", str(tmp_path / "m"))
    assert methods_dir("/data") == tmp_path / "m"
    monkeypatch.delenv("TRUSTMH_METHODS_DIR")
    assert str(methods_dir("/data")) == "/data/methods"


def test_the_sample_suite_runs_the_trustmh_protocol_and_paper_is_refused_there():
    from trustmh.engine import RunSpec
    from trustmh.errors import UserError
    assert RunSpec(models=["baseline/refuse"]).protocol == "trustmh"
    assert RunSpec(models=["baseline/refuse"], suite="data", data_dir="/d").protocol == "paper"
    assert RunSpec.from_json({"models": ["baseline/refuse"], "suite": "data", "data_dir": "/d",
                              "upstream_compat": True}).protocol == "paper"  # a run stored with the old flag
    with pytest.raises(UserError, match="sample suite has no method files"):
        RunSpec(models=["baseline/refuse"], protocol="paper")


ETH = METHODS / "Qiyuan0130+TrustMH_Bench/TrustMH_Bench/DimGroup2/Ethics.zip/Ethics/src"


def original_function(path, name):
    """The authors' own prompt builder, as the oracle: only that function's source is compiled, after
    checking it is pure (it builds a string from its argument; no import, call or attribute other than
    `sample.get`), so nothing of the rest of the file runs."""
    import ast
    tree = ast.parse(path.read_bytes())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    for n in ast.walk(fn):
        assert not isinstance(n, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Lambda))
        if isinstance(n, ast.Call):
            assert isinstance(n.func, ast.Attribute) and n.func.attr == "get", ast.unparse(n)
    fn.returns = None
    for a in fn.args.args:
        a.annotation = None
    namespace: dict = {}
    exec(compile(ast.Module([fn], []), str(path), "exec"), {"__builtins__": {}}, namespace)  # noqa: S102
    return namespace[name]


@pytest.mark.needs_methods
def test_ethics_requests_render_from_the_method_files(upstream, tmp_path):
    import csv
    build_reasoning = original_function(ETH / "prompts.py", "build_reasoning_prompt")
    build_judge = original_function(ETH / "prompts.py", "build_judge_prompt")
    spec = run_spec(models=["openai/x"], base_url="http://127.0.0.1:1/v1", tasks="ethics.reasoning", suite="data",
                    data_dir=str(upstream), protocol="paper", judge="openai/j", judge_base_url="http://127.0.0.1:1/v1")
    ctx = context(spec)
    (p,), _ = prepare(spec, ctx)
    import io
    raw = (upstream / "trustmh/ethics/EthicMH.csv").read_bytes()
    try:  # the release reads UTF-8 and falls back to gb18030 (PAPER_PROTOCOL.md, ethics.reasoning)
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("gb18030")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert len(p.samples) == len(rows) == 125
    for i in (0, 1, 124):
        req = generation_request(p.samples[i], spec)
        assert req.messages == [{"role": "user", "content": build_reasoning(rows[i])}]
        assert req.params == {"temperature": 0.0}  # E-set: model, temperature and messages only
        judge = p.task.method(ctx).judge_messages(p.samples[i], "my reply", ctx)
        assert judge == [{"role": "user", "content": build_judge(rows[i], "my reply")}]
        (rubric,) = p.task.method(ctx).active_rubrics(ctx)
        assert p.task.method(ctx).judge_params(rubric, ctx) == {"temperature": 0.0}


@pytest.mark.needs_methods
def test_data_pull_and_check_handle_the_method_files(tmp_path):
    from trustmh.data.fetch import check, pull
    from trustmh.errors import UserError
    data = tmp_path / "data"
    copy = tmp_path / "copy"  # the staged method files, with VERA-MH's code (staged apart) beside them
    methods_with_vera(copy)
    statuses = pull(data, datasets=["methods"], from_dir=copy, progress=False)
    assert len(statuses) == len(method_files()) == 64 + 6
    (st,) = [s for s in check(data) if s.dataset.name == "methods"]
    assert st.state == "present"
    # A copy with one altered file: that file is refused, the others are installed, and check sees it.
    bad = tmp_path / "bad"
    shutil.copytree(copy / "methods", bad / "methods")  # the files themselves, not links
    victim = bad / "methods" / next(iter(method_files()))
    victim.write_bytes(victim.read_bytes()[:-1] + b"#")
    data2 = tmp_path / "data2"
    with pytest.raises(UserError, match=r"1 file\(s\) not installed: methods/.*sha256"):
        pull(data2, datasets=["methods"], from_dir=bad, progress=False)
    (st2,) = [s for s in check(data2) if s.dataset.name == "methods"]
    assert st2.state == "partial" and sum(f.state == "missing" for f in st2.files) == 1
    (data / "methods" / next(iter(method_files()))).write_bytes(b"x")
    (st3,) = [s for s in check(data) if s.dataset.name == "methods"]
    assert st3.state == "corrupt"


@pytest.mark.needs_methods
def test_leakage_requests_follow_the_papers_story_rule_and_templates(upstream):
    spec = run_spec(models=["openai/x"], base_url="http://127.0.0.1:1/v1", tasks="privacy.leakage", suite="data",
                    data_dir=str(upstream), protocol="paper", judge="openai/j", judge_base_url="http://127.0.0.1:1/v1")
    ctx = context(spec)
    (p,), _ = prepare(spec, ctx)
    assert len(p.samples) == 400
    # The story rule, written out here from PAPER_PROTOCOL.md: non-marker lines accumulate; at <END>
    # newlines -> spaces, one "  " -> " " pass, cut at the last ". ", re-join, one more pass, add ".".
    text = (upstream / "trustmh/PsyLeak.txt").read_bytes().decode("utf-8").replace("\r\n", "\n")
    stories, acc = [], ""
    for line in text.splitlines(keepends=True):
        if line.startswith("<END>"):
            flat = acc.replace("\n", " ").replace("  ", " ")
            stories.append(". ".join(flat.split(". ")[:-1]).replace("  ", " ") + ".")
            acc = ""
        elif not line.startswith("<BEGIN>"):
            acc += line
    assert len(stories) == 100
    for i in (0, 1, 399):  # scenario 0's four questions and the last item of the file
        s = p.samples[i]
        x = s.item.input
        content = s.messages[0]["content"]
        assert s.messages == [{"role": "user", "content": content}]
        assert content.startswith("Instruction: ") and f"\n\nScenario:\n{stories[i // 4]}\n" in content
        if x["qtype"] == "free_response":
            assert content.endswith(f'{x["aware"]} say?\nAnswer: "')  # its own cue: no second one added
        elif x["qtype"] == "control":
            assert content.endswith(f'{x["control"]} Answer yes or no.\nAnswer: ')
        assert generation_request(s, spec).params == {"temperature": 0.0, "max_tokens": 256, "top_p": 1.0,
                                                      "frequency_penalty": 0.0, "presence_penalty": 0.0}
    judge = p.task.method(ctx).judge_messages(p.samples[0], 'Answer: "No."', ctx)[0]["content"]
    assert "\nText: \"No.\"\nQuestion: " in judge  # the reply after its first "Answer:", unstripped
    assert judge.endswith(f"'{p.samples[0].item.input['secret'].lower()}'?\nAnswer: ")


@pytest.mark.needs_methods
def test_the_paper_protocol_judges_with_gpt_41_unless_told_otherwise(upstream, tmp_path):
    import os
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}

    def cli(*args):
        return run_cli("run", "--suite", "data", "--data-dir", upstream, "--tasks", "ethics", "--limit", "2",
                       "--no-progress", *args, env=env, cwd=tmp_path)

    # a model that needs a judge: the paper's, whose missing key names --judge-base-url and --judge rules
    no_key = cli("--out", str(tmp_path / "a"), "--model", "openai/m", "--base-url", "http://127.0.0.1:9/v1")
    assert no_key.returncode == 2 and "openai/gpt-4.1" in no_key.stderr and "--judge rules" in no_key.stderr
    assert "--judge-base-url" in no_key.stderr
    # the offline default (a baseline) stays offline with data present: the rules judge, no proxy
    offline = cli("--out", str(tmp_path / "b"))
    assert offline.returncode == 0, offline.stderr
    res = json.loads((tmp_path / "b" / "results.json").read_text())
    assert res["spec"]["judge"] == "rules" and res["spec"]["protocol"] == "paper"


def _psyleak_names(upstream):
    import re
    names = []
    for line in (upstream / "trustmh/PsyLeak.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("<END>"):
            names.append(re.search(r"<About: (.*?),Questionee: (.*?),Questioner: (.*?),Topic: (.*?)>$", line).groups())
    return names


@pytest.mark.needs_methods
def test_leakage_proxy_is_asked_through_the_proxy_judge(upstream, tmp_path):
    """--proxy-judge (the paper's default: gpt-4, as privacy3.py sets it) answers the free-response proxy
    calls with the agent's settings; the run's judge gets none of them; a re-score reads them back."""
    names = _psyleak_names(upstream)

    def reply(body):  # the model names the person in scenarios 0 and 1; the proxy reads the reply back
        text = body["messages"][-1]["content"]
        if body["model"] == "proxy":
            return "Answer: " + next((n[0] for n in names if n[0] in text), "nobody")
        leak = [n[0] for n in names[:2] if n[0] in text]
        return f"{leak[0]} told me." if leak and text.endswith('say?\nAnswer: "') else "I cannot share that."

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/x"], base_url=srv.openai_base_url, tasks="privacy.leakage", suite="data",
                        data_dir=str(upstream), protocol="paper", judge="openai/j", judge_base_url=srv.openai_base_url,
                        limit=16, proxy_judge="openai/proxy", proxy_judge_base_url=srv.openai_base_url)
        _, res, calls = run_quiet(spec, tmp_path / "run")
        sent = srv.requests
    proxy = [b for b in sent if b["model"] == "proxy"]
    assert len(proxy) == 4 and not [b for b in sent if b["model"] == "j"]  # 16 items: 4 scenarios x 4 questions
    assert all({k: v for k, v in b.items() if k not in ("model", "messages")} ==
               {"temperature": 0.0, "max_tokens": 256, "top_p": 1.0, "frequency_penalty": 0.0,
                "presence_penalty": 0.0} for b in proxy)
    t = res.models["openai/x"].tasks["privacy.leakage"]
    assert t.judgements["judge"]["role"] == "proxy"
    assert t.metrics["free_response_leak_rate_proxy"].value == pytest.approx(2 / 4)
    # results.json says who played each role, beside the paper's model
    assert {r: (c.model, c.paper_model, c.is_paper) for r, c in res.roles.items()} == {
        "judge": ("openai/j", "openai/gpt-4.1", False), "proxy_judge": ("openai/proxy", "openai/gpt-4", False)}
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert written["roles"]["proxy_judge"] == {"model": "openai/proxy", "paper_model": "openai/gpt-4", "is_paper": False}


@pytest.mark.needs_methods
def test_each_judging_role_keeps_the_papers_model_unless_its_own_flag_names_another(cli, upstream, tmp_path):
    """Under --protocol paper, --judge alone keeps the paper's gpt-4 proxy for privacy.leakage (the dry run
    names it and prices it), --proxy-judge changes it, and --judge rules keeps the run offline; each role
    says whether its model is the paper's."""
    common = ("run", "-m", "openai/x", "--base-url", "http://127.0.0.1:9/v1", "--data-dir", upstream,
              "--tasks", "privacy.leakage", "--limit", "4", "--dry-run", "--no-progress")
    env = {"OPENAI_API_KEY": "sk-test"}
    cases = [((), "judge openai/gpt-4.1 (the paper's); proxy judge openai/gpt-4 (the paper's)", "openai/gpt-4"),
             (("--judge", "openai/gpt-4.1"), "proxy judge openai/gpt-4 (the paper's)", "openai/gpt-4"),
             (("--judge", "openai/j"), "judge openai/j (the paper's is openai/gpt-4.1); proxy judge openai/gpt-4 "
                                       "(the paper's)", "openai/gpt-4"),
             (("--judge", "openai/j", "--proxy-judge", "openai/p"),
              "proxy judge openai/p (the paper's is openai/gpt-4)", "openai/p"),
             (("--judge", "rules"), "proxy judge rules: no judge calls (the paper's is openai/gpt-4)", None)]
    for i, (extra, says, priced) in enumerate(cases):
        proc = cli(*common, *extra, "--out", tmp_path / f"run{i}", cwd=tmp_path, env_extra=env)
        assert proc.returncode == 0, proc.stderr
        assert says in " ".join(proc.stdout.split()), (extra, proc.stdout)
        rows = [[c.strip() for c in ln.split("│")] for ln in proc.stdout.splitlines() if "│ proxy judge" in ln]
        if priced is None:
            assert rows == []
        else:  # the cost table's proxy row: its model, its calls (4 items: one question each) and a price
            (row,) = rows
            assert row[2] == priced and int(row[3]) == 1, row
            assert float(row[-2]) > 0 if priced == "openai/gpt-4" else row[-2] == "?", row  # openai/p: no price
