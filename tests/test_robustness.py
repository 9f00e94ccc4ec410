"""Robustness tasks on the real files through loopback fakes: drops recomputed here from what the fakes
were told to answer; the clean run is the base task's own request (paid once); only the person's text
changes; a lower-is-better toy base task checks signs and unscored pairs."""

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score

import trustmh
from conftest import fenced, run_quiet, run_spec
from trustmh.errors import UserError
from trustmh.scoring.metrics import Table, mean
from trustmh.engine import RunSpec, generation_request
from trustmh.tasks import TASKS, DataSource, MetricSpec, RunContext, Task
from trustmh.tasks.robustness.paper import paper_keys
from trustmh.tasks.robustness import _Robustness, selected_perturbations
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.types import Item, Score
from trustmh.variants.perturb import IRRELEVANT_SENTENCES, perturbations

SAMPLE_ROOT = Path(trustmh.__file__).parent / "data" / "sample"
CRISIS = "llms-mental-health-crisis/human_label/human-labeled-sampled_dataset_n206_s42-merged_labels.json"


def tag(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def lines_of(run_dir: Path, task: str) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "samples.jsonl").read_text().splitlines()) if r["task"] == task]


def between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


# --- robustness.support ---------------------------------------------------------------------------

class SupportFakes:
    """Model: 'GOOD' when every seeker line is an original ESConv seeker turn, else 'BAD' (each reply made
    unique by a hash of its prompt, so equal bodies mean a call paid twice). Judge: helpfulness depends on
    the reference turn, one point less for a BAD reply; the other criteria are fixed (4, 3, 3)."""

    def __init__(self, esconv: Path):
        dialogues = [json.loads(x) for x in esconv.read_text(encoding="utf-8").splitlines() if x.strip()]
        self.dialogues = dialogues
        self.seeker = {t["text"] for d in dialogues for t in d["dialog"] if t["speaker"] == "usr"}

    @staticmethod
    def base(reference: str) -> int:
        return 2 + len(reference) % 3

    def __call__(self, body) -> str:
        prompt = body["messages"][-1]["content"]
        if "Rate the reply" in prompt:
            reply, reference = fenced(prompt, "reply"), fenced(prompt, "reference")
            helpful = self.base(reference) - (1 if reply.startswith("BAD") else 0)
            return json.dumps({"fluency": 4, "professionalism": 3, "empathy": 3, "helpfulness": helpful})
        return f"{'GOOD' if self.is_clean(prompt) else 'BAD'} {tag(prompt)}"

    def is_clean(self, prompt: str) -> bool:
        seekers = [ln[len("Seeker: "):] for ln in prompt.split("\n") if ln.startswith("Seeker: ")]
        return all(s in self.seeker for s in seekers)

    def clean_score(self, item_id: str) -> float:
        d, t = map(int, item_id.split(":"))
        return (4 + 3 + 3 + self.base(self.dialogues[d]["dialog"][t]["text"])) / 4


def test_support_drops_clean_run_paid_once_and_reused(upstream, tmp_path, monkeypatch):
    from trustmh.engine._endpoint import Endpoint
    # Each sample's own request is counted here: two identical ones in flight together are otherwise sent
    # once (tests/test_single_flight.py), as many times as they happen to overlap.
    monkeypatch.setattr(Endpoint, "flight_key", lambda self, request, key: key)
    # 6 items of 3 dialogues: 3 clusters, under the 5 an interval needs (issue 44); the paired-bootstrap check
    # below is about the draws, so it lowers the minimum here (the widening under 30 clusters still applies)
    from trustmh.scoring import metrics
    monkeypatch.setattr(metrics, "MIN_CLUSTERS", 2)
    fakes = SupportFakes(upstream / "esconv" / "test.json")
    common = dict(models=["openai/fake"], judge="openai/judge", suite="data", data_dir=str(upstream), limit=6)
    with FakeLLMServer(reply=fakes) as srv:
        url = dict(base_url=srv.openai_base_url, judge_base_url=srv.openai_base_url)
        # Both tasks in one run: the 6 clean requests are shared.
        _, res, _ = run_quiet(run_spec(tasks="reliability.support,robustness.support", **url, **common),
                              tmp_path / "both")
        t = res.models["openai/fake"].tasks["robustness.support"]
        base = res.models["openai/fake"].tasks["reliability.support"]
        n_perturbed = t.n_samples - 6
        assert base.n_samples == 6 and 6 * 25 < n_perturbed <= 6 * 30
        assert srv.n_requests == 2 * (6 + n_perturbed)
        sent = [r["messages"][-1]["content"] for r in srv.requests]
        assert len({p for p in sent if "Rate the reply" not in p and fakes.is_clean(p)}) == 6
        assert sum(1 for p in sent if "Rate the reply" not in p and fakes.is_clean(p)) == 6
        assert sum(1 for p in sent if "Rate the reply" in p and fenced(p, "reply").startswith("GOOD")) == 6
        # Two perturbations can give an item the same prompt (e.g. one word repeated at low and medium
        # intensity of a short turn); those are separate variants, asked separately. Nothing else repeats.
        perturbed = [json.dumps(r["messages"]) for r in lines_of(tmp_path / "both", "robustness.support")
                     if r["variant"]]
        assert srv.duplicate_paid_calls() == 2 * (len(perturbed) - len(set(perturbed)))
        # The base task alone, then robustness in the same run directory: only perturbed prompts are sent.
        run_quiet(run_spec(tasks="reliability.support", **url, **common), tmp_path / "seq")
        srv.reset_counters()
        _, res2, _ = run_quiet(run_spec(tasks="robustness.support", **url, **common), tmp_path / "seq",
                               force=True)  # another task set on purpose: its clean replies are in the store
        assert srv.n_requests == 2 * n_perturbed
        assert not any(r["messages"][-1]["content"].startswith("GOOD") for r in srv.requests)
        assert res2.models["openai/fake"].tasks["robustness.support"].metrics == t.metrics

    rows = lines_of(tmp_path / "both", "robustness.support")
    clean = {r["item_id"]: r for r in rows if r["variant"] == ""}
    assert len(clean) == 6 and all(r["response"].startswith("GOOD") for r in clean.values())
    assert all(r["response"].startswith("BAD") for r in rows if r["variant"])
    assert base.value == pytest.approx(np.mean([fakes.clean_score(i) for i in clean]))
    m = t.metrics
    assert m["clean"].value == pytest.approx(base.value)
    rel = []
    for p in perturbations():
        paired = [r["item_id"] for r in rows if r["variant"] == p.key]
        if not paired:
            assert p.key.startswith("sentence_shuffle") and f"drop[{p.key}]" not in m
            continue
        # BAD costs exactly one helpfulness point = 0.25 overall, on every item
        assert m[f"drop[{p.key}]"].value == pytest.approx(0.25)
        assert m[f"drop[{p.key}]"].n == len(paired)
        rel.append(0.25 / np.mean([fakes.clean_score(i) for i in paired]))
    assert t.value == pytest.approx(np.mean(rel))
    assert m["drop[char_delete@high]"].n == 6 and m["drop[word]"].value == pytest.approx(0.25)
    # paired bootstrap: every resample of items sees the same 0.25 drop, while clean scores vary
    assert t.n_clusters == 3 and m["drop[char_swap@high]"].ci == pytest.approx((0.25, 0.25))
    assert m["clean"].ci[1] > m["clean"].ci[0]


def test_clean_sample_is_the_base_request_and_only_seeker_text_changes(upstream):
    ctx = RunContext(seed=3)
    spec = RunSpec(models=["openai/x"], seed=3)
    data = DataSource(upstream, "data")
    base, robust = TASKS["reliability.support"](), TASKS["robustness.support"]()
    items = robust.method(ctx).load(data, ctx)[:10]
    assert [i.id for i in items] == [i.id for i in base.method(ctx).load(data, ctx)[:10]]
    for item in items:
        samples = robust.method(ctx).samples(item, ctx)
        (clean,) = [s for s in samples if s.variant == ""]
        (ref,) = base.method(ctx).samples(item, ctx)
        assert generation_request(clean, spec) == generation_request(ref, spec)
        assert generation_request(clean, spec).cache_key("e") == generation_request(ref, spec).cache_key("e")
        assert clean.task == "robustness.support"
        clean_lines = clean.messages[0]["content"].split("\n")
        for s in samples:
            if s is clean:
                continue
            lines = s.messages[0]["content"].split("\n")
            assert len(lines) == len(clean_lines) and s.messages != clean.messages
            changed = [(a, b) for a, b in zip(clean_lines, lines) if a != b]
            assert changed and all(a.startswith("Seeker: ") and b.startswith("Seeker: ") for a, b in changed)
            assert generation_request(s, spec).task == "robustness.support"


@pytest.mark.parametrize("task_id, root", [("robustness.crisis", None), ("robustness.diagnosis", SAMPLE_ROOT)])
def test_instructions_around_the_persons_text_never_change(upstream, task_id, root):
    ctx = RunContext(seed=1)
    task = TASKS[task_id]()
    for item in task.method(ctx).load(DataSource(root or upstream, "data"), ctx)[:15]:
        samples = task.method(ctx).samples(item, ctx)
        clean = samples[0].messages[0]["content"]
        head, body = clean.split("<<<\n", 1)
        tail = body.rsplit(">>>", 1)[1]
        assert len(samples) > 20
        for s in samples[1:]:
            text = s.messages[0]["content"]
            assert text.startswith(head + "<<<\n") and text.endswith(">>>" + tail) and text != clean
            assert s.item.target == item.target


# --- robustness.crisis (macro-F1 base) --------------------------------------------------------------

def test_crisis_drop_of_macro_f1_against_sklearn(upstream, tmp_path):
    records = json.loads((upstream / CRISIS).read_text(encoding="utf-8"))
    labelled = [(str(i), r) for i, r in enumerate(records) if isinstance(r.get("label"), str)]
    by_block = {"".join(m + "\n" for m in r["inputs"]): r["label"] for _, r in labelled}

    def reply(body):
        block = between(body["messages"][-1]["content"], "<<<\n", ">>>")
        return json.dumps({"label": by_block.get(block, "no_crisis")})  # perturbed: always no_crisis

    keys = ["char_keyboard@high", "word_delete@high", "sentence_irrelevant@low"]
    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="robustness.crisis",
                        suite="data", data_dir=str(upstream), limit=40, perturbations=",".join(keys))
        _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models["openai/fake"].tasks["robustness.crisis"]
    assert t.n_errors == 0 and t.n_unscored == 0
    gold = {i: r["label"] for i, r in labelled[:40]}
    rows = lines_of(tmp_path / "run", "robustness.crisis")
    assert t.metrics["clean"].value == 1.0
    rel = []
    for key in keys:
        ids = [r["item_id"] for r in rows if r["variant"] == key]
        assert len(ids) >= 35
        perturbed = f1_score([gold[i] for i in ids], ["no_crisis"] * len(ids), average="macro")
        assert t.metrics[f"drop[{key}]"].value == pytest.approx(1.0 - perturbed)
        rel.append(1.0 - perturbed)
    assert t.value == pytest.approx(np.mean(rel))
    assert set(k for k in t.metrics if k.startswith("drop[") and "@" in k and not k.startswith("drop[@")) == \
           {f"drop[{k}]" for k in keys}


def test_diagnosis_runs_on_the_sample_suite_and_is_not_run_without_swmh(upstream, tmp_path):
    import csv
    rows = list(csv.DictReader((SAMPLE_ROOT / "swmh" / "test.csv").open(encoding="utf-8")))
    label_of = {r["text"]: r["label"].removeprefix("self.") for r in rows}

    def reply(body):
        post = between(body["messages"][-1]["content"], "<<<\n", "\n>>>")
        return json.dumps({"label": label_of.get(post, "offmychest")})

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="robustness.diagnosis",
                        perturbations="word_swap@high")
        _, res, _ = run_quiet(spec, tmp_path / "sample")
        t = res.models["openai/fake"].tasks["robustness.diagnosis"]
        golds = [label_of[r["text"]] for r in rows]
        assert t.metrics["clean"].value == pytest.approx(1.0)
        assert t.value == pytest.approx(1.0 - f1_score(golds, ["offmychest"] * len(golds), average="macro"))
        # upstream data has no SWMH (gated): not run, with the reason
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, suite="data", data_dir=str(upstream),
                        tasks="robustness.diagnosis,robustness.crisis", limit=1,
                        perturbations="char_swap@low")
        _, res, _ = run_quiet(spec, tmp_path / "data")
    t = res.models["openai/fake"].tasks["robustness.diagnosis"]
    assert t.status == "not run" and "swmh" in t.reason


def test_rules_judge_leaves_support_drops_unscored(tmp_path):
    with FakeLLMServer(reply=lambda body: "I hear you.") as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="robustness.support",
                        perturbations="char_swap@low")
        _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models["openai/fake"].tasks["robustness.support"]
    assert t.value is None and t.n == 0 and t.n_unscored == t.n_samples > 0
    assert "needs an LLM judge" in next(iter(t.unscored_reasons))


def test_perturbation_selection():
    def keys(spec):
        return [p.key for p in selected_perturbations(RunContext(options={"perturbations": spec}))]
    assert len(keys("")) == 30
    assert keys("sentence") == ["sentence_irrelevant@low", "sentence_irrelevant@medium", "sentence_irrelevant@high",
                                "sentence_shuffle@low", "sentence_shuffle@medium", "sentence_shuffle@high"]
    assert keys("word_swap@high, char_swap") == ["char_swap@low", "char_swap@medium", "char_swap@high",
                                                 "word_swap@high"]
    assert len(keys("@low")) == 10
    assert len(keys("all")) == 30 and keys("all@high") == keys("@high")
    assert keys("character@high") == keys("char@high") == ["char_swap@high", "char_insert@high", "char_delete@high",
                                                            "char_keyboard@high"]
    for bad in ("typos", "char@", "@", "word@extreme", "all@", " , "):
        with pytest.raises(UserError, match="unknown perturbation|names no perturbation"):
            keys(bad)


def test_the_same_names_pick_the_originals_types_under_the_paper_protocol():
    def keys(spec):
        return paper_keys(RunContext(options={"perturbations": spec}))
    assert keys("") == ["all@low", "all@medium", "all@high"]  # the original's default type
    assert keys("all") == keys("@low,@medium,@high") == keys("")
    # a level (or a kind of that level) is the original's single-stage type, listed after `all`
    assert keys("word@high, char") == ["character@low", "character@medium", "character@high", "word@high"]
    assert keys("sentence_shuffle@low,@medium,word_swap@low") == ["all@medium", "word@low", "sentence@low"]
    with pytest.raises(UserError):
        keys("typos")


# --- a lower-is-better base task, written here ----------------------------------------------------

TOY_TEXTS = [
    "I feel tired every single day. Work is hard lately. My family does not notice anything.",
    "Sleep has been difficult for weeks. I wake up at four in the morning. Then I lie there worrying.",
    "My friends stopped calling me. I think they are busy. Still it makes me sad and lonely.",
    "The exams are next month. I have not started studying properly. My parents expect top grades.",
    "I moved to a new city in spring. Nobody here knows me yet. Weekends feel very long and empty.",
    "My partner and I argue about money. The arguments keep getting louder. I am scared it will end badly.",
]


class ToyErrors(Task):
    id = "toy.errors"
    pillar = "reliability"
    title = "toy error rate"
    dataset = "toy"
    files = ()
    metric = MetricSpec("error_rate", False, 0.0, 1.0)
    primary_value = "error"

    def load(self, data, ctx):
        return [Item(str(i), {"text": t}) for i, t in enumerate(TOY_TEXTS)]

    def prompt(self, item, ctx):
        return [{"role": "system", "content": "Reply OK or NO."}, {"role": "user", "content": item.input["text"]}]

    def perturb(self, item, edit):
        return Item(item.id, {"text": edit(item.input["text"])}, item.target, dict(item.meta))

    def score(self, sample, reply, judged, ctx):
        if reply not in ("OK", "NO"):
            return Score(unscored={"error": "neither OK nor NO"})
        return Score(values={"error": float(reply == "NO")})

    def aggregate(self, table: Table, ctx):
        return {"error_rate": mean(table.col("error"))}


class ToyRobust(_Robustness):
    id = "robustness.toy"
    title = "toy robustness"
    base_id = "toy.errors"


def toy_reply(body):
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    assert system == "Reply OK or NO."  # never perturbed
    if user in TOY_TEXTS:
        return "OK" if TOY_TEXTS.index(user) % 2 == 0 else "NO"  # clean error rate 0.5
    if any(s in user for s in IRRELEVANT_SENTENCES):
        return "???"  # unparsable: these pairs leave every drop
    return "NO"


def test_lower_is_better_base_drop_sign_and_unscored_pairs(tmp_path, monkeypatch):
    monkeypatch.setitem(TASKS, "toy.errors", ToyErrors)
    monkeypatch.setitem(TASKS, "robustness.toy", ToyRobust)
    with FakeLLMServer(reply=toy_reply) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="robustness.toy")
        _, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models["openai/fake"].tasks["robustness.toy"]
    m = t.metrics
    assert t.n_samples == 6 + 30 * 6  # every toy text has 3 sentences: each perturbation changes it
    assert m["clean"].value == 0.5
    for p in perturbations():
        if p.kind == "sentence_irrelevant":
            assert m[f"drop[{p.key}]"].value is None and m[f"drop[{p.key}]"].n == 0
        else:
            # error rate 0.5 -> 1.0: a loss, reported as a positive drop
            assert m[f"drop[{p.key}]"].value == pytest.approx(0.5) and m[f"drop[{p.key}]"].n == 6
    assert t.value == pytest.approx(1.0) and t.trust_score == 0.0  # relative drop 0.5 / 0.5
    assert m["drop[sentence]"].value == pytest.approx(0.5)  # the shuffle drops only
    assert m["unscored_increase"].value == pytest.approx(18 / 180)
    assert t.n_unscored == 18 and math.isclose(m["mean_drop"].value, 0.5)


def test_robustness_reads_the_base_primary_metric_hook(monkeypatch):
    class Fixed(ToyErrors):
        def primary_metric(self, table, ctx):  # a cheaper path a base task may give; here a marker value
            return 0.25 + 0.01 * len(table)

    monkeypatch.setitem(TASKS, "toy.errors", Fixed)
    rows = [{"error": 0.0}, {"error": 1.0}, {"error": 1.0}, {"error": 1.0}, {"error": 1.0}]
    table = Table.from_rows(rows, ["0", "0", "0", "1", "1"], {
        "perturbation": ["clean", "char_swap@low", "word_swap@low", "clean", "char_swap@low"],
        "pair": ["0|", "0|", "0|", "1|", "1|"]})
    out = ToyRobust().method(RunContext()).aggregate(table, RunContext())
    assert out["clean"] == pytest.approx(0.27)  # the hook on the 2 clean rows (aggregate() would say 0.5)
    assert out["drop[char_swap@low]"] == pytest.approx(0.0)  # 2 rows on each side
    assert out["drop[word_swap@low]"] == pytest.approx(0.0)  # item 0 only: 1 row on each side


def test_constant_reply_is_perfectly_robust_and_the_base_value_says_so(upstream, tmp_path):
    """A model that says no_crisis to everything loses nothing under perturbation (mean_rel_drop 0, trust
    100); results.json, the terminal summary and the report show the base task's own value beside it, and
    what it counts in a pillar is performance under perturbation (credited_trust: 100 x the perturbed
    macro-F1, here the clean one's, as nothing changes)."""
    records = json.loads((upstream / CRISIS).read_text(encoding="utf-8"))
    gold = [r["label"] for r in records if isinstance(r.get("label"), str)][:40]
    with FakeLLMServer(reply=lambda body: json.dumps({"label": "no_crisis"})) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="robustness.crisis",
                        suite="data", data_dir=str(upstream), limit=40,
                        perturbations="char_keyboard@high")
        run_dir, res, _ = run_quiet(spec, tmp_path / "run")
    t = res.models["openai/fake"].tasks["robustness.crisis"]
    assert t.value == 0.0 and t.trust_score == 100.0
    assert t.base_metric == "clean"
    assert t.base_value == pytest.approx(f1_score(gold, ["no_crisis"] * 40, average="macro")) and t.base_value < 0.2
    assert t.metrics["perturbed"].value == pytest.approx(t.base_value)
    assert t.credited_trust == round(100 * t.metrics["perturbed"].value, 2) and "perturbed inputs" in t.credit_note
    assert res.models["openai/fake"].beyond_paper == {"robustness.crisis": t.credited_trust}
    from trustmh import cli as trustmh_cli
    from trustmh.report.html import write_report
    with trustmh_cli.out.capture() as cap:
        trustmh_cli._summary(res)
    shown = " ".join(cap.get().split())
    assert f"(base {t.base_value:.3f})" in shown and f"robustness.crisis: counts {t.credited_trust:g}: performance" in shown
    html = write_report([run_dir], tmp_path / "r.html").read_text(encoding="utf-8")
    assert "base clean" in html
