"""Bad input, property-based: every parser of model output, judge output, replay files and data files,
fed arbitrary and adversarial input, either returns a well-formed result, an unscored value with a reason,
or raises a DataError/UserError naming the file: never any other exception (a traceback for the user).

Every registered task is covered through its own `score`, `judge_messages`, `rules_judge` and `load`, so
tasks added later are tested too. Figures (examples tried) go to docs/reliability.md."""

import functools
import json
import math
import os
import re
import shutil
import string
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from trustmh.data import loaders
from trustmh.errors import UserError
from trustmh.judges import parsing
from trustmh.models.replay import ReplayModel
from trustmh.engine import data_source, RunSpec
from conftest import METHODS
from trustmh.tasks import TASKS as REGISTERED
from trustmh.tasks import Judged, RunContext, Verdicts, resolve_tasks
from trustmh.tasks.privacy.common import TIER1_PHRASES, TIER2_PHRASES, parse_psyleak
from trustmh.types import Score

# 100 per parser (hypothesis's own default) keeps the suite within its budget; in CI the examples are the
# same every run (conftest's profile). TRUSTMH_HYPOTHESIS_EXAMPLES=5000 searches harder.
EXAMPLES = int(os.environ.get("TRUSTMH_HYPOTHESIS_EXAMPLES", "100"))
# function_scoped_fixture: `figures` is meant to persist across a test's examples (it counts them).
HEALTH = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
FAST = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=HEALTH)
TASKS = [cls() for _, cls in sorted(REGISTERED.items())]  # every task, those run by name only too
SAMPLE_ROOT = Path(data_source(RunSpec(models=["baseline/refuse"])).root)

# Keys judges and models are asked for, so generated JSON often looks nearly right.
KEYS = sorted({k for t in TASKS for k in (*t.metric_columns, *t.metric_columns.values(), t.primary_value)}
              | {"choice", "answer", "label", "rating", "score", "reasoning", "sc1", "sc2", "sc3", "sc4", "sc5",
                 "refused", "safe", "overall", "empathy", "emotion", "cause", "level", "category"})
# What a strict parser must survive: numbers Python will not convert, nesting it will not recurse into.
ADVERSARIAL = [
    '{"choice": ' + "9" * 5000 + "}", '{"sc1": 1' + "0" * 400 + "}", '{"rating": 1e999}', '{"answer": NaN}',
    "[" * 5000, '{"a":' * 3000, "```json\n" + '{"label": ' * 2000 + "\n```", "Answer: " + "9" * 5000,
    "Answer: 1" + "0" * 400 + ")", "\x00\ufeff\u202e" * 50, "Answer:" * 1000, "{" + "}" * 1000, "",
]

scalars = (st.none() | st.booleans() | st.integers(min_value=-10**500, max_value=10**500)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
           | st.sampled_from(["A", "B", "yes", "no", "4", "-50", "1.5", "NaN", "5/5", " 3 "]))
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=4)
                           | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), c, max_size=6),
                           max_leaves=15)


@st.composite
def replies(draw):
    """Model or judge output: prose, near-miss JSON (bare, fenced, after prose), answer tags, adversarial."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.text(max_size=300))
    if kind == 1:
        body = json.dumps(draw(json_values))
        return draw(st.sampled_from(["{}", "```json\n{}\n```", "Sure! {}\nHope this helps.", "{}}}"])).format(body)
    if kind == 2:
        tag = draw(st.sampled_from(["Answer:", "answer is", "Label:", "Choice:", "**Answer**:", "Rating:"]))
        return f"{draw(st.text(max_size=40))} {tag} {draw(st.text(string.printable, max_size=20))}"
    if kind == 3:
        return draw(st.sampled_from(ADVERSARIAL))
    return " ".join(draw(st.lists(st.sampled_from(
        ["yes", "no", "A", "(B)", "C.", "4)", "-50", "very sensitive", "strongly agree", "not", "I", "can't", "help",
         "Answer:", "{", "}", "\n", "suicidal", "depression", "none", "crisis"]), max_size=20)))


# --------------------------------------------------------------------------------------------------
# judges/parsing.py

@FAST
@given(text=replies())
def test_extract_json_object(text, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    obj = parsing.extract_json_object(text)
    assert obj is None or isinstance(obj, dict)


@FAST
@given(text=replies(), letters=st.lists(st.sampled_from("ABCDEFGH"), min_size=1, max_size=6, unique=True))
def test_extract_letter(text, letters, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    got = parsing.extract_letter(text, letters)
    assert got is None or got in letters
    for x in letters:  # and the plain forms are always read
        assert parsing.extract_letter(f"Answer: {x}", letters) == x
        assert parsing.extract_letter(json.dumps({"choice": x}), letters) == x


@FAST
@given(text=replies(), tier=st.sampled_from([((4, 3, 2, 1), TIER1_PHRASES), ((-100, -50, 0, 50, 100), TIER2_PHRASES)]))
def test_parse_scale_rating(text, tier, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    allowed, phrases = tier
    got = parsing.parse_scale_rating(text, allowed, dict(phrases))
    assert got is None or got in allowed
    # A later 'Answer:' would rightly take precedence, and lines led by scale points are an echoed scale.
    # Words of the scale after the number that name another point make it no rating ("4) not too sensitive").
    tail = re.sub(r"(?i)answer", "", text[:20]).replace("\n", " ")
    named = {value for phrase, value in phrases if re.search(rf"\b{re.escape(phrase)}\b", tail.lower())}
    for v in allowed:
        got = parsing.parse_scale_rating(f"Answer: {v}) {tail}", allowed, dict(phrases))
        assert got == v if named <= {v} else got in (v, None)


@FAST
@given(text=replies())
def test_parse_yes_no(text, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    assert parsing.parse_yes_no(text) in (None, "yes", "no")


@FAST
@given(obj=st.none() | st.dictionaries(st.sampled_from(KEYS), json_values, max_size=8), text=replies(),
       keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=5, unique=True),
       bounds=st.sampled_from([(1, 5), (0, 1), (0, 5), (-100, 100)]))
def test_parse_int_scores(obj, text, keys, bounds, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    lo, hi = bounds
    for candidate in (obj, parsing.extract_json_object(text)):
        values, reasons = parsing.parse_int_scores(candidate, keys, lo, hi)
        assert set(values) | set(reasons) == set(keys) and not set(values) & set(reasons)
        assert all(math.isfinite(v) and lo <= v <= hi for v in values.values())
        assert all(isinstance(r, str) and r for r in reasons.values())


@FAST
@given(text=replies())
def test_extract_label(text, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    vocab = {"suicidal ideation": "suicidal", "self-harm": "self_harm", "no crisis": "none", "crisis": "crisis",
             "depression": "depression"}
    assert parsing.extract_label(text, vocab) in (None, *vocab.values())


# --------------------------------------------------------------------------------------------------
# Every task's scoring of arbitrary replies and judge replies

def context(paper: bool) -> RunContext:
    return RunContext(protocol="paper" if paper else "trustmh", methods_root=METHODS if paper else None)


@functools.lru_cache(maxsize=None)
def task_samples(task_id: str, upstream_compat: bool):
    task = next(t for t in TASKS if t.id == task_id)
    ctx = context(upstream_compat)
    return [s for it in task.method(ctx).load(data_source(RunSpec(models=["x/y"])), ctx) for s in task.method(ctx).samples(it, ctx)]


SCORABLE = [t for t in TASKS if not t.missing_files(data_source(RunSpec(models=["x/y"])))]


@functools.lru_cache(maxsize=None)
def protocols(task_id: str) -> tuple[bool, ...]:
    """The protocols (paper: True) whose items the sample suite can give this task: the paper's support
    task reads the whole ESConv corpus, which the sample suite does not hold."""
    from trustmh.data.methods import MethodError
    out = [False]
    try:
        task_samples(task_id, True)
        out.append(True)
    except MethodError:
        pass
    return tuple(out)


def verdicts_of(rules) -> list[Judged]:
    return list(rules.values()) if isinstance(rules, Verdicts) else [rules]


@pytest.mark.parametrize("task", SCORABLE, ids=lambda t: t.id)
@settings(max_examples=max(1, EXAMPLES * 3 // 10), deadline=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_every_task_scores_any_reply_or_says_why_not(task, data, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    compat = data.draw(st.sampled_from(protocols(task.id)), label="upstream_compat")
    ctx = context(compat)
    samples = task_samples(task.id, compat)
    sample = data.draw(st.sampled_from(samples), label="sample")
    reply = data.draw(replies(), label="reply")
    judged = None
    if task.uses_judge:
        for msgs in task.method(ctx).judgements(sample, reply, ctx).values():
            assert all(isinstance(m["content"], str) for m in msgs)
        rules = task.method(ctx).rules_judge(sample, reply, ctx)
        assert all(isinstance(v, Judged) and (v.text is not None or v.reason) for v in verdicts_of(rules))
        kind = data.draw(st.sampled_from(["text", "rules", "error"]), label="judged")
        judged = Verdicts({r.name: {"text": Judged(text=data.draw(replies(), label="judge reply")),
                                    "rules": rules.get(r.name, Judged(reason="no rules verdict"))
                                    if isinstance(rules, Verdicts) else rules,
                                    "error": Judged(reason="judge error: timeout")}[kind]
                           for r in task.method(ctx).active_rubrics(ctx)})
    sc = task.method(ctx).score(sample, reply, judged, ctx)
    assert isinstance(sc, Score)
    for name, v in sc.values.items():
        assert isinstance(v, float) and math.isfinite(v), (name, v)
    for name, why in sc.unscored.items():
        assert isinstance(why, str) and why, name
    if task.primary_value not in sc.values:
        assert sc.unscored.get(task.primary_value), "a primary value left out needs a reason"
    outcome = "scored" if task.primary_value in sc.values else "unscored_with_reason"
    figures[outcome] = figures.get(outcome, 0) + 1
    assert isinstance(task.method(ctx).labels(sample, sc), dict)


# --------------------------------------------------------------------------------------------------
# Replay files and data files

def file_with(data: bytes) -> Path:
    fd, name = tempfile.mkstemp(suffix=".jsonl")
    with open(fd, "wb") as fh:
        fh.write(data)
    return Path(name)


def assert_names_the_file(e: UserError, path: Path) -> None:
    assert str(e).startswith(str(path)) and re.match(r"^(:\d+)?: \S", str(e)[len(str(path)):]), str(e)


records = st.fixed_dictionaries({}, optional={"task": scalars | st.just("privacy.awareness_tier1"),
                                              "item_id": scalars, "variant": scalars, "response": scalars})
lines = (st.builds(json.dumps, records) | st.builds(json.dumps, json_values) | st.text(max_size=60)
         | st.sampled_from(ADVERSARIAL)).map(lambda s: s.replace("\n", " ").encode()) | st.binary(max_size=60)


@FAST
@given(body=st.lists(lines, max_size=6))
def test_replay_file_loads_or_names_file_and_line(body, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    path = file_with(b"\n".join(body))
    try:
        model = ReplayModel(f"replay/{path}", str(path))
    except UserError as e:
        assert_names_the_file(e, path)
    else:
        for (task, item_id, variant), (resp, lineno) in model.records.items():
            assert all(isinstance(x, str) for x in (task, item_id, variant, resp)) and lineno >= 1
    finally:
        path.unlink()


@FAST
@given(data=st.binary(max_size=300) | lines | st.lists(lines, max_size=6).map(b"\n".join))
def test_data_readers_return_well_formed_or_name_the_file(data, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    path = file_with(data)
    try:
        for read in (loaders.read_lines, loaders.read_floats, lambda p: list(loaders.read_jsonl(p)),
                     loaders.read_json, lambda p: loaders.read_csv(p, ["a"]),
                     lambda p: parse_psyleak(p, loaders.read_text(p))):
            try:
                out = read(path)
            except UserError as e:
                assert_names_the_file(e, path)
                continue
            if read is loaders.read_floats:
                assert all(math.isfinite(x) for x in out)
        assert isinstance(loaders.read_ethicmh_text(path), str)  # decodes anything, by design
    finally:
        path.unlink()


@st.composite
def mutations(draw, original: bytes):
    """A damaged copy of a real data file."""
    lines_ = original.split(b"\n")
    k = draw(st.integers(0, max(0, len(original) - 1)))
    i = draw(st.integers(0, max(0, len(lines_) - 1)))
    kind = draw(st.sampled_from(["truncate", "insert", "drop line", "dup line", "replace line", "utf16", "empty",
                                 "huge line", "flip"]))
    if kind == "truncate":
        return original[:k]
    if kind == "insert":
        return original[:k] + draw(st.binary(min_size=1, max_size=20)) + original[k:]
    if kind == "drop line":
        return b"\n".join(lines_[:i] + lines_[i + 1:])
    if kind == "dup line":
        return b"\n".join(lines_[:i + 1] + lines_[i:])
    if kind == "replace line":
        return b"\n".join(lines_[:i] + [draw(lines)] + lines_[i + 1:])
    if kind == "utf16":
        return original.decode("utf-8", "replace").encode("utf-16")
    if kind == "empty":
        return b""
    if kind == "huge line":
        return b"\n".join(lines_[:i] + [b"x" * 300_000] + lines_[i:])
    return original[:k] + bytes([original[k] ^ 0xFF]) + original[k + 1:] if original else original


@pytest.fixture(scope="module")
def sample_copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample") / "data"
    shutil.copytree(SAMPLE_ROOT, root)
    return root


LOADABLE = [t for t in SCORABLE if t.files]


@pytest.mark.parametrize("task", LOADABLE, ids=lambda t: t.id)
@settings(max_examples=max(1, EXAMPLES // 5), deadline=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_every_task_loads_damaged_data_or_names_the_file(task, sample_copy, data, figures):
    figures["examples"] = figures.get("examples", 0) + 1
    from trustmh.tasks import DataSource
    rel = data.draw(st.sampled_from(task.files), label="file")
    path = sample_copy / rel
    original = (SAMPLE_ROOT / rel).read_bytes()
    damaged = data.draw(mutations(original), label="damage")
    assume(damaged != original)
    path.write_bytes(damaged)
    try:
        ctx = context(data.draw(st.sampled_from(protocols(task.id)), label="upstream_compat"))
        try:
            items = task.method(ctx).load(DataSource(sample_copy, "data"), ctx)
        except UserError as e:
            assert str(path) in str(e) or any(str(sample_copy / f) in str(e) for f in task.files), str(e)
            figures["clear_error"] = figures.get("clear_error", 0) + 1
            return
        figures["loaded"] = figures.get("loaded", 0) + 1
        ids = [it.id for it in items]
        assert len(ids) == len(set(ids)), "item ids must stay unique"
        for it in items:  # what loaded must also prompt
            for s in task.method(ctx).samples(it, ctx):
                assert all(isinstance(m["content"], str) for m in s.messages)
    finally:
        path.write_bytes(original)


@given(st.text(alphabet="ab _-é1٣.²xY\n", max_size=14), st.text(alphabet="ab _-é1٣.²xY", min_size=1, max_size=4))
@settings(max_examples=1000, deadline=None)
def test_option_text_found_as_the_whole_word_pattern_finds_it(answer, phrase):
    # knowledge's option_from_text looks for option texts without a regex per option: same answers.
    from trustmh.tasks.reliability.common import _names
    assert _names(answer, phrase) == (re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", answer) is not None)
