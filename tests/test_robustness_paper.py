"""--protocol paper for robustness.support and robustness.diagnosis: the perturbation tables read from the
staged perturbation.py files (entries checked by eye against the files), the rewritten rules on small
inputs whose outcome is worked out here by hand, and runs against the loopback fake server whose requests
equal the ones built here from the documented rules (PAPER_PROTOCOL.md §2), identical from run to run."""

import csv
import dataclasses
import hashlib
import json
import random
import shutil

import pytest
from sklearn.metrics import f1_score

from conftest import METHODS, run_quiet, run_spec
from test_bootstrap import check_batched_aggregate
from test_esconv_reference import by_hand, pairs
from test_paper_support import SAMPLE_SWMH, build_classification_prompt, esconv_samples, staged_constant
from trustmh.data.methods import MethodError
from trustmh.engine import context, prepare
from trustmh.scoring.metrics import Table
from trustmh.tasks import TASKS
from trustmh.tasks.robustness.paper import ES_PERTURB, SW_PERTURB, original_tables
from trustmh.tasks.base import Judged, RunContext, Verdicts
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.variants.paper_perturb import character_stage, csv_round_trip, perturb_pieces, sentence_stage

PW = "Ziteng-Wang17780623062+Python-Work/Robustness"
LEVELS = ("low", "medium", "high")


def seed_of(task_id, item_id, level, run_seed=0, kind="all"):
    """The documented rule: first 8 bytes (big-endian) of sha256('<run seed>|<task>|<item>|<type>@<level>')."""
    return int.from_bytes(hashlib.sha256(f"{run_seed}|{task_id}|{item_id}|{kind}@{level}".encode()).digest()[:8],
                          "big")


# --- (1) the tables, read from the staged files ------------------------------------------------------

@pytest.mark.needs_methods
def test_tables_are_read_from_each_datasets_own_file():
    es, sw = original_tables(ES_PERTURB, str(METHODS)), original_tables(SW_PERTURB, str(METHODS))
    # Values read by eye in ESConv/src/perturbation.py.
    assert len(es.irrelevant) == 120 and es.irrelevant[0] == "The weather is nice today."
    assert es.intensity["low"]["character"]["deletion"] == 0.01
    assert es.intensity["medium"]["character"]["case_change"] == 0.08
    assert es.intensity["high"]["word"]["stopword_removal"] == 0.70
    assert es.intensity["high"]["sentence"]["sentence_repetition"] == 3
    assert es.intensity["high"]["sentence"]["sentence_insertion"] == 0.40
    assert es.trigger == {"low": 0.35, "medium": 0.45, "high": 0.55}
    assert es.homoglyph["a"] == "\u0430" and es.homoglyph["Y"] == "\u0423"  # Latin -> Cyrillic
    assert es.similar["l"] == "1" and es.similar["A"] == "@"
    assert "the" in es.stop_words and "they" in es.stop_words
    assert es.spelling["receive"] == "recieve"
    assert list(es.abbreviations)[:2] == ["don't", "doesn't"] and es.abbreviations["gonna"] == "going to"
    assert es.insert_words[:3] == ("really", "very", "quite")
    # SWMH's file: the same but for stronger sentence values (repetition 3/5/7, insertion 0.2/0.5/0.8).
    assert [sw.intensity[lv]["sentence"]["sentence_repetition"] for lv in LEVELS] == [3, 5, 7]
    assert [sw.intensity[lv]["sentence"]["sentence_insertion"] for lv in LEVELS] == [0.20, 0.50, 0.80]
    assert sw.intensity["high"]["character"] == es.intensity["high"]["character"] and sw.irrelevant == es.irrelevant


@pytest.mark.needs_methods
def test_a_missing_or_altered_perturbation_file_stops_the_task(upstream, tmp_path):
    methods = tmp_path / "methods"
    shutil.copytree(METHODS / PW, methods / PW)
    spec = run_spec(models=["openai/x"], base_url="http://127.0.0.1:1/v1", tasks="robustness.support,reliability.support",
                    suite="data", data_dir=str(upstream), protocol="paper", judge="openai/j",
                    judge_base_url="http://127.0.0.1:1/v1", limit=2, methods_dir=str(methods))
    (methods / ES_PERTURB).unlink()
    robust, base = prepare(spec, context(spec))[0]
    assert robust.not_run.startswith(f"method file {ES_PERTURB} missing") and not robust.samples
    assert base.not_run is None and len(base.samples) == 2  # the base task does not need that file
    (methods / ES_PERTURB).write_bytes((METHODS / ES_PERTURB).read_bytes().replace(b"0.01", b"0.02", 1))
    original_tables.cache_clear()
    robust, _ = prepare(spec, context(spec))[0]
    assert "perturbation.py" in robust.not_run and ("sha256" in robust.not_run or "bytes" in robust.not_run)
    with pytest.raises(MethodError, match="perturbation.py"):
        original_tables(ES_PERTURB, str(tmp_path / "nowhere"))


# --- (2) the rules on inputs worked out by hand -------------------------------------------------------

def only(tables, level, stage, **rates):
    """`tables` with every rate of `stage` at `level` 0 but `rates`, and the character trigger at 1."""
    table = {k: (dict(v) if not isinstance(v, dict) else {r: 0 for r in v}) for k, v in tables.intensity[level].items()}
    table[stage].update(rates)
    return dataclasses.replace(tables, intensity={**tables.intensity, level: table}, trigger={level: 1.0})


@pytest.mark.needs_methods
def test_character_stage_draws_and_edits_as_the_original():
    es = original_tables(ES_PERTURB, str(METHODS))
    text = "Hello, Seeker: I am okay."
    # Case change alone at rate 0.3: five trigger draws (deletion..case), then one draw per letter only.
    t = only(es, "low", "character", case_change=0.3)
    draws = random.Random(11)
    [draws.random() for _ in range(5)]
    want = "".join(c.swapcase() if c.isalpha() and draws.random() < 0.3 else c for c in text)
    assert character_stage(text, "low", t, random.Random(11)) == want != text
    # Homoglyphs at rate 1: every mapped letter becomes its Cyrillic twin, nothing else changes.
    assert character_stage("cat pay", "low", only(es, "low", "character", homoglyph=1.0), random.Random(0)) == \
        "\u0441\u0430t \u0440\u0430\u0443"
    # Deletion at rate 1 would delete everything: the text is kept as it was.
    assert character_stage("abc", "low", only(es, "low", "character", deletion=1.0), random.Random(0)) == "abc"
    # Real high rates on 20,000 'z' (in no map), case change only when its trigger fires: flips within
    # 0.15 +- 0.01 of the letters (binomial sd 0.0025), or none.
    t = dataclasses.replace(only(es, "high", "character", case_change=0.15), trigger={"high": es.trigger["high"]})
    for seed in range(6):
        flipped = character_stage("z" * 20000, "high", t, random.Random(seed)).count("Z") / 20000
        assert flipped == 0 or abs(flipped - 0.15) < 0.01


@pytest.mark.needs_methods
def test_sentence_stage_repeats_inserts_and_cuts_to_three_quarters():
    es = original_tables(ES_PERTURB, str(METHODS))
    out = sentence_stage(["Seeker: I feel sad today.", "Supporter: Why?"], "low", es, random.Random(4))
    # low: each piece + 2 copies, then 2 irrelevant sentences after each of the 6: 18 pieces.
    assert len(out) == 18
    # By hand for piece 0: no passive marker, so "by" goes before the second-to-last word; no negation,
    # so one goes after the first word; then (18 > 2 pieces) cut to 75% + "..."; then the first "." is
    # removed and one "." inserted at the middle (punctuation 0.30: one of each).
    candidates = []
    for neg in ("not", "no", "never", "nothing", "nobody", "nowhere", "none", "neither", "nor"):
        s = f"Seeker: {neg} I feel by sad today."
        s = s[:int(len(s) * 0.75)] + "..."
        s = s.replace(".", "", 1)
        candidates.append(s[:len(s) // 2] + "." + s[len(s) // 2:])
    assert out[0] in candidates and out[3] in candidates and out[6] in candidates  # its copies, each own draw
    assert candidates[0] == "Seeker: not I. feel by sa.."  # 32 characters -> 24 + "...", 26 after the removal
    # The cut needs more than two pieces: every other edit off, repetition 0 leaves 2 pieces, 1 leaves 3.
    t = only(es, "low", "sentence", sentence_repetition=0)
    assert sentence_stage(["abcdefgh"], "low", t, random.Random(0)) == ["abcdefgh"] * 2
    t = only(es, "low", "sentence", sentence_repetition=1)
    assert sentence_stage(["abcdefgh"], "low", t, random.Random(0)) == ["abcdef..."] * 3


@pytest.mark.needs_methods
def test_diagnosis_keeps_only_the_first_piece():
    assert csv_round_trip(["  first piece ", "copy", "The sun is shining."], "clean") == "first piece"
    assert csv_round_trip(["", "copy"], " the clean post ") == "the clean post"
    assert csv_round_trip(["   "], "clean") is None  # read back empty: load_dataset drops the row
    sw = original_tables(SW_PERTURB, str(METHODS))
    post = "I cannot sleep. My thoughts race all night and I am scared of tomorrow."
    pieces = perturb_pieces([post], "high", "all", sw, random.Random(1))
    assert len(pieces) == 9 * 9  # the post and 8 copies (repetition 7, plus one), each followed by 8 irrelevant sentences
    kept = csv_round_trip(pieces, post)
    assert kept == pieces[0].strip() and not any(s.rstrip(".") in kept for s in sw.irrelevant)


# --- (3) runs against the fake server ------------------------------------------------------------------

def esconv_dir(upstream, tmp_path):
    """The corpus cut to the first 2 train dialogues, the first valid one and the last 2 test ones (the
    last sample of the last file included)."""
    lines = {s: (upstream / f"esconv/{s}.json").read_text(encoding="utf-8").splitlines() for s in ("train", "valid", "test")}
    (tmp_path / "esconv").mkdir()
    for split, keep in (("train", lines["train"][:2]), ("valid", lines["valid"][:1]), ("test", lines["test"][-2:])):
        (tmp_path / f"esconv/{split}.json").write_text("\n".join(keep) + "\n", encoding="utf-8")
    return tmp_path


def by_hand_split(conversation):
    """PAPER_PROTOCOL.md reliability.support: the last line starting 'Seeker:' is the user input (the
    marker removed), the lines before it the context; without one, everything and ''."""
    lines = conversation.split("\n")
    last = [i for i, line in enumerate(lines) if line.startswith("Seeker:")]
    if not last:
        return conversation, ""
    return "\n".join(lines[:last[-1]]).strip(), lines[last[-1]].replace("Seeker:", "").strip()


def support_run(data, out, seed=0):
    def reply(body):
        text = body["messages"][0]["content"]
        if body["model"] == "m":
            return "CLEAN" if text in clean_prompts else "NOISY"
        return "4" if "Model's Response: CLEAN\n" in text else "Score: 2"

    clean_prompts = {"\n".join(t) + "\nSupporter:" for t, _, _ in esconv_samples(data)}
    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, judge="openai/j", seed=seed,
                        judge_base_url=srv.openai_base_url, suite="data", data_dir=str(data),
                        tasks="robustness.support", protocol="paper")
        _, res, _ = run_quiet(spec, out)
        return res.models["openai/m"].tasks["robustness.support"], list(srv.requests)


CRITERIA = ("fluency", "professionalism", "empathy", "helpfulness")


@pytest.mark.needs_methods
def test_support_sends_the_perturbed_turns_to_model_and_judge(upstream, tmp_path):
    data = esconv_dir(upstream, tmp_path)
    want = esconv_samples(data)
    t, sent = support_run(data, tmp_path / "run")
    es = original_tables(ES_PERTURB, str(METHODS))
    templates = staged_constant(METHODS / PW / "ESConv/src/settings.py", "JUDGE_PROMPT_TEMPLATES")
    gen = [b for b in sent if b["model"] == "m"]
    judge = [b["messages"][0]["content"] for b in sent if b["model"] == "j"]
    assert len(gen) == 4 * len(want) and len(judge) == 16 * len(want)
    assert all(b["messages"][0]["role"] == "user" and len(b["messages"]) == 1 and
               {k: v for k, v in b.items() if k not in ("model", "messages")} == {"temperature": 0.0, "max_tokens": 512}
               for b in gen)
    prompts = [b["messages"][0]["content"] for b in gen]
    assert want[-1][2].startswith("test/1:")  # the last sample of the last file
    for turns, reference, item_id in (want[0], want[len(want) // 2], want[-1]):
        assert prompts.count("\n".join(turns) + "\nSupporter:") == 1  # the clean request, as reliability.support's
        for level in LEVELS:
            noisy = perturb_pieces(turns, level, "all", es, random.Random(seed_of("robustness.support", item_id, level)))
            assert noisy != turns and prompts.count("\n".join(noisy) + "\nSupporter:") == 1
            context_text, user = by_hand_split("\n".join(noisy))
            for c in ("Fluency", "Professionalism", "Empathy", "Helpfulness"):
                assert templates[c].format(Context=context_text, User_input=user, GT_Response=reference,
                                           Pred_Response="NOISY") in judge
    # Metrics by hand: clean replies judged 4 on every criterion, perturbed ones 2.
    m = {k: v.value for k, v in t.metrics.items()}
    assert t.protocol == "paper" and t.metric == "mean_rel_drop" and t.value == pytest.approx(0.5)
    assert m["score[clean]"] == m["clean"] == 4.0 and t.base_value == 4.0
    for level in LEVELS:
        assert m[f"score[all@{level}]"] == 2.0 and m[f"diff[all@{level}]"] == -2.0
        assert m[f"rel_drop[all@{level}]"] == pytest.approx(0.5) and t.metrics[f"rel_drop[all@{level}]"].n == len(want)
        # the original's summary row per criterion and intensity, under its name in the paper block
        assert all(m[f"judge_{c}[all@{level}]"] == 2.0 and m[f"judge_{c}[clean]"] == 4.0 for c in CRITERIA)
        assert t.paper[f"summary_metrics.judge_empathy.all@{level}"] == t.metrics[f"judge_empathy[all@{level}]"]
    # ...and the reference metrics of each intensity's run against the real ground-truth turns, by hand
    for key, reply in [("clean", "CLEAN")] + [(f"all@{level}", "NOISY") for level in LEVELS]:
        want_ref = by_hand([(reference, reply) for _, reference, _ in want])
        for ours, value in want_ref.items():
            name = ours.removeprefix("ref_")
            assert t.paper[f"summary_metrics.{name}.{key}"].value == pytest.approx(value, abs=1e-9), (name, key)
        assert t.paper[f"summary_metrics.bleu-2.{key}"].n == t.paper[f"summary_metrics.judge_empathy.{key}"].n == len(want)
    assert "no drop formula" in t.description and "sha256('<run seed>|<task id>|<item id>|<type>@<intensity>')" in t.description
    ids = {d["id"]: d["source"] for d in t.templates}
    assert ids["PT-IRRELEVANT_SENTENCES"].endswith("ESConv/src/perturbation.py#IRRELEVANT_SENTENCES")
    assert {"ES-gen", "ES-judge", "PT-PERTURBATION_INTENSITY", "PT-ABBREVIATIONS"} <= set(ids)
    rows = [json.loads(x) for x in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    seeded = [r for r in rows if r["variant"] == "all@high" and r["item_id"] == want[-1][2]]
    assert f"random.Random({seed_of('robustness.support', want[-1][2], 'high')})" in seeded[0]["notes"][-1]


@pytest.mark.needs_methods
def test_two_runs_send_the_same_requests_and_another_seed_others(upstream, tmp_path):
    data = esconv_dir(upstream, tmp_path)
    key = lambda b: json.dumps(b, sort_keys=True)  # noqa: E731
    _, first = support_run(data, tmp_path / "a")
    _, second = support_run(data, tmp_path / "b")
    assert sorted(map(key, first)) == sorted(map(key, second))
    _, other = support_run(data, tmp_path / "c", seed=1)
    gen = lambda sent: {b["messages"][0]["content"] for b in sent if b["model"] == "m"}  # noqa: E731
    clean = len(esconv_samples(data))
    assert len(gen(first) & gen(other)) == clean  # only the clean requests are shared


def swmh_sample(tmp_path):
    """The sample SWMH file as a data directory, its rows, and each post's gold label."""
    (tmp_path / "swmh").mkdir()
    shutil.copy(SAMPLE_SWMH, tmp_path / "swmh/test.csv")
    rows = list(csv.DictReader(open(tmp_path / "swmh/test.csv", newline="", encoding="utf-8")))
    gold = {r["text"].strip(): r["label"].removeprefix("self.").lower().replace("suicidewatch", "suicidal")
            for r in rows}
    return rows, gold


def diagnosis_run(tmp_path, out, gold, **options):
    """robustness.diagnosis under the paper protocol at a fake server that gets every clean post right and
    reads every other one as offmychest: (its task result, the requests)."""
    def reply(body):
        post = body["messages"][0]["content"].rsplit("Post:\n", 1)[1][:-1]
        return json.dumps({"label": gold.get(post, "offmychest")})

    with FakeLLMServer(reply=reply) as srv:
        spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, suite="data", data_dir=str(tmp_path),
                        tasks="robustness.diagnosis", protocol="paper", **options)
        _, res, _ = run_quiet(spec, tmp_path / out)
        return res.models["openai/m"].tasks["robustness.diagnosis"], list(srv.requests)


@pytest.mark.needs_methods
def test_diagnosis_sends_the_first_piece_and_scores_each_intensity(tmp_path):
    rows, gold = swmh_sample(tmp_path)
    build = build_classification_prompt()
    runs = [diagnosis_run(tmp_path, out, gold) for out in ("a", "b")]
    (t, sent), (_, again) = runs
    assert sorted(map(json.dumps, sent)) == sorted(map(json.dumps, again))  # two runs, the same requests
    prompts = [b["messages"][0]["content"] for b in sent]
    assert len(prompts) == 4 * len(rows) and all(set(b) == {"model", "messages", "temperature"} for b in sent)
    sw = original_tables(SW_PERTURB, str(METHODS))
    for i in (0, 4, len(rows) - 1):
        post = rows[i]["text"].strip()
        assert prompts.count(build([post], "test")) == 1
        for level in LEVELS:
            pieces = perturb_pieces([post], level, "all", sw, random.Random(seed_of("robustness.diagnosis", str(i), level)))
            assert prompts.count(build([pieces[0].strip()], "test")) == 1  # the CSV keeps inputs[0] only
    # Clean: every label right. Perturbed: all read as offmychest (no perturbed post is in `gold`).
    golds = [gold[r["text"].strip()] for r in rows]
    perturbed = f1_score(golds, ["offmychest"] * len(golds), average="macro")
    m = {k: v.value for k, v in t.metrics.items()}
    assert m["score[clean]"] == 1.0 and t.value == pytest.approx(1 - perturbed)
    for level in LEVELS:
        assert m[f"score[all@{level}]"] == pytest.approx(perturbed) and m[f"diff[all@{level}]"] == pytest.approx(perturbed - 1)
    assert any(d["source"].endswith("SWMH/src/perturbation.py#PERTURBATION_INTENSITY") for d in t.templates)


@pytest.mark.needs_methods
def test_the_originals_single_stage_types_are_selectable(tmp_path, monkeypatch):
    from trustmh.engine._endpoint import Endpoint
    # Each sample's own request is counted here (an untouched post asks what the clean one asks): two
    # identical ones in flight together are otherwise sent once (tests/test_single_flight.py).
    monkeypatch.setattr(Endpoint, "flight_key", lambda self, request, key: key)
    rows, gold = swmh_sample(tmp_path)
    build = build_classification_prompt()
    t, sent = diagnosis_run(tmp_path, "run", gold, perturbations="character@low,sentence@high")
    prompts = [b["messages"][0]["content"] for b in sent]
    assert len(prompts) == 3 * len(rows)  # clean, character@low, sentence@high
    sw = original_tables(SW_PERTURB, str(METHODS))
    golds = [gold[r["text"].strip()] for r in rows]
    m = {k: v.value for k, v in t.metrics.items()}
    assert not any("all@" in k for k in m)
    rel = []
    for kind, level in (("character", "low"), ("sentence", "high")):
        preds = []
        for i, r in enumerate(rows):
            rng = random.Random(seed_of("robustness.diagnosis", str(i), level, kind=kind))
            kept = perturb_pieces([r["text"].strip()], level, kind, sw, rng)[0].strip()
            assert prompts.count(build([kept], "test")) == 1 + (kept == r["text"].strip())  # an untouched post
            preds.append(gold.get(kept, "offmychest"))  # the server reads every changed post as offmychest
        want = f1_score(golds, preds, average="macro")
        assert m[f"score[{kind}@{level}]"] == pytest.approx(want) and m[f"rel_drop[{kind}@{level}]"] == pytest.approx(1 - want)
        rel.append(1 - want)
    assert m["score[clean]"] == 1.0 and t.value == pytest.approx(sum(rel) / 2) and rel[1] > 0


# --- the paired bootstrap's batched form, under the paper protocol --------------------------------------

REPLIES = ("ok", "I hear you, that sounds really hard.", "It is normal to feel depression at times.", "")


def test_support_reference_metrics_per_intensity_on_real_turns():
    """robustness.support's ref_<name>[<key>]: each intensity's replies against their ground-truth turns, as
    the original's summary_metrics.<name>.<intensity> (one run per intensity), by hand on real ESConv turns."""
    from trustmh.scoring.metrics import point, whole
    from trustmh.tasks.esconv_reference import sample_values
    ps = pairs(24)
    keys = ("clean", "all@low", "all@medium", "all@high")
    rows, toks, pert = [], [], []
    for i, (ref, hyp) in enumerate(ps):
        v, tk = sample_values(hyp, ref)
        rows.append(v)
        toks.append(tk)
        pert.append(keys[i % 4])
    table = Table.from_rows(rows, [str(i // 4) for i in range(len(ps))], {"ref_tokens": toks, "perturbation": pert})
    got = point(TASKS["robustness.support"]().method(RunContext(protocol="paper")).extras(table, whole(table)))
    for j, key in enumerate(keys):
        for ours, value in by_hand(ps[j::4]).items():
            assert got[f"{ours}[{key}]"] == pytest.approx(value, abs=1e-9), (ours, key)

@pytest.mark.parametrize("task_id", ["robustness.support", "robustness.diagnosis"])
def test_batched_paper_metrics_equal_the_per_resample_ones(task_id):
    task, ctx, rng = TASKS[task_id](), RunContext(seed=0, protocol="paper", methods_root=METHODS), random.Random(5)
    labels = ("depression", "SuicideWatch", "Anxiety", "bipolar", "offmychest")
    rows, clusters, cols = [], [], {"perturbation": [], "pair": [], "gold": [], "pred": [], "pred_strict": []}
    from trustmh.types import Item, Sample
    for i in range(40):
        for variant in ("", "all@low", "all@medium", "all@high"):
            meta = {"dialogue": f"d{i // 2}", "robustness_perturbation": variant} if variant else {"dialogue": f"d{i // 2}"}
            item = Item(str(i), {"post": "p", "context": []}, rng.choice(labels), meta)
            s = Sample(task_id, item, [], variant=variant)
            if task_id == "robustness.support":
                judged = Verdicts({c: Judged(text=str(rng.randint(0, 5)) if rng.random() > 0.1 else "n/a")
                                   for c in ("fluency", "professionalism", "empathy", "helpfulness")})
                sc = task.method(ctx).score(s, rng.choice(REPLIES), judged, ctx)  # the reference is the item's target
            else:
                sc = task.method(ctx).score(s, json.dumps({"label": rng.choice(labels + ("junk",))}), None, ctx)
            rows.append(sc.values)
            clusters.append(task.method(ctx).cluster(s))
            for k, v in task.method(ctx).labels(s, sc).items():
                cols.setdefault(k, []).append(v)
    table = Table.from_rows(rows, clusters, {k: v for k, v in cols.items() if v})
    check_batched_aggregate(task_id, table, ctx)
