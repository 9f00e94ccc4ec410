"""Every group metric's `n` is the number of samples it rests on (issue 34, item 4), checked for every task
of a run against samples.jsonl: ethics.reasoning's subcategory accuracies once showed the whole task's n
(n=20 where each subcategory holds 4).

The runs: the real data (../shared) under both protocols and the sample suite (which has the diagnosis
tasks the real data gates), one model and an LLM judge on a loopback server whose replies mix what the
parsers meet (answers, labels, ratings, JSON scores, refusals, prose, verdicts that do not parse), so groups
hold scored, unscored and missing samples. The expected counts are read from samples.jsonl (each sample's
`labels` and `values`) by the rules below, one per kind of group metric, written from what each metric
means, not from the task code. A group metric of a kind without a rule fails the test, so a new one gets
its rule here.

The rules (docs/architecture.md, "A metric's n"):
* a group's rate or mean (`accuracy[subcategory]`, `refusal_rate[method=cot]`, `mean_rating[self-harm]`,
  `score_mean[control]`): the group's samples with a value;
* per class of a classification: recall and support the samples of that gold class, precision those
  predicted as it, F1 both; a confusion-matrix cell the samples of its gold class (its row); under the
  paper's protocol only the samples its reading keeps;
* a count over a distribution (`ratings[3]`) or a statistic of one criterion (`min[empathy]`): the
  samples with that value;
* a comparison over matched samples counts the matched sets: a robustness drop its pairs (perturbed
  samples whose clean one is scored), pooled over the perturbations it averages; a fairness gap, spread or
  permutation test its dialogues that have every group of the attribute; an unmatched difference (the
  paper's `diff[all@low]`) the samples of both conditions."""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import IN_CI, UPSTREAM, run_quiet, run_spec
from trustmh.engine import Limits
from trustmh.tasks import TASKS
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.variants.demographics import ATTRIBUTES

CLEAN = "clean"
PROSE = ["A", "Answer: B", "(C) because the reasoning is sound", "I can't help with that.", "suicidal_ideation",
         "no_crisis", "Label: self-harm", "anxiety_crisis", "2", "Rating: 3", "Yes", "No", "75", "depression",
         "Anxiety", "Ideation", "Behavior", "Supportive", "The answer is D.", "It sounds like a lot; what helps you?",
         "I hear how hard this is. Please consider calling 988.", "Explicit affirmation", "harmful", "safe"]

LABELS = ["Supportive", "Indicator", "Ideation", "Behavior", "Attempt", "suicidal_ideation", "self-harm",
          "anxiety_crisis", "violent_thoughts", "no_crisis", "depression", "SuicideWatch", "Anxiety", "bipolar"]


def reply(body: dict) -> str:
    """A deterministic mix of what tested models (openai/m) and judges (openai/judge) send, by the
    request's hash."""
    text = "\n".join(m.get("content") or "" for m in body.get("messages") or [])
    h = int(hashlib.sha256((text + str(body.get("model"))).encode()).hexdigest(), 16)
    if body.get("model") != "judge":
        offered = [w for w in LABELS if w in text]  # a label the prompt offers, two times in three
        return offered[(h >> 8) % len(offered)] if offered and h % 3 else PROSE[h % len(PROSE)]
    keys = re.findall(r'"(\w+)": (?:n\b|<)', text)  # a rubric asking for a JSON object of scores
    if keys and h % 7:
        return json.dumps({k: 1 + (h >> (4 * i)) % 5 for i, k in enumerate(keys)})
    if "APA" in text and h % 5:
        return "```json " + json.dumps({f"sc{k}": 1 + (h >> k) % 5 for k in range(1, 6)}) + " ```"
    if "Output only the number" in text and h % 6:
        return str(h % 4)
    if "Answer: SAFE" in text and h % 6:
        return "It refuses.\nAnswer: " + ("SAFE" if h % 3 else "HARMFUL")
    return str((h >> 3) % 6) if h % 4 else PROSE[h % len(PROSE)]  # a rating one criterion at a time


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """Run folders: the sample suite, and the real data under each protocol where it is here."""
    out = tmp_path_factory.mktemp("groups")
    folders = []
    with FakeLLMServer(reply=reply) as srv:
        def run(name: str, **kw) -> None:
            if kw.get("protocol") == "paper":  # the run's judge reads PsyLeak too, as before the paper's proxy
                kw.setdefault("proxy_judge", "rules")  # was kept under a named --judge
            # No resamples: a metric's n is a count of samples, whatever the intervals around its value.
            spec = run_spec(models=["openai/m"], judge="openai/judge", base_url=srv.openai_base_url,
                            judge_base_url=srv.openai_base_url, n_boot=0, **kw)
            run_quiet(spec, out / name, limits=Limits(max_connections=32))
            folders.append(out / name)
        run("sample", suite="sample")
        if UPSTREAM.is_dir() or IN_CI:
            for protocol in ("paper", "trustmh"):
                run(protocol, suite="data", data_dir=str(UPSTREAM), limit=16, protocol=protocol)
    return folders


def has(s: dict, value: str) -> bool:
    return value in s["values"]


def pairs(samples: list[dict], value: str, keys: set[str]) -> int:
    """Perturbed samples of `keys` with a value whose clean sample (same pair) has one too."""
    clean = {s["labels"]["pair"] for s in samples if s["labels"]["perturbation"] == CLEAN and has(s, value)}
    return sum(s["labels"]["perturbation"] in keys and has(s, value) and s["labels"]["pair"] in clean
               for s in samples)


def complete_dialogues(samples: list[dict], value: str, attribute: str) -> set[str]:
    """Dialogues with a value for every group of `attribute`."""
    groups = defaultdict(set)
    for s in samples:
        if s["labels"]["attribute"] == attribute and has(s, value):
            groups[s["item_id"]].add(s["labels"]["group"])
    return {d for d, g in groups.items() if len(g) == len(ATTRIBUTES[attribute])}


def classification_rows(task_id: str, protocol: str, samples: list[dict]) -> tuple[list[dict], str]:
    """The samples a classification's per-class numbers are counted over, and the label of the prediction:
    the paper's own reading (and only the samples it keeps) under its protocol where it has one."""
    pred = "paper_pred" if any("paper_pred" in s["labels"] for s in samples) else "pred"
    return [s for s in samples if s["labels"].get("gold") and s["labels"].get(pred)], pred


def expected_n(task_id: str, protocol: str, metric: str, samples: list[dict]) -> int:
    task = TASKS[task_id]()
    primary = task.primary_value
    m = re.fullmatch(r"([\w-]+)\[(.*)\]", metric)
    if task_id == "privacy.leakage" or m is None:
        qtypes = sorted({s["labels"].get("qtype") for s in samples} - {None}, key=len, reverse=True)
        qtype = next(q for q in qtypes if metric.startswith(q))  # the per-question-type rates
        column = task.metric_columns[metric]
        return sum(s["labels"]["qtype"] == qtype and has(s, column) for s in samples)
    name, group = m.groups()
    if task.pillar == "robustness":
        perts = {s["labels"]["perturbation"] for s in samples} - {CLEAN}
        if name == "drop":  # a perturbation, a level (char, word, sentence) or an intensity (@low)
            keys = {group} if group in perts else {p for p in perts if p.startswith(group + "_")
                                                   or (group.startswith("@") and p.endswith(group))}
            return pairs(samples, primary, keys)
        if name in ("rel_drop",):
            return pairs(samples, primary, {group})
        if name == "score":
            return sum(s["labels"]["perturbation"] == group and has(s, primary) for s in samples)
        if name == "diff":
            return sum(s["labels"]["perturbation"] in (group, CLEAN) and has(s, primary) for s in samples)
        column = {"judge": name.removeprefix("judge_"), "ref": "ref_hyp_len"}[name.split("_")[0]]
        return sum(s["labels"]["perturbation"] == group and has(s, column) for s in samples)
    if task_id == "fairness.support":
        prefix, _, kind = name.partition("_")
        column = {"score": "overall", "length": "length", "refusal": "refusal"}[prefix]
        if group == "control":
            return sum(s["labels"]["attribute"] == "control" and has(s, column) for s in samples)
        attribute = group.split("=")[0]
        return len(complete_dialogues(samples, column, attribute))  # a group's mean: one sample a dialogue
    if name in ("precision", "recall", "f1", "support", "confusion"):
        rows, pred = classification_rows(task_id, protocol, samples)
        gold = group.split("->")[0]
        inside = {"precision": lambda s: s["labels"][pred] == group,
                  "f1": lambda s: group in (s["labels"]["gold"], s["labels"][pred])}.get(
            name, lambda s: s["labels"]["gold"] == gold)
        return sum(inside(s) for s in rows)
    if name == "ratings":  # a count of each rating: over the rated samples
        return sum(has(s, "rating") for s in samples)
    if name in ("min", "max", "std"):  # a statistic of one criterion
        return sum(has(s, group) for s in samples)
    # A group's rate or mean: the samples of the group with the value it averages.
    key, _, value = group.rpartition("=")
    if not key:
        keys = [k for k in {k for s in samples for k in s["labels"]} if any(s["labels"][k] == group for s in samples)]
        assert len(keys) == 1, f"{task_id} {metric}: which label holds {group!r}? {keys}"
        key = keys[0]
    column = {"mean_rating": "rating", "std_rating": "rating"}.get(name) or task.metric_columns.get(name, primary)
    return sum(s["labels"].get(key) == value and has(s, column) for s in samples)


@pytest.mark.needs_methods
def test_every_group_metrics_n_is_the_samples_it_rests_on(runs):
    checked, wrong = 0, []
    for folder in runs:
        results = json.loads((folder / "results.json").read_text())
        protocol = results["spec"].get("protocol", "trustmh")
        by_task = defaultdict(list)
        for line in (folder / "samples.jsonl").read_text(encoding="utf-8").splitlines():
            s = json.loads(line)
            by_task[s["task"]].append(s)
        for model in results["models"].values():
            for task_id, tr in model["tasks"].items():
                for metric, mv in (tr.get("metrics") or {}).items():
                    if "[" not in metric and not (task_id == "privacy.leakage" and metric in TASKS[task_id].metric_columns):
                        continue
                    checked += 1
                    want = expected_n(task_id, protocol, metric, by_task[task_id])
                    if mv["n"] != want:
                        wrong.append(f"{folder.name} {task_id} {metric}: n={mv['n']}, rests on {want}")
    assert checked > 500
    assert not wrong, f"{len(wrong)} of {checked} group metrics:\n" + "\n".join(wrong[:int(__import__("os").environ.get("SHOWN", "40"))])


@pytest.mark.needs_methods
def test_the_rules_can_fail(runs):
    """The rules tell groups apart: in these runs a group's n differs from the task's for most groups."""
    folder = runs[0]
    samples = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
    ethics = [s for s in samples if s["task"] == "ethics.reasoning"]
    subcategories = {s["labels"]["subcategory"] for s in ethics}
    assert len(subcategories) > 1
    assert all(expected_n("ethics.reasoning", "trustmh", f"accuracy[{c}]", ethics) < len(ethics) for c in subcategories)
