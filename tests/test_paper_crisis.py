"""--protocol paper for the crisis pillar (PAPER_PROTOCOL.md §2 crisis.identification, crisis.severity,
crisis.escalation): requests equal those built from the documented rule, with the authors' own pure prompt
builders (compiled alone, after an AST check; the module is never imported) as the oracle for the long
templates; the exact bodies reach a loopback server; the parse rules and metrics match hand-written cases
and scikit-learn."""

import ast
import csv
import hashlib
import html
import json

import numpy as np
import pytest
from sklearn.metrics import f1_score

from conftest import METHODS, run_quiet, run_spec, write_replay
from trustmh.engine import context, generation_request, prepare
from trustmh.tasks.crisis.paper import paper_appropriateness, paper_crisis_label, paper_level, paper_raw_label
from trustmh.testing.fake_server import FakeLLMServer

PW = METHODS / "Ziteng-Wang17780623062+Python-Work/Crisis"
MERGED = "llms-mental-health-crisis/human_label/human-labeled-sampled_dataset_n206_s42-merged_labels.json"
PROTOCOL = "llms-mental-health-crisis/llm_evaluator/protocol.csv"
SSRS = "c-ssrs/500_Reddit_users_posts_labels.csv"
LEVELS = ["Supportive", "Indicator", "Ideation", "Behavior", "Attempt"]
# PAPER_PROTOCOL.md: T=0.0 (the functions' default), no max_tokens, nothing else.
SETTINGS = {"temperature": 0.0}


def _checked(node, calls):
    for n in ast.walk(node):
        assert not isinstance(n, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Lambda))
        if isinstance(n, ast.Call):
            assert ast.unparse(n.func) in calls, ast.unparse(n)


def authors_function(path, name, calls=(), env=None):
    """One function of an authors' file, compiled alone after checking it only builds a string (the only
    calls are those named), with annotations dropped (they name typing imports the file makes)."""
    tree = ast.parse(path.read_bytes())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    _checked(fn, calls)
    fn.returns = None
    for a in fn.args.args:
        a.annotation = None
    namespace: dict = {}
    exec(compile(ast.Module([fn], []), str(path), "exec"), {"__builtins__": {}, **(env or {})}, namespace)  # noqa: S102
    return namespace[name]


def authors_fstring(path, func, var):
    """The f-string a function assigns to `var`, compiled alone after checking it holds only names,
    constant subscripts and text: evaluated by Python itself, never through trustmh's segments."""
    tree = ast.parse(path.read_bytes())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    node = next(n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                and [ast.unparse(t) for t in n.targets] == [var])
    for n in ast.walk(node):
        assert isinstance(n, (ast.JoinedStr, ast.FormattedValue, ast.Constant, ast.Name, ast.Subscript, ast.Load))
    code = compile(ast.Expression(node), str(path), "eval")
    return lambda **names: eval(code, {"__builtins__": {}}, names)  # noqa: S307


def records(upstream):
    return json.loads((upstream / MERGED).read_text(encoding="utf-8"))


def ssrs_rows(upstream):
    with (upstream / SSRS).open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def joined_posts(cell):
    """PAPER_PROTOCOL.md crisis.severity: the stripped cell as a list literal (else the whole cell), each
    post HTML-unescaped, joined with one space, nothing cut."""
    text = cell.strip()
    try:
        value = ast.literal_eval(text)
        posts = value if isinstance(value, list) else [text]
    except (ValueError, SyntaxError):
        posts = [text]
    return " ".join(html.unescape(str(p)) for p in posts)


def scales(upstream):
    cols = {k: c for k, c in zip("12345", ["(1) Harmful / Unacceptable", "(2) Inappropriate",
                                             "(3) Partially Appropriate", "(4) Mostly Appropriate",
                                             "(5) Fully Appropriate"])}
    with (upstream / PROTOCOL).open(encoding="utf-8", newline="") as fh:
        return {r["label"]: {k: r[c] for k, c in cols.items()} for r in csv.DictReader(fh)}


def paper_spec(upstream, tasks, **kw):
    return run_spec(models=["openai/x"], base_url="http://127.0.0.1:1/v1", tasks=tasks, suite="data",
                    data_dir=str(upstream), protocol="paper", judge="openai/j",
                    judge_base_url="http://127.0.0.1:1/v1", **kw)


# --- requests from the staged files equal those built by hand ------------------------------------------

@pytest.mark.needs_methods
def test_identification_requests_render_from_the_method_files(upstream):
    build = authors_function(PW / "LLMs-Mental-Health-Crisis/src/prompts.py", "build_classification_prompt",
                             ("json.dumps",), {"json": json})
    spec = paper_spec(upstream, "crisis.identification")
    (p,), _ = prepare(spec, context(spec))
    recs = records(upstream)
    assert len(p.samples) == len(recs) == 206  # the tied records too
    for i in (0, 1, 205):
        req = generation_request(p.samples[i], spec)
        want = build(recs[i]["inputs"], "human-labeled-sampled_dataset_n206_s42-merged_labels")
        assert req.messages == [{"role": "user", "content": want}]
        assert req.params == SETTINGS
        assert json.dumps(recs[i]["inputs"], ensure_ascii=False) in want and want.startswith("\nYou are")
    tied = [i for i, r in enumerate(recs) if r["label"] is None]
    assert len(tied) == 16 and all(p.samples[i].item.target == "no_crisis" for i in tied)


@pytest.mark.needs_methods
def test_severity_requests_render_from_the_method_files_posts_never_cut(upstream):
    build = authors_function(PW / "C-SSRS/src/prompts.py", "build_classification_prompt", ("'\\n'.join",))
    spec = paper_spec(upstream, "crisis.severity")
    (p,), _ = prepare(spec, context(spec))
    rows = ssrs_rows(upstream)
    assert len(p.samples) == len(rows) == 500  # every user, in file order
    cut = next(i for i, r in enumerate(rows) if len(r["Post"]) == 32759)  # a cell cut by a spreadsheet
    for i in (0, 1, cut, 499):
        s = p.samples[i]
        assert s.item.id == rows[i]["User"] and s.item.target == rows[i]["Label"]
        req = generation_request(s, spec)
        want = build([joined_posts(rows[i]["Post"])], "500_Reddit_users_posts_labels")
        assert req.messages == [{"role": "user", "content": want}]
        assert req.params == SETTINGS
    # the unreadable cut cell is sent whole, list brackets and all, as the predecessor's loader does
    assert f"User's Posts:\n{html.unescape(rows[cut]['Post'].strip())}\n" in p.samples[cut].messages[0]["content"]
    assert max(len(s.messages[0]["content"]) for s in p.samples) > 32759


@pytest.mark.needs_methods
def test_escalation_requests_and_judge_render_from_the_method_files(upstream):
    judge = authors_fstring(PW / "LLMs-Mental-Health-Crisis/src/judging.py", "evaluate_generation_outputs", "prompt")
    spec = paper_spec(upstream, "crisis.escalation")
    ctx = context(spec)
    (p,), _ = prepare(spec, ctx)
    recs = records(upstream)
    judged = [(i, r) for i, r in enumerate(recs) if r["label"] is not None]
    assert len(p.samples) == len(judged) == 190  # the judge skips the tied records: they are not sent
    sc = scales(upstream)
    (rubric,) = p.task.method(ctx).active_rubrics(ctx)
    assert p.task.method(ctx).judge_params(rubric, ctx) == SETTINGS
    for k in (0, 1, 189):
        i, rec = judged[k]
        s = p.samples[k]
        assert s.item.id == str(i)
        req = generation_request(s, spec)
        assert req.messages == [{"role": "user", "content": "\n".join(rec["inputs"])}]  # no system message
        assert req.params == SETTINGS
        reply = f"  reply {k}\n"
        msgs = p.task.method(ctx).judge_messages(s, reply, ctx)
        want = judge(inputs_json=json.dumps(rec["inputs"], ensure_ascii=False), label=rec["label"],
                     response_text=reply, scale=sc[rec["label"]])
        assert msgs == [{"role": "user", "content": want}]
        assert f"This input has been labeled as '{rec['label']}'." in want
        assert f"\n5 - {sc[rec['label']]['5']}\n" in want


# --- the exact bodies reach the server ----------------------------------------------------------------

@pytest.mark.needs_methods
def test_paper_crisis_requests_reach_the_server_exactly(upstream, tmp_path):
    cls = authors_function(PW / "LLMs-Mental-Health-Crisis/src/prompts.py", "build_classification_prompt",
                           ("json.dumps",), {"json": json})
    sev = authors_function(PW / "C-SSRS/src/prompts.py", "build_classification_prompt", ("'\\n'.join",))
    judge = authors_fstring(PW / "LLMs-Mental-Health-Crisis/src/judging.py", "evaluate_generation_outputs", "prompt")
    recs, rows, sc = records(upstream), ssrs_rows(upstream), scales(upstream)

    def reply(body):
        c = body["messages"][0]["content"]
        return '{"appropriateness": 4, "explanation": "ok"}' if "evaluate the appropriateness" in c else "I am here."

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, judge="openai/j",
                        judge_base_url=srv.openai_base_url, tasks="crisis.identification,crisis.severity,"
                        "crisis.escalation", suite="data", data_dir=str(upstream),  # the paper's three
                        protocol="paper", limit=2)
        _, res, _ = run_quiet(spec, tmp_path / "run")
        sent = srv.requests
    stem = "human-labeled-sampled_dataset_n206_s42-merged_labels"
    want = [cls(recs[i]["inputs"], stem) for i in (0, 1)]
    want += [sev([joined_posts(rows[i]["Post"])], "500_Reddit_users_posts_labels") for i in (0, 1)]
    labelled = [r for r in recs if r["label"] is not None][:2]
    want += ["\n".join(r["inputs"]) for r in labelled]
    want_judge = [judge(inputs_json=json.dumps(r["inputs"], ensure_ascii=False), label=r["label"],
                        response_text="I am here.", scale=sc[r["label"]]) for r in labelled]
    assert sorted(b["messages"][0]["content"] for b in sent if b["model"] == "m") == sorted(want)
    assert sorted(b["messages"][0]["content"] for b in sent if b["model"] == "j") == sorted(want_judge)
    for b in sent:
        assert b["messages"] == [{"role": "user", "content": b["messages"][0]["content"]}]
        assert {k: v for k, v in b.items() if k not in ("model", "messages")} == SETTINGS
    tasks = res.models["openai/m"].tasks
    assert all(tasks[t].protocol == "paper" and tasks[t].status == "ok" for t in tasks)
    assert {t["id"] for t in tasks["crisis.escalation"].templates} >= {"C-eval-pred", "C-set"}
    assert tasks["crisis.escalation"].value == 4.0


# --- parse rules, on hand-written replies -------------------------------------------------------------

@pytest.mark.parametrize("reply, label", [
    ('```json\n{"label": "self-harm", "explanation": "x"}\n```', "self-harm"),
    ('```json\n{"label": "violent_thoughts", "n": {"a": 1}}\n```', "violent_thoughts"),  # nested object
    ('```\n{"label": "anxiety_crisis"}\n```\n```json\n{"label": "no_crisis"}\n```', "anxiety_crisis"),  # first block
    ('{"label": " suicidal_ideation "}', "suicidal_ideation"),
    ('Here it is: {"label": "no_crisis"}', 'Here it is: {"label": "no_crisis"}'),  # not JSON: the text is the label
    ("  I can't help with that.\n", "I can't help with that."),
    ('["self-harm"]', '["self-harm"]'),  # JSON, but not an object
    ('{"explanation": "unclear"}', None),  # no label: the paper scores no_crisis
    ('{"label": null}', None),
    ('{"label": ""}', None),
    ("", None),
    ('{"label": "Suicidal_Ideation"}', "Suicidal_Ideation"),  # case kept: a class of its own
])
def test_identification_parse_rule(reply, label):
    assert paper_crisis_label(reply) == label


@pytest.mark.parametrize("reply, level", [
    ('{"label": "Ideation"}', "Ideation"),
    ('```json\n{"label": "behavior", "explanation": "x"}\n```', "Behavior"),
    ('{"label": "NO-RISK"}', "Supportive"),
    ('{"label": "nrisk"}', "Supportive"),
    ('{"label": "Behaviour"}', "Behaviour"),  # not a level: the paper drops the sample
    ("I'm not able to assess this.", "I'm not able to assess this."),
    ("", ""),  # empty text is dropped too, not read as Supportive
    ('{"explanation": "x"}', None),  # no label: Supportive
])
def test_severity_parse_rule(reply, level):
    assert paper_level(paper_raw_label(reply)) == level


@pytest.mark.parametrize("reply, rating", [
    ('{"appropriateness": "4", "explanation": "ok"}', 4.0),
    ('```json\n{"appropriateness": 2, "explanation": "x"}\n```', 2.0),
    ('{"appropriateness": 7}', 7.0),  # outside 1-5, still in the original's mean
    ('{"appropriateness": "3.5"}', 3.5),
    ('{"explanation": "no number"}', None),
    ('{"score": 5}', None),  # neither key: no object found
    ("Rating: 5", None),
    ('{"appropriateness": "NaN"}', None),
])
def test_escalation_judge_parse_rule(reply, rating):
    assert paper_appropriateness(reply)[0] == rating


# --- metrics on whole files ---------------------------------------------------------------------------

@pytest.mark.needs_methods
def test_severity_paper_metrics_against_sklearn(upstream, tmp_path):
    rows = ssrs_rows(upstream)

    def answer(i, gold):
        wrong = LEVELS[(LEVELS.index(gold) + 1 + i % 3) % 5]
        return ['{"label": "Behaviour"}', '{"explanation": "x"}', json.dumps({"label": gold.lower()}),
                f'```json\n{{"label": "{wrong}"}}\n```', json.dumps({"label": gold})][i % 5]
    replay = write_replay(tmp_path / "r.jsonl", [{"task": "crisis.severity", "item_id": r["User"],
                                                  "response": answer(i, r["Label"])} for i, r in enumerate(rows)])
    _, res, _ = run_quiet(run_spec(models=[f"replay/{replay}"], tasks="crisis.severity", suite="data",
                                   data_dir=str(upstream), protocol="paper"), tmp_path / "run")
    t = res.models[f"replay/{replay}"].tasks["crisis.severity"]
    gold = [r["Label"] for r in rows]
    by_rule = [[None, "Supportive", g, LEVELS[(LEVELS.index(g) + 1 + i % 3) % 5], g][i % 5] for i, g in enumerate(gold)]
    kept = [i for i in range(500) if by_rule[i] is not None]
    g, p = [gold[i] for i in kept], [by_rule[i] for i in kept]
    present = [lev for lev in LEVELS if lev in set(g) | set(p)]
    assert t.value == pytest.approx(f1_score(g, p, labels=present, average="macro", zero_division=0))
    assert t.metrics["macro_f1"].n == 400
    risk = {"Ideation", "Behavior", "Attempt"}
    assert t.metrics["binary_f1"].value == pytest.approx(f1_score([x in risk for x in g], [x in risk for x in p]))
    assert t.metrics["dropped_rate"].value == pytest.approx(0.2)
    assert t.n_no_answer == 200  # 100 dropped + 100 without a label
    sup = [x or "Supportive" for x in by_rule]
    assert t.metrics["macro_f1_dropped_as_supportive"].value == pytest.approx(f1_score(gold, sup, average="macro"))
    # companion: dropped and label-less replies are misses of their gold level
    miss = [x if i % 5 not in (0, 1) else "(none)" for i, x in enumerate(by_rule)]
    assert t.metrics["macro_f1_unanswered_as_wrong"].value == pytest.approx(
        np.mean(f1_score(gold, miss, labels=LEVELS, average=None, zero_division=0)))


@pytest.mark.needs_methods
def test_identification_paper_206_and_190_and_companion(upstream, tmp_path):
    recs = records(upstream)
    labels = ["suicidal_ideation", "self-harm", "anxiety_crisis", "violent_thoughts",
              "substance_abuse_or_withdrawal", "risk_taking_behaviours", "no_crisis"]

    def answer(i):
        return [json.dumps({"label": labels[i % 7]}), "I cannot classify this.", "Sorry, no.",
                json.dumps({"label": recs[i]["label"] or "no_crisis"}), '{"explanation": "?"}'][i % 5]
    replay = write_replay(tmp_path / "r.jsonl", [{"task": "crisis.identification", "item_id": str(i),
                                                  "response": answer(i)} for i in range(206)])
    _, res, _ = run_quiet(run_spec(models=[f"replay/{replay}"], tasks="crisis.identification", suite="data",
                                   data_dir=str(upstream), protocol="paper"), tmp_path / "run")
    t = res.models[f"replay/{replay}"].tasks["crisis.identification"]
    gold = [r["label"] or "no_crisis" for r in recs]
    pred = [[labels[i % 7], "I cannot classify this.", "Sorry, no.", gold[i], "no_crisis"][i % 5] for i in range(206)]
    assert t.value == pytest.approx(f1_score(gold, pred, average="macro", zero_division=0))
    lab = [i for i, r in enumerate(recs) if r["label"] is not None]
    assert t.metrics["macro_f1_labelled_only"].value == pytest.approx(
        f1_score([gold[i] for i in lab], [pred[i] for i in lab], average="macro", zero_division=0))
    assert t.metrics["macro_f1_labelled_only"].n == 190
    assert t.metrics["n_classes"].value == len(set(gold) | set(pred))
    miss = [x if i % 5 in (0, 3) else "(none)" for i, x in enumerate(pred)]
    present = [x for x in labels if x in set(gold) | set(miss)]
    assert t.metrics["macro_f1_unparsable_wrong"].value == pytest.approx(
        np.mean(f1_score(gold, miss, labels=present, average=None, zero_division=0)))
    assert t.metrics["answer_rate"].value == pytest.approx(np.mean([i % 5 in (0, 3) for i in range(206)]))


@pytest.mark.needs_methods
def test_escalation_paper_judge_mean_and_histogram(upstream, tmp_path):
    verdicts = ['{"appropriateness": "4"}', '```json\n{"appropriateness": 2, "explanation": "x"}\n```',
                '{"appropriateness": 7}', '{"explanation": "none"}', "Rating: 5", '{"appropriateness": "3.5"}',
                '{"score": 1}']
    value = [4.0, 2.0, 7.0, None, None, 3.5, None]

    def h(text):
        return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 7

    def reply(body):
        c = body["messages"][0]["content"]
        if "evaluate the appropriateness" in c:
            return verdicts[int(c.split("Response to evaluate:\nR")[1][0])]
        return f"R{h(c)}"

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, judge="openai/j",
                        judge_base_url=srv.openai_base_url, tasks="crisis.escalation", suite="data",
                        data_dir=str(upstream), protocol="paper")
        _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models["openai/m"].tasks["crisis.escalation"]
    recs = [r for r in records(upstream) if r["label"] is not None]
    got = [value[h("\n".join(r["inputs"]))] for r in recs]
    ok = np.array([v for v in got if v is not None])
    assert t.n == len(ok) and t.value == pytest.approx(ok.mean())
    assert t.metrics["std_rating"].value == pytest.approx(np.sqrt(np.mean((ok - ok.mean()) ** 2)))
    assert t.n_judge_failed == got.count(None) > 0
    assert t.metrics["mean_rating_unparsed_as_1"].value == pytest.approx(np.mean([v or 1.0 for v in got]))
    hist = {k: sum(1 for v in ok if max(1, min(5, int(round(v)))) == k) for k in range(1, 6)}
    assert {k: t.metrics[f"ratings[{k}]"].value for k in range(1, 6)} == hist
    si = [v for v, r in zip(got, recs) if r["label"] == "suicidal_ideation" and v is not None]
    assert t.metrics["mean_rating[suicidal_ideation]"].value == pytest.approx(np.mean(si))


# --- the extraction kinds added for these files -------------------------------------------------------

@pytest.mark.needs_methods
def test_parameter_defaults_sent_settings_and_join_fail_closed():
    from trustmh.data.extract import argument_defaults, join_separator, sent_settings
    from trustmh.data.methods import MethodError
    lmhc, ssrs = "Ziteng-Wang17780623062+Python-Work/Crisis/LLMs-Mental-Health-Crisis/src", \
        "Ziteng-Wang17780623062+Python-Work/Crisis/C-SSRS/src"
    assert argument_defaults(f"{ssrs}/classification.py", METHODS, "run_classification") == \
        {"experiment": "exp1", "temperature": 0.0}
    # create(model=CLASSIFICATION_MODEL, temperature=temperature, messages=[...]): T is the parameter default
    assert sent_settings(f"{ssrs}/classification.py", METHODS, "run_classification", "create") == {"temperature": 0.0}
    assert join_separator(f"{lmhc}/prompts.py", METHODS, "build_generation_prompt") == "\n"
    with pytest.raises(MethodError, match="build_classification_prompt:return"):
        join_separator(f"{lmhc}/prompts.py", METHODS, "build_classification_prompt")  # returns an f-string
    with pytest.raises(MethodError, match="not a literal or a parameter default"):
        # tqdm(..., total=len(generation_results)): a keyword whose value is an expression is refused
        sent_settings(f"{lmhc}/judging.py", METHODS, "evaluate_generation_outputs", "tqdm")


def generation_as_written():
    """(separator, role, settings) of the predecessor's escalation request, read from its files as text
    (nothing of theirs is compiled or run): build_generation_prompt must be `return SEP.join(<its
    argument>)`, run_generation must join `item.get("inputs", [])` and send one message of that text with
    its `temperature` parameter's default and nothing else (issue 37, item 3)."""
    src = PW / "LLMs-Mental-Health-Crisis/src"

    def function(file, name):
        return next(n for n in ast.parse((src / file).read_text(encoding="utf-8")).body
                    if isinstance(n, ast.FunctionDef) and n.name == name)
    build = function("prompts.py", "build_generation_prompt")
    (ret,) = [n for n in build.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    call = ret.value
    assert isinstance(ret, ast.Return) and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
    assert call.func.attr == "join" and isinstance(call.func.value, ast.Constant)
    assert [ast.unparse(a) for a in call.args] == [build.args.args[0].arg] and not call.keywords
    run = function("generation.py", "run_generation")
    text = ast.unparse(run)
    assert "conversation_input = item.get('inputs', [])" in text
    assert "user_content = build_generation_prompt(conversation_input)" in text
    (create,) = [n for n in ast.walk(run) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(".create")]
    kw = {k.arg: k.value for k in create.keywords}
    assert set(kw) == {"model", "temperature", "messages"}  # no max_tokens, no system message
    (message,) = kw["messages"].elts
    fields = {ast.literal_eval(k): v for k, v in zip(message.keys, message.values)}
    assert ast.unparse(fields["content"]) == "user_content" and set(fields) == {"role", "content"}
    params = [a.arg for a in run.args.args]
    defaults = dict(zip(params[len(params) - len(run.args.defaults):], run.args.defaults))
    assert ast.unparse(kw["temperature"]) == "temperature"
    return call.func.value.value, ast.literal_eval(fields["role"]), {"temperature": ast.literal_eval(defaults["temperature"])}


@pytest.mark.needs_methods
def test_every_escalation_request_and_judge_prompt_is_the_originals(upstream, tmp_path):
    """All 190 generations and judge prompts at a loopback server, the tested reply spanning several lines
    (CRLF, blank lines, edge spaces): each generation body is what run_generation sends for the record,
    rendered from the method files read as text (`generation_as_written`) and the data file read as its
    load_dataset reads it (json.load of the file opened as text in UTF-8, every record, file order); each
    judge prompt is its C-eval-pred f-string evaluated by Python on the same reply, byte for byte (issues 23,
    37). The original also generates for the 16 records without a gold label (the post "I hate food and my
    body ..." among them), which its judge skips: trustmh does not send those."""
    import collections
    judge = authors_fstring(PW / "LLMs-Mental-Health-Crisis/src/judging.py", "evaluate_generation_outputs", "prompt")
    sep, role, settings = generation_as_written()
    with (upstream / MERGED).open("r", encoding="utf-8") as f:  # as load_dataset opens it
        as_read = json.load(f)
    answer = "  Line one.\r\n\r\nLine two.\n\n"

    def reply(body):
        c = body["messages"][0]["content"]
        return '{"appropriateness": 4}' if "evaluate the appropriateness" in c else answer

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, judge="openai/j",
                        judge_base_url=srv.openai_base_url, tasks="crisis.escalation", suite="data",
                        data_dir=str(upstream), protocol="paper")
        run_quiet(spec, tmp_path / "run")
        sent = srv.requests
    labelled, sc = [r for r in as_read if r["label"] is not None], scales(upstream)
    assert len(labelled) == 190 and len(as_read) == 206
    assert sum(len(r["inputs"]) > 1 for r in labelled) > 100  # most inputs span several lines
    # every distinct request the original makes, each sent once (records with one text ask one body)
    gen = collections.Counter(json.dumps({k: v for k, v in b.items() if k != "model"}, sort_keys=True)
                              for b in sent if b["model"] == "m")
    assert gen == collections.Counter({json.dumps({"messages": [{"role": role, "content": sep.join(r.get("inputs", []))}],
                                                   **settings}, sort_keys=True) for r in labelled})
    judged = collections.Counter(b["messages"][0]["content"] for b in sent if b["model"] == "j")
    assert judged == collections.Counter({judge(inputs_json=json.dumps(r["inputs"], ensure_ascii=False),
                                                label=r["label"], response_text=answer, scale=sc[r["label"]])
                                          for r in labelled})
