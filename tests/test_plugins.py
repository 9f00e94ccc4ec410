"""Tasks and models from outside trustmh: an installed plugin package (entry points), files given with
--include, a script that ran through `trustmh.run`, and the package-root API they are written against."""

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")

PLUGIN_TASKS = '''
from trustmh import Item, MetricSpec, Score, Task, mean, register


@register
class Shout(Task):
    id = "demo.shout"
    pillar = "demo"
    title = "Repeat the text in capitals"
    dataset = "built-in"
    files = ()
    metric = MetricSpec("shouted", higher_is_better=True, lo=0.0, hi=1.0)
    primary_value = "shouted"

    def load(self, data, ctx):
        return [Item(id=str(i), input={"text": t}) for i, t in enumerate(["calm down", "it is fine", "ok"])]

    def prompt(self, item, ctx):
        return [{"role": "user", "content": item.input["text"]}]

    def score(self, sample, reply, judged, ctx):
        return Score(values={"shouted": float(reply == sample.item.input["text"].upper())}, parsed=reply)

    def aggregate(self, table, ctx):
        return {"shouted": mean(table.col("shouted"))}
'''

PLUGIN_MODELS = '''
from trustmh import Model, Response


class Echo(Model):
    remote = False
    cacheable = False

    async def generate(self, request):
        text = request.messages[-1]["content"]
        return Response(text=text.upper() if self.spec == "echo/upper" else text, finish_reason="stop")


def echo(name, **options):  # registered by trustmh under its entry point's name
    return Echo(options["spec"])
'''


@pytest.fixture
def plugin_path(tmp_path):
    """A plugin 'installed' the way importlib.metadata finds one: a package and its dist-info with
    entry_points.txt, in a directory on PYTHONPATH."""
    root = tmp_path / "site"
    pkg = root / "trustmh_demo_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "tasks.py").write_text(PLUGIN_TASKS)
    (pkg / "models.py").write_text(PLUGIN_MODELS)
    info = root / "trustmh_demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trustmh-demo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[trustmh.tasks]\ndemo = trustmh_demo_plugin.tasks\n\n"
                                           "[trustmh.models]\necho = trustmh_demo_plugin.models:echo\n")
    return root


def ok(proc):
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return proc


def user_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    for n in needles:
        assert n in proc.stderr, proc.stderr
    return proc


def task_result(run_dir: Path, model: str, task: str) -> dict:
    return json.loads((run_dir / "results.json").read_text())["models"][model]["tasks"][task]


def test_installed_plugin_runs_scores_lists_and_reports(cli, tmp_path, plugin_path):
    listed = ok(cli("list", "--suite", "sample", cwd=tmp_path, extra_path=plugin_path)).stdout
    assert "demo.shout" in listed
    run = tmp_path / "run"
    ok(cli("run", "--model", "echo/upper", "--model", "echo/plain", "--tasks", "demo", "--out", run,
           "--bootstrap", "100", cwd=tmp_path, extra_path=plugin_path))
    # The plugin's model answered and the plugin's task scored it: upper-casing echo shouts, plain does not.
    assert task_result(run, "echo/upper", "demo.shout")["value"] == 1.0
    assert task_result(run, "echo/plain", "demo.shout")["value"] == 0.0
    spec = json.loads((run / "results.json").read_text())["spec"]
    assert spec["task_origins"] == {"demo.shout": {"module": "trustmh_demo_plugin.tasks"}}
    (run / "report.html").unlink()
    ok(cli("score", run, cwd=tmp_path, extra_path=plugin_path))
    assert task_result(run, "echo/upper", "demo.shout")["value"] == 1.0 and (run / "report.html").is_file()
    report = tmp_path / "r.html"
    ok(cli("report", run, "-o", report, cwd=tmp_path, extra_path=plugin_path))
    assert "demo.shout" in report.read_text()
    compared = ok(cli("compare", run, "--format", "json", cwd=tmp_path, extra_path=plugin_path)).stdout
    assert "demo.shout" in compared and "unknown to this trustmh" not in compared
    # Without the plugin, the run's task is named with what provides it.
    user_error(cli("score", run, cwd=tmp_path), "demo.shout", "trustmh_demo_plugin.tasks")


def test_unknown_provider_lists_plugin_providers(cli, tmp_path, plugin_path):
    proc = user_error(cli("run", "--model", "ecoh/x", "--dry-run", cwd=tmp_path, extra_path=plugin_path),
                      "did you mean echo/x?", "providers: openai, anthropic, replay, transcripts, baseline, hf, echo")
    assert "\n" not in proc.stderr.strip()


INCLUDED = '''
from trustmh import Item, MetricSpec, Model, Response, Score, Task, mean, register, register_model


@register
class Short(Task):
    id = "mine.short"
    pillar = "mine"
    title = "Short replies"
    dataset = "built-in"
    files = ()
    metric = MetricSpec("short_rate", higher_is_better=True, lo=0.0, hi=1.0)
    primary_value = "short"

    def load(self, data, ctx):
        return [Item(id="a", input={"text": "hi"}), Item(id="b", input={"text": "hello"})]

    def prompt(self, item, ctx):
        return [{"role": "user", "content": item.input["text"]}]

    def score(self, sample, reply, judged, ctx):
        return Score(values={"short": float(len(reply) < 10)})

    def aggregate(self, table, ctx):
        return {"short_rate": mean(table.col("short"))}


class Terse(Model):
    remote = False
    cacheable = False

    async def generate(self, request):
        return Response(text="ok", finish_reason="stop")


@register_model("terse")
def terse(name, **options):
    return Terse(options["spec"])


if __name__ == "__main__":
    raise SystemExit("an --include must not run the file's main block")
'''


def test_include_on_every_command_and_recorded_for_score(cli, tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(INCLUDED)
    run = tmp_path / "run"
    assert "mine.short" not in ok(cli("list", "--suite", "sample", cwd=tmp_path)).stdout
    assert "mine.short" in ok(cli("list", "--suite", "sample", "--include", f, cwd=tmp_path)).stdout
    user_error(cli("run", "--model", "terse/x", "--tasks", "mine", cwd=tmp_path), "unknown model provider 'terse'")
    ok(cli("run", "--include", f, "--model", "terse/x", "--tasks", "mine", "--out", run, "--bootstrap", "100",
           cwd=tmp_path))
    assert task_result(run, "terse/x", "mine.short")["value"] == 1.0
    origin = json.loads((run / "results.json").read_text())["spec"]["task_origins"]["mine.short"]
    assert origin["file"] == str(f.resolve())
    # The run recorded the included file, but a run folder is data: score names the file, never imports it.
    user_error(cli("score", run, cwd=tmp_path), "mine.short", f"--include {f.resolve()}", "never imported")
    ok(cli("score", run, "--include", f, cwd=tmp_path))
    ok(cli("report", run, "--include", f, cwd=tmp_path))
    assert "mine.short" in ok(cli("compare", run, run, "--include", f, "--format", "csv", cwd=tmp_path)).stdout
    moved = tmp_path / "elsewhere.py"
    shutil.move(f, moved)
    user_error(cli("score", run, cwd=tmp_path), "mine.short", f"--include {f}")
    ok(cli("score", run, "--include", moved, cwd=tmp_path))


def test_include_mistakes_are_one_line(cli, tmp_path):
    user_error(cli("list", "--include", tmp_path / "nope.py", cwd=tmp_path), "--include", "no such file")
    bad = tmp_path / "bad.py"
    bad.write_text("import not_a_module_anywhere_xyz\n")
    user_error(cli("run", "--include", bad, "--dry-run", cwd=tmp_path), "bad.py failed: ModuleNotFoundError")


def test_package_root_exports_are_lazy_and_complete():
    code = ("import sys, trustmh\n"
            "heavy = [m for m in ('numpy', 'torch', 'ray', 'openai', 'anthropic', 'jinja2') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "missing = [n for n in trustmh.__all__ if getattr(trustmh, n, None) is None]\n"
            "assert not missing, missing\n"
            "for n in ('Table', 'mean', 'render', 'DataError', 'Rubric', 'Verdicts', 'Judged', 'register_model'):\n"
            "    assert n in trustmh.__all__, n\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ,
                          "PYTHONPATH": SRC}, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_register_model_refuses_a_second_provider_of_one_name():
    from trustmh import register_model
    from trustmh.models import PROVIDERS, make_model
    with pytest.raises(ValueError, match="registered twice: openai"):
        register_model("openai")(lambda name, **o: None)
    assert PROVIDERS["openai"].__name__ == "_openai"
    assert make_model("baseline/refuse").spec == "baseline/refuse"


def readme_example() -> str:
    """The example of docs/python.md (Use from Python), the page the README points authors to."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "python.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_example_runs_and_its_run_is_scorable_with_include(cli, tmp_path):
    script = tmp_path / "my_eval.py"
    script.write_text(readme_example())
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": SRC})
    assert proc.returncode == 0, proc.stderr
    assert "help_rate 1.0" in proc.stdout
    run = tmp_path / "runs" / "mine"
    assert task_result(run, "kind/v1", "mine.reassurance")["value"] == 1.0
    # The task lived in a script that ran the evaluation itself: score does not run it again, it says what to do.
    user_error(cli("score", run, cwd=tmp_path), "mine.reassurance", f"--include {script}")
    ok(cli("score", run, "--include", script, cwd=tmp_path))
    assert task_result(run, "kind/v1", "mine.reassurance")["value"] == 1.0
    ok(cli("report", run, "--include", script, cwd=tmp_path))


def test_dry_run_calls_nothing_and_leaves_out_what_is_stored(cli, tmp_path):
    from trustmh.testing.fake_server import FakeLLMServer
    run = tmp_path / "run"
    with FakeLLMServer() as srv:
        args = ["run", "--model", "openai/fake", "--base-url", srv.openai_base_url, "--judge", "openai/judge",
                "--judge-base-url", srv.openai_base_url, "--tasks", "ethics,sycophancy,reliability,robustness.support",
                "--suite", "sample", "--out", run,
                "--bootstrap", "100", "--max-judge-failed", "1"]  # the fake judge's "OK" rates nothing: calls count here
        dry = ok(cli(*args, "--dry-run", cwd=tmp_path)).stdout
        assert srv.n_requests == 0 and not run.exists()
        row = next(line for line in dry.splitlines() if "ethics.reasoning" in line).split("│")
        samples, model_calls, model_tokens, judge_calls = (int(c) for c in row[3:7])
        assert samples > 0 and model_calls == samples and judge_calls == samples and model_tokens > 0
        assert "estimate (characters / 4)" in " ".join(dry.split())
        total = next(line for line in dry.splitlines() if "total" in line).split("│")
        ok(cli(*args, cwd=tmp_path))
        made = srv.n_requests
        asked = collections.Counter(r["model"] for r in srv.requests)
        # The model calls the dry run announced are the calls the run made (robustness shares its base task's
        # requests); the judge calls are an upper bound: every reply is "OK", so many judgements ask one body,
        # which is sent once.
        assert sum(asked.values()) == made and set(asked) == {"fake", "judge"}
        assert asked["fake"] == int(total[4]) < int(total[3])
        assert 0 < asked["judge"] < int(total[6])
        again = ok(cli(*args, "--dry-run", cwd=tmp_path)).stdout
        assert srv.n_requests == made  # still nothing sent
        row = next(line for line in again.splitlines() if "ethics.reasoning" in line).split("│")
        assert [int(c) for c in row[4:8]] == [0, 0, 0, 0]


def test_rescoring_needs_no_plugin_for_the_tested_model(cli, tmp_path):
    """The tested model is never called by `score`: a provider registered only in the script that ran the
    evaluation is not needed to re-score its built-in tasks."""
    script = tmp_path / "run_it.py"
    script.write_text(textwrap.dedent('''
        from pathlib import Path
        import trustmh
        from trustmh import Model, Response, register_model

        class Fixed(Model):
            remote = False
            cacheable = False
            async def generate(self, request):
                return Response(text="B", finish_reason="stop")

        @register_model("fixed")
        def fixed(name, **options):
            return Fixed(options["spec"])

        trustmh.run(trustmh.RunSpec(models=["fixed/b"], tasks="ethics", n_boot=100), Path("run"))
    '''))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": SRC})
    assert proc.returncode == 0, proc.stderr
    before = task_result(tmp_path / "run", "fixed/b", "ethics.reasoning")
    ok(cli("score", tmp_path / "run", cwd=tmp_path))
    assert task_result(tmp_path / "run", "fixed/b", "ethics.reasoning")["value"] == before["value"]


def test_render_and_rubric_take_a_task_s_own_template(tmp_path):
    from trustmh import Rubric, render, render_judge
    t = tmp_path / "judge.j2"
    t.write_text("Rate this reply: {{ reply }}\n")
    assert render(t, reply="hi") == "Rate this reply: hi"
    assert render_judge("safety_refusal_judge.j2", request="q", reply="r").count("r") > 0  # trustmh's own still work
    fenced = tmp_path / "fenced.j2"
    fenced.write_text("Rate this reply:\n<reply-{{ tag }}>\n{{ reply }}\n</reply-{{ tag }}>\n")
    assert re.fullmatch(r"Rate this reply:\n<reply-([0-9a-f]{12})>\nhi\n</reply-\1>", render_judge(fenced, reply="hi"))
    with pytest.raises(Exception, match="reply"):
        render(t)  # a missing value is an error, not an empty string
    rubric = Rubric("mine", (str(t),))
    before = rubric.version
    t.write_text("Rate this reply from 1 to 5: {{ reply }}\n")
    assert rubric.version != before  # a changed rubric text is a new version: stored verdicts are not reused
    assert rubric.source == [str(t)]


def test_include_takes_a_module_name(cli, tmp_path):
    pkg = tmp_path / "lib" / "my_tasks"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "short.py").write_text(INCLUDED)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "lib"), SRC])}
    assert "mine.short" in ok(cli("list", "--suite", "sample", "--include", "my_tasks.short", cwd=tmp_path,
                                  env_extra=env)).stdout
    user_error(cli("list", "--include", "my_tasks.nope", cwd=tmp_path, env_extra=env),
               "--include my_tasks.nope failed: ModuleNotFoundError")
    run = tmp_path / "run"
    ok(cli("run", "--include", "my_tasks.short", "--model", "terse/x", "--tasks", "mine", "--out", run,
           "--bootstrap", "100", cwd=tmp_path, env_extra=env))
    # Recorded by module name: named in the message, imported only when the user passes it again.
    user_error(cli("score", run, cwd=tmp_path, env_extra=env), "mine.short", "--include my_tasks.short")
    ok(cli("score", run, "--include", "my_tasks.short", cwd=tmp_path, env_extra=env))


def test_a_broken_plugin_is_named_in_one_line(cli, tmp_path, plugin_path):
    info = plugin_path / "trustmh_demo_plugin-0.1.dist-info" / "entry_points.txt"
    info.write_text(info.read_text().replace("trustmh_demo_plugin.tasks", "trustmh_demo_plugin.gone"))
    proc = user_error(cli("list", "--suite", "sample", cwd=tmp_path, extra_path=plugin_path),
                      "plugin 'demo' (trustmh.tasks = trustmh_demo_plugin.gone) failed to load: ModuleNotFoundError")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_plugin_model_is_keyed_by_the_server_it_is_asked_at():
    """Two servers behind one plugin spec are two models (their replies never answer for each other), and
    scoring's ModelRef names the same endpoint the built model does; offline providers ignore a base URL."""
    from trustmh import Model, register_model
    from trustmh.models import PROVIDERS, ModelRef, make_model

    @register_model("viaurl")
    def viaurl(name, **options):
        return Model(options["spec"])

    try:
        a = make_model("viaurl/m", base_url="http://127.0.0.1:8001/v1")
        b = make_model("viaurl/m", base_url="http://127.0.0.1:8002/v1")
        assert a.endpoint == "viaurl/m@http://127.0.0.1:8001/v1" and a.endpoint != b.endpoint
        assert ModelRef("viaurl/m", "http://127.0.0.1:8001/v1").endpoint == a.endpoint
        assert make_model("viaurl/m").endpoint == ModelRef("viaurl/m").endpoint == "viaurl/m"
        assert make_model("baseline/counselor", base_url="http://127.0.0.1:8001/v1").endpoint == "baseline/counselor"
    finally:
        PROVIDERS.pop("viaurl", None)


# --- issue 24: a run folder is data, never code; a plugin that exits is a plugin error ------------------

def _run_with_origins(tmp_path, origins: dict) -> Path:
    """A real run of a built-in task whose store then records `origins`, as a crafted run folder would."""
    from conftest import run_quiet, run_spec
    from trustmh.engine._store import Store
    run = tmp_path / "received"
    run_quiet(run_spec(models=["baseline/counselor"], suite="sample", tasks="ethics", n_boot=0), run)
    store = Store(run / "store.sqlite")
    store.set_meta("task_origins", origins)
    store.close()
    return run


def test_a_received_run_folder_never_runs_code(cli, tmp_path):
    marker = tmp_path / "pwned"
    payload = f"open({str(marker)!r}, 'w').write('ran')\n"
    (tmp_path / "evil_mod.py").write_text(payload)  # on sys.path: `python -m` puts the working folder there
    inside = tmp_path / "received_code.py"
    inside.write_text(payload)
    for origin in ({"module": "evil_mod"}, {"module": "trustmh_include_x", "file": str(inside)},
                   {"module": "trustmh_include_x", "file": "received_code.py"}):
        run = _run_with_origins(tmp_path, {"evil.task": origin})
        proc = cli("score", run, cwd=tmp_path)
        assert not marker.exists(), (origin, proc.stderr)  # the recorded origin is a hint, never imported
        user_error(proc, "evil.task", "--include", "never imported")
        shutil.rmtree(run)


@pytest.mark.parametrize("how", ["sys.exit(0)", "raise SystemExit('bye')", "raise KeyboardInterrupt"])
def test_an_include_that_exits_is_a_plugin_error(cli, tmp_path, how):
    f = tmp_path / "quits.py"
    f.write_text(f"import sys\n{how}\n")
    for args in (["list", "--suite", "sample"], ["run", "--suite", "sample", "--out", tmp_path / "r"]):
        user_error(cli(*args, "--include", f, cwd=tmp_path), "--include", "quits.py failed")
    assert not (tmp_path / "r").exists()


def test_an_entry_point_that_exits_is_a_plugin_error(cli, tmp_path, plugin_path):
    (plugin_path / "trustmh_demo_plugin" / "tasks.py").write_text("import sys\nsys.exit(0)\n")
    user_error(cli("list", "--suite", "sample", cwd=tmp_path, extra_path=plugin_path),
               "plugin 'demo'", "sys.exit(0)")


def test_task_ids_that_cannot_be_gated_are_refused_at_register():
    from trustmh import Task, register
    from trustmh.tasks import TASKS
    for bad in ("mine:short", "overall", "all", "x y", "../x", "mine.\x1b[31m", "", ".x", "a" * 101):
        cls = type("Bad", (Task,), {"id": bad})
        with pytest.raises(ValueError, match="is not allowed"):
            register(cls)
        assert bad not in TASKS
    assert all(re.fullmatch(r"[A-Za-z][\w-]*(\.[\w-]+)*", t) for t in TASKS)  # every built-in id passes
