"""One place decides a run (issue 33): RunSpec's options are typed fields, every existing kind of run keeps
its run id, and `trustmh run` and `trustmh.run` resolve the same arguments into the same spec.

The run ids below were computed by the code before this change (RunSpec.options a dict, the CLI's
defaults applied in cli/run_cmds.py), for the same specs written the old way (`options={...}`)."""

from __future__ import annotations

import itertools

import pytest

import trustmh
import trustmh.api  # before any test patches the engine's run: api binds it on import
from trustmh.engine.spec import PAPER_JUDGE, PAPER_PROXY, RunSpec, resolve
from trustmh.errors import UserError

D = "/data/upstream"
# name -> (the spec's fields, the run id the old code gave it)
GRID = {
    "default_sample": (dict(models=["baseline/counselor"]), "counselor-98411160c4"),
    "sample_two_models": (dict(models=["baseline/counselor", "baseline/random"], tasks="crisis,ethics", seed=3,
                               limit=5, n_boot=100), "counselor-d378877f84"),
    "data_paper_default": (dict(models=["openai/gpt-4o"], judge="openai/gpt-4.1", suite="data", data_dir=D,
                                proxy_judge="openai/gpt-4"), "gpt-4o-d810d5bc35"),
    "data_paper_proxy_url": (dict(models=["openai/m"], judge="openai/j", suite="data", data_dir=D,
                                  base_url="http://127.0.0.1:9/v1", judge_base_url="http://127.0.0.1:9/v1",
                                  proxy_judge="openai/p", proxy_judge_base_url="http://127.0.0.1:8/v1"), "m-50f90593c7"),
    "data_trustmh_rules": (dict(models=["baseline/counselor"], judge="rules", suite="data", data_dir=D,
                                protocol="trustmh"), "counselor-d4b5033c82"),
    "data_paper_rules_offline": (dict(models=["baseline/counselor"], judge="rules", suite="data", data_dir=D,
                                      protocol="paper"), "counselor-50745a480f"),
    "panel": (dict(models=["openai/m"], judge="openai/j1", judge_base_url="http://127.0.0.1:7/v1", suite="sample",
                   panel_judges=[{"judge": "openai/j2", "base_url": "http://u:p@127.0.0.1:6/v1"},
                                 {"judge": "anthropic/j3", "base_url": None}], min_judge_alpha=0.5), "m-8b40afe8f6"),
    "base_urls_info": (dict(models=["openai/a", "openai/b"], base_urls={"openai/a": "http://k:s@127.0.0.1:5/v1"},
                            model_info={"openai/a": {"label": "A", "group": "general"}}), "a-2fa6b0fe80"),
    "transport_lang_pert": (dict(models=["openai/a"], base_url="https://example.org/v1", temperature=0.7, max_tokens=99,
                                 transport="sdk", lang="zh", perturbations="char,word_synonym@high"), "a-d2cc9d98eb"),
    "classifier_system": (dict(models=["hf/some/model"], suite="data", data_dir=D, protocol="trustmh",
                               methods_dir="/m", refusal_classifier="hf/x#refusal_label=LABEL_1",
                               system_prompt="You are kind."), "some-model-50d8a4b119"),
    "everything": (dict(models=["openai/a", "anthropic/b"], judge="openai/j", suite="data", data_dir=D, protocol="paper",
                        base_url="http://127.0.0.1:4/v1", judge_base_url="http://127.0.0.1:4/v1", seed=7, limit=9,
                        n_boot=50, panel_judges=[{"judge": "openai/k", "base_url": "http://127.0.0.1:3/v1"}],
                        min_judge_alpha=0.8, base_urls={"anthropic/b": "http://127.0.0.1:2/v1"},
                        model_info={"openai/a": {"label": "x"}}, transport="aiohttp", lang="en", perturbations="@low",
                        proxy_judge="openai/p", proxy_judge_base_url="http://127.0.0.1:1/v1", refusal_classifier="hf/c",
                        system_prompt="Hi."), "a-1e7233370b"),
}


@pytest.mark.parametrize("name", sorted(GRID))
def test_every_kind_of_run_keeps_its_run_id(name):
    fields, old_id = GRID[name]
    spec = RunSpec(**fields)
    assert spec.run_id() == old_id
    stored = spec.to_json()
    again = RunSpec.from_json(stored)  # as `trustmh score` reads a run back
    assert again.run_id() == old_id and again.to_json() == stored


def test_a_spec_stored_before_the_protocol_field_keeps_its_run_id():
    stored = {"models": ["openai/gpt-4o"], "judge": "openai/gpt-4.1", "tasks": "all", "seed": 0, "limit": None,
              "suite": "data", "data_dir": D, "base_url": None, "judge_base_url": None, "temperature": 0.0,
              "max_tokens": None, "upstream_compat": True, "n_boot": 1000, "options": {"proxy_judge": "openai/gpt-4"}}
    spec = RunSpec.from_json(stored)
    assert spec.protocol == "paper" and spec.run_id() == "gpt-4o-d810d5bc35"
    assert RunSpec.from_json(dict(stored, upstream_compat=False, judge="rules", options={})).run_id() == \
        "gpt-4o-15813aad0e"


def test_the_defaults_a_spec_leaves_out_are_the_command_line_s():
    """RunSpec from Python decides what `trustmh run` decided on the command line: the paper's judge and
    proxy on real data (the old CLI's run of the same arguments, above), rules for offline baselines."""
    paper = RunSpec(models=["openai/gpt-4o"], suite="data", data_dir=D)
    assert (paper.judge, paper.proxy_judge, paper.lang) == (PAPER_JUDGE, PAPER_PROXY, "all")
    assert paper.run_id() == GRID["data_paper_default"][1]
    offline = RunSpec(models=["baseline/counselor"], suite="data", data_dir=D)
    assert (offline.judge, offline.proxy_judge) == ("rules", None)
    assert offline.run_id() == GRID["data_paper_rules_offline"][1]
    assert RunSpec(models=["openai/x"], suite="data", data_dir=D, proxy_judge="rules").proxy_judge is None
    assert RunSpec(models=["openai/x"]).judge == "rules" and RunSpec(models=["openai/x"]).lang == "en"


def test_naming_the_judge_keeps_the_papers_proxy_and_runs_without_leakage_keep_their_ids():
    """Issue 47: under --protocol paper, --judge alone no longer drops the paper's proxy where privacy.leakage
    runs; a run without privacy.leakage keeps the id the old code gave it (computed by it), and a run stored
    by the old code (a named judge, no proxy: the judge read it) keeps its meaning and its id when read back."""
    named = dict(models=["openai/m"], judge="openai/gpt-4.1", suite="data", data_dir=D)
    for tasks in ("all", "privacy", "ethics,privacy.leakage"):
        assert RunSpec(**named, tasks=tasks).proxy_judge == PAPER_PROXY
    assert RunSpec(**named, tasks="privacy.leakage", proxy_judge="openai/p").proxy_judge == "openai/p"
    assert RunSpec(**named, tasks="privacy.leakage", proxy_judge="rules").proxy_judge is None  # the judge reads it
    assert RunSpec(**dict(named, judge="rules"), tasks="privacy.leakage").proxy_judge is None  # offline stays so
    assert RunSpec(**named, tasks="privacy.leakage", protocol="trustmh").proxy_judge is None  # no proxy there
    assert RunSpec(**named, tasks="ethics").run_id() == "m-315e6b0ff9"
    assert RunSpec(**named, tasks="crisis.conversation").run_id() == "m-fd653fc8fe"
    old = {"models": ["openai/m"], "judge": "openai/gpt-4.1", "tasks": "all", "seed": 0, "limit": None,
           "suite": "data", "data_dir": D, "base_url": None, "judge_base_url": None, "temperature": 0.0,
           "max_tokens": None, "upstream_compat": True, "n_boot": 1000, "options": {}, "protocol": "paper",
           "methods_dir": None}
    again = RunSpec.from_json(old)
    assert again.proxy_judge is None and again.run_id() == "m-ef0e1f5ed4" and again.to_json() == old
    assert RunSpec(**named).run_id() != "m-ef0e1f5ed4"  # the same arguments today: the paper's proxy, a new run


def test_roles_say_who_played_each_judging_role_and_whether_it_is_the_papers():
    named = RunSpec(models=["openai/m"], judge="openai/j", suite="data", data_dir=D)
    assert named.roles() == {
        "judge": {"model": "openai/j", "paper_model": PAPER_JUDGE, "is_paper": False},
        "proxy_judge": {"model": PAPER_PROXY, "paper_model": PAPER_PROXY, "is_paper": True}}
    judge_reads = RunSpec(models=["openai/m"], suite="data", data_dir=D, proxy_judge="rules")
    assert judge_reads.roles()["judge"]["is_paper"] and judge_reads.roles()["proxy_judge"] == {
        "model": PAPER_JUDGE, "paper_model": PAPER_PROXY, "is_paper": False}
    assert list(RunSpec(models=["openai/m"]).roles()) == ["judge"]  # the sample suite: trustmh's protocol


def test_options_are_read_only_and_hold_only_what_is_not_a_default():
    spec = RunSpec(models=["openai/a"], transport="http", lang="en", min_judge_alpha=0.667)
    assert dict(spec.options) == {}
    with pytest.raises(TypeError):
        spec.options["transport"] = "sdk"  # type: ignore[index]
    with pytest.raises(UserError, match="stored spec's options"):
        RunSpec.from_json(dict(spec.to_json(), options={"bench_n": 3}))


# --- the command line and the Python API resolve the same arguments into the same spec ----------------

class Captured(Exception):
    def __init__(self, spec):
        super().__init__("captured")
        self.spec = spec


def capture(*args, **kwargs):
    raise Captured(args[0])


def cli_spec(monkeypatch, cli_here, flags: list[str]) -> RunSpec | str:
    """The spec `trustmh run FLAGS` hands the engine, or the one-line error a user sees (exit 2)."""
    import trustmh.engine
    monkeypatch.setattr(trustmh.engine, "run", capture)
    try:
        code, out, err = cli_here("run", *flags)
    except Captured as c:  # run_here lets the engine's exception reach the test
        return c.spec
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (code, out, err)
    return err.removeprefix("error: ").rstrip("\n")


def api_spec(monkeypatch, fields: dict) -> RunSpec | str:
    """The spec `trustmh.run(RunSpec(**fields))` hands the engine, or its one-line error."""
    monkeypatch.setattr(trustmh.api, "engine_run", capture)
    try:
        trustmh.run(RunSpec(**fields))
    except Captured as c:
        return c.spec
    except UserError as e:
        return str(e)
    raise AssertionError("neither ran nor failed")


def flags_of(fields: dict) -> list[str]:
    """The command line that asks for the run `fields` ask for."""
    out: list[str] = []
    for m in fields["models"]:
        out += ["--model", m]
    for j in ([fields["judge"]] if fields.get("judge") else []) + [p["judge"] for p in fields.get("panel_judges", [])]:
        out += ["--judge", j]
    named = {"suite": "--suite", "data_dir": "--data-dir", "protocol": "--protocol", "base_url": "--base-url",
             "judge_base_url": "--judge-base-url", "proxy_judge": "--proxy-judge", "lang": "--lang",
             "proxy_judge_base_url": "--proxy-judge-base-url", "transport": "--transport", "seed": "--seed",
             "min_judge_alpha": "--min-judge-alpha", "perturbations": "--perturbations", "tasks": "--tasks",
             "refusal_classifier": "--refusal-classifier", "system_prompt": "--system-prompt", "limit": "--limit",
             "temperature": "--temperature", "max_tokens": "--max-tokens", "n_boot": "--bootstrap"}
    for key, flag in named.items():
        if fields.get(key) is not None:
            out += [flag, str(fields[key])]
    return out


def grid(data_dir: str) -> list[dict]:
    """Every suite x protocol x models x judges, the other flags cycled through their values."""
    cases = []
    combos = itertools.product(("sample", "data"), (None, "paper", "trustmh"),
                               (["baseline/counselor"], ["openai/m"], ["openai/a", "anthropic/b"]),
                               (None, "rules", "openai/j", "openai/j1+openai/j2"))
    cycle = [dict(), dict(proxy_judge="openai/p"), dict(proxy_judge="rules", lang="zh"), dict(lang="all"),
             dict(judge_base_url="http://127.0.0.1:7/v1", proxy_judge_base_url="http://127.0.0.1:6/v1"),
             dict(base_url="http://127.0.0.1:5/v1", transport="sdk", min_judge_alpha=0.5),
             dict(lang="en", perturbations="char@low", refusal_classifier="hf/c", seed=4, limit=3),
             dict(system_prompt="Be kind.", temperature=0.5, max_tokens=64, n_boot=10, tasks="crisis")]
    for i, (suite, protocol, models, judges) in enumerate(combos):
        fields = dict(models=models, suite=suite, protocol=protocol, **cycle[i % len(cycle)])
        if suite == "data":
            fields["data_dir"] = data_dir
        if judges is not None:
            first, *rest = judges.split("+")
            fields["judge"] = first
            # one --judge-base-url on the command line serves every judge: the API names it for each
            fields["panel_judges"] = [{"judge": j, "base_url": fields.get("judge_base_url")} for j in rest]
        cases.append(fields)
    return cases


@pytest.mark.parametrize("env", [None, "http://127.0.0.1:9/v1"])
def test_the_command_line_and_the_api_resolve_the_same_spec(monkeypatch, cli_here, tmp_path, env):
    """A grid of flag combinations: `trustmh run` and `trustmh.run` hand the engine equal specs (every field,
    base URLs the environment names included), or fail with the same one-line error."""
    if env is None:
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    else:
        monkeypatch.setenv("OPENAI_BASE_URL", env)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    cases = grid(str(tmp_path.resolve()))
    ran = failed = 0
    for fields in cases:
        by_cli, by_api = cli_spec(monkeypatch, cli_here, flags_of(fields)), api_spec(monkeypatch, fields)
        assert by_cli == by_api, fields
        if isinstance(by_cli, RunSpec):
            ran += 1
            assert resolve(by_cli) == by_cli  # resolving twice changes nothing
        else:
            failed += 1
    assert (ran, failed) == (60, 12)  # both sides fail the paper protocol on the sample suite alone
