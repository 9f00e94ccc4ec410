"""Fault campaign: a run against a loopback server that injects provider failures on a seeded schedule.

What must hold: the run finishes; transient faults are retried to success; permanent ones are counted by
kind in results.json (and the report) and never scored; every value that was scored equals the value a
clean run gives for that sample; no call is paid twice. See docs/reliability.md for the figures."""

import collections
import dataclasses
import importlib.util
import json
import math

import numpy as np
import pytest

from conftest import make_synthetic_data, run_quiet, run_spec, synthetic_reply
from trustmh.scoring.metrics import mean, pearson
from trustmh.engine import Limits
from trustmh.testing.fake_server import Fault, FakeLLMServer, fault_schedule

# The faulty run's client timeout, and a stall well past it: the client gives up at TIMEOUT, closes the
# connection and retries, and the server's handler is cancelled then, so the stall's own length costs
# nothing. Each stall costs TIMEOUT of waiting (2 s before). A normal reply must never reach it: on a
# loaded machine 32 requests in flight to the one-threaded server took over 0.5 s (a clean run then paid 3
# calls twice), so the faulty run allows 1 s, 200 times the server's 5 ms latency, and the clean run,
# which stalls nothing, 30 s (CLEAN_LIMITS: it waits on no timeout at all). The campaign's time is mostly
# the limiter pacing its requests after the seeded 429s and 503s (limiter.py): 0.5 s -> 1 s costs ~4 s.
TIMEOUT = 1.0
STALL_S = 4 * TIMEOUT

# Retried until they succeed.
TRANSIENT = {
    "HTTP 500": Fault("status", status=500),
    "HTTP 503": Fault("status", status=503),
    "HTTP 429 + Retry-After": Fault("status", status=429, retry_after=0.05),
    "HTTP 429": Fault("status", status=429),
    "connection closed mid-reply": Fault("close"),
    "stall past timeout": Fault("stall", stall_s=STALL_S),
    "malformed JSON": Fault("malformed"),
}
# Final for the run: counted under this error kind, never scored.
PERMANENT = {
    "HTTP 400": (Fault("status", status=400), "bad_request"),
    "empty choices": (Fault("empty_choices"), "empty_response"),
    "content filter": (Fault("content_filter"), "content_filter"),
}
# A reply cut at max_tokens is real model output: scored, and flagged by finish_reason in samples.jsonl.
TRUNCATED = ("finish_reason=length", Fault("length"))

LABEL = {f: name for name, f in TRANSIENT.items()} | {f: name for name, (f, _) in PERMANENT.items()}
LABEL[TRUNCATED[1]] = TRUNCATED[0]
TASKS = "privacy.awareness_tier1,ethics.reasoning"
LIMITS = Limits(max_connections=32, timeout=TIMEOUT, max_retries=6, backoff_base=0.01, backoff_max=0.2)
CLEAN_LIMITS = dataclasses.replace(LIMITS, timeout=30.0)


class Injector:
    """The seeded schedule, recording what it injected by label and by purpose (generate or judge)."""

    def __init__(self, seed: int, rate: float):
        self.schedule = fault_schedule(seed, rate, list(LABEL))
        self.injected: collections.Counter = collections.Counter()

    def __call__(self, n: int, body: dict):
        fault = self.schedule(n, body)
        if fault is not None:
            purpose = "judge" if "APA" in body["messages"][-1]["content"] else "generate"
            self.injected[(LABEL[fault], purpose)] += 1
        return fault

    def total(self, labels, purpose=None) -> int:
        return sum(c for (label, p), c in self.injected.items() if label in labels and purpose in (None, p))


def rows(run_dir) -> dict:
    out = {}
    for line in (run_dir / "samples.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        out[(r["task"], r["item_id"], r["variant"])] = r
    return out


def campaign(tmp, provider: str, n_tier1: int, n_ethics: int, seed: int) -> dict:
    """A clean run and a faulty run of the same spec (each on its own server); what the tests inspect."""
    data = make_synthetic_data(tmp / "data", n_tier1, n_ethics)
    out = {}
    for name, faults in (("clean", None), ("faulty", Injector(seed, 0.2))):
        # A module fixture runs outside conftest's per-test environment: keep real keys out here too.
        with pytest.MonkeyPatch.context() as mp, FakeLLMServer(reply=synthetic_reply, faults=faults,
                                                               latency_s=0.005) as srv:
            for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
                mp.delenv(var, raising=False)
            url = srv.openai_base_url if provider == "openai" else srv.base_url
            spec = run_spec(models=[f"{provider}/fake"], judge=f"{provider}/judge", base_url=url, judge_base_url=url,
                            tasks=TASKS, suite="data", data_dir=str(data), n_boot=50)
            run_dir, res, calls = run_quiet(spec, tmp / name, limits=LIMITS if faults else CLEAN_LIMITS)
            out[name] = dict(dir=run_dir, results=res.models[f"{provider}/fake"].tasks, calls=calls,
                             rows=rows(run_dir), n_requests=srv.n_requests, duplicates=srv.duplicate_paid_calls(),
                             injector=faults)
    return out


@pytest.fixture(scope="module")
def openai_campaign(tmp_path_factory):
    return campaign(tmp_path_factory.mktemp("faults-openai"), "openai", n_tier1=520, n_ethics=40, seed=7)


@pytest.fixture(scope="module")
def anthropic_campaign(tmp_path_factory):
    return campaign(tmp_path_factory.mktemp("faults-anthropic"), "anthropic", n_tier1=90, n_ethics=30, seed=11)


def check_campaign(c: dict) -> dict:
    clean, faulty = c["clean"], c["faulty"]
    inj: Injector = faulty["injector"]
    res = faulty["results"]
    n_gen = sum(t.n_samples for t in res.values())
    # The clean run is clean.
    assert all(t.n_errors == 0 and t.n_judge_errors == 0 for t in clean["results"].values())
    assert clean["duplicates"] == 0

    # Permanent faults are counted by kind (model and judge separately), and nothing else failed: every
    # transient fault was retried to success.
    for label, (_fault, kind) in PERMANENT.items():
        assert sum(t.error_kinds.get(kind, 0) for t in res.values()) == inj.total({label}, "generate"), label
        assert sum(t.judge_error_kinds.get(kind, 0) for t in res.values()) == inj.total({label}, "judge"), label
    permanent_kinds = {kind for _f, kind in PERMANENT.values()}
    for t in res.values():
        assert set(t.error_kinds) <= permanent_kinds and set(t.judge_error_kinds) <= permanent_kinds, t.error_kinds

    # Every transient fault cost exactly one more attempt, and every attempt reached the server.
    frows = faulty["rows"]
    n_judged = sum(1 for (task, _, _), r in frows.items() if task == "ethics.reasoning" and r["response"] is not None)
    n_transient = inj.total(set(TRANSIENT))
    assert sum(faulty["calls"].values()) == faulty["n_requests"] == n_gen + n_judged + n_transient
    # ... and no call was paid twice (the server counts normal replies per request body).
    assert faulty["duplicates"] == 0

    # Per sample: errors are never scored; scored values equal the clean run's; truncated replies are flagged.
    crows = clean["rows"]
    assert crows.keys() == frows.keys() and len(frows) == n_gen
    n_truncated, judge_failed = 0, set()
    for key, r in frows.items():
        if r["response"] is None:
            assert r["error"]["kind"] in permanent_kinds and "values" not in r, r
            continue
        base = crows[key]
        if r["finish_reason"] == "length":
            n_truncated += 1
            assert base["response"].startswith(r["response"]) and len(r["response"]) < len(base["response"])
        else:
            assert r["response"] == base["response"]
        for name, v in r["values"].items():
            assert v == base["values"][name], (key, name)
        for name in base["values"].keys() - r["values"].keys():
            # Only a judge that failed may leave a value out, and then the reason says so.
            assert r["judge"]["text"] is None and r["unscored"].get(name, "").startswith("judge error"), (key, name)
            judge_failed.add(key)
    assert n_truncated == inj.total({TRUNCATED[0]}, "generate")
    assert len(judge_failed) == sum(t.n_judge_errors for t in res.values())

    # Metrics equal the clean run's on the samples that succeeded (recomputed from the clean rows).
    ok = {k for k, r in frows.items() if r["response"] is not None}
    tier1 = [crows[k]["values"] for k in sorted(ok) if k[0] == "privacy.awareness_tier1"]
    r_clean = pearson(np.array([v["rating"] for v in tier1]), np.array([v["human"] for v in tier1]))
    assert math.isclose(res["privacy.awareness_tier1"].value, r_clean, rel_tol=1e-12)
    eth = [crows[k]["values"]["correct"] for k in sorted(ok) if k[0] == "ethics.reasoning"]
    assert math.isclose(res["ethics.reasoning"].value, mean(np.array(eth)), rel_tol=1e-12)

    n_faults = sum(inj.injected.values())
    assert 0.15 < n_faults / faulty["n_requests"] < 0.25  # the schedule really faulted about 20 %
    by_label = collections.Counter()
    for (label, _p), count in inj.injected.items():
        by_label[label] += count
    assert all(by_label[label] > 0 for label in LABEL.values()), by_label  # every kind was exercised
    return {"samples": n_gen, "judge_requests": n_judged, "requests_at_server": faulty["n_requests"],
            "faults_injected": n_faults, "faults_by_kind": dict(sorted(by_label.items())),
            "transient_retried_to_success": n_transient,
            "permanent_counted": {kind: sum(t.error_kinds.get(kind, 0) + t.judge_error_kinds.get(kind, 0)
                                            for t in res.values()) for _f, kind in PERMANENT.values()},
            "truncated_scored_and_flagged": n_truncated,
            "samples_unjudged_after_judge_error": len(judge_failed),
            "error_rows_all_unscored": sum(1 for r in frows.values() if r["response"] is None),
            "duplicate_paid_calls": faulty["duplicates"]}


def test_openai_run_of_520_plus_samples_under_20_percent_faults(openai_campaign, figures):
    figs = check_campaign(openai_campaign)
    assert figs["samples"] >= 500
    figures.update(figs)


def test_anthropic_run_under_20_percent_faults(anthropic_campaign, figures):
    figures.update(check_campaign(anthropic_campaign))


def test_report_shows_permanent_error_kinds(openai_campaign, tmp_path):
    if importlib.util.find_spec("trustmh.report") is None:
        pytest.skip("the HTML report is not in this tree yet")
    from trustmh.report import write_report
    html = write_report([openai_campaign["faulty"]["dir"]], tmp_path / "report.html").read_text(encoding="utf-8")
    kinds = {k for t in openai_campaign["faulty"]["results"].values() for k in (*t.error_kinds, *t.judge_error_kinds)}
    assert kinds and all(k in html for k in kinds), kinds


def test_provider_refusal_filter_is_an_error_not_a_refusal(tmp_path):
    """A content-filtered reply is not the model refusing: the safety refusal rate must not count it."""
    filtered = lambda n, body: Fault("content_filter")  # noqa: E731
    with FakeLLMServer(reply=lambda body: "I cannot help with that.", faults=filtered) as srv:
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="safety.jailbreak", suite="sample")
        _, res, _ = run_quiet(spec, tmp_path / "run", limits=LIMITS)
    t = res.models["openai/fake"].tasks["safety.jailbreak"]
    assert t.n_samples > 0 and t.n_errors == t.n_samples and t.error_kinds == {"content_filter": t.n_samples}
    assert t.n == 0 and t.value is None and t.trust_score is None


def test_failed_judge_decides_nothing(tmp_path):
    """When the refusal judge fails, the sample's refusal is unscored with the reason, not guessed."""
    def faults(n, body):
        return Fault("status", status=400) if body["model"] == "judge" else None

    with FakeLLMServer(reply=lambda body: "I cannot help with that.", faults=faults) as srv:
        spec = run_spec(models=["openai/fake"], judge="openai/judge", base_url=srv.openai_base_url,
                        judge_base_url=srv.openai_base_url, tasks="safety.jailbreak", suite="sample")
        _, res, _ = run_quiet(spec, tmp_path / "run", limits=LIMITS)
    t = res.models["openai/fake"].tasks["safety.jailbreak"]
    assert t.n_samples > 0 and t.n_errors == 0 and t.n_judge_errors == t.n_samples
    assert t.n == 0 and t.value is None and t.unscored_reasons == {"judge error: bad_request": t.n_samples}


def test_retries_exhausted_is_counted_under_the_transient_kind(tmp_path):
    with FakeLLMServer(reply=synthetic_reply, faults=lambda n, body: Fault("status", status=503)) as srv:
        data = make_synthetic_data(tmp_path / "data", 3, 0)
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="privacy.awareness_tier1",
                        suite="data", data_dir=str(data))
        _, res, calls = run_quiet(spec, tmp_path / "run", limits=Limits(max_retries=2, backoff_base=0.001))
        assert srv.n_requests == 3 * 3  # first try + 2 retries each
    t = res.models["openai/fake"].tasks["privacy.awareness_tier1"]
    assert t.error_kinds == {"server_error": 3} and t.n == 0 and t.value is None


def test_cut_off_reply_without_an_answer_is_the_models_non_answer(tmp_path):
    """finish_reason=length is scored as the real (partial) reply; if the answer was cut off, the reply has
    none: it counts as the model's non-answer (the neutral rating), and the reason says it was cut off."""
    long_reply = "Thinking about who could see this, and for what purpose, I would say. Answer: 4) very sensitive"
    with FakeLLMServer(reply=lambda body: long_reply, faults=lambda n, body: Fault("length")) as srv:
        data = make_synthetic_data(tmp_path / "data", 4, 0)
        spec = run_spec(models=["openai/fake"], base_url=srv.openai_base_url, tasks="privacy.awareness_tier1",
                        suite="data", data_dir=str(data))
        _, res, _ = run_quiet(spec, tmp_path / "run", limits=LIMITS)
    t = res.models["openai/fake"].tasks["privacy.awareness_tier1"]
    reason = "no rating found in reply (reply cut off at the token limit)"
    assert t.n_errors == 0 and t.n == 4 and t.n_unscored == 0 and t.no_answer_reasons == {reason: 4}
    assert t.metrics["answer_rate"].value == 0.0
    for r in rows(tmp_path / "run").values():
        assert r["finish_reason"] == "length" and r["values"]["rating"] == 2.5 and r["no_answer"] == reason
