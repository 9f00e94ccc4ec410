"""docs/ci-gate.md, executed as written as far as it runs offline: its workflow's steps run in order against
a loopback mirror of the data (for the network) and a loopback OpenAI-compatible server (for the model);
the page's call count, its cached pull and its example log are checked against what the steps print."""

import os
import re
import shlex
import subprocess
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

import yaml
from conftest import VERA, LoopbackHTTP, run_cli

from trustmh.testing.fake_server import FakeLLMServer

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "ci-gate.md").read_text(encoding="utf-8")
MODEL = "smoke-model"


def _block(lang: str) -> str:
    (text,) = re.findall(rf"```{lang}\n(.*?)```", DOC, re.S)
    return text


def _mirror(upstream: Path, methods: Path, root: Path):
    """The data-dir layout served over loopback, counting the files asked for."""
    for entry in upstream.iterdir():
        (root / entry.name).symlink_to(entry)
    (root / "methods").symlink_to(methods)  # the `methods` fixture: the authors' files and VERA-MH's code
    (root / "vera-mh").symlink_to(VERA)  # staged apart, in ../shared/data/external
    hits: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

        def do_GET(self):
            hits.append(unquote(urlsplit(self.path).path))
            super().do_GET()
    return LoopbackHTTP(Handler), hits


def _step(cmd: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    argv = shlex.split(cmd)
    assert argv[0] == "trustmh", cmd  # only trustmh's own commands run here
    return run_cli(*argv[1:], cwd=cwd, env=env, timeout=600)  # the command's own words (in this process)


def test_the_ci_guide_runs_as_written(upstream, methods, tmp_path):
    workflow = yaml.safe_load(_block("yaml"))
    job = workflow["jobs"]["trust"]
    steps = job["steps"]
    runs = [s for s in steps if "run" in s]
    # a pinned trustmh (a commit or release tag of its repository; tests/test_install.py runs this step),
    # the same pin keying the data cache
    (install,) = [s["run"] for s in runs if s["run"].startswith("pip install")]
    assert install == 'pip install "git+${{ vars.TRUSTMH_GIT }}@${{ vars.TRUSTMH_REV }}"', install
    (cache,) = [s for s in steps if s.get("uses", "").startswith("actions/cache@")]
    assert cache["with"]["key"].endswith("${{ vars.TRUSTMH_REV }}") and cache["with"]["path"] == ".trustmh-data"
    (tmp_path / "gate.toml").write_text(_block("toml"), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    (work / "gate.toml").write_text(_block("toml"), encoding="utf-8")

    def expand(text: str) -> str:
        return (text.replace("${{ github.workspace }}", str(work)).replace("${{ vars.MODEL }}", MODEL)
                .replace("${{ secrets.OPENAI_API_KEY }}", "sk-test-not-a-key"))

    mirror_root = tmp_path / "mirror"
    mirror_root.mkdir()
    mirror, hits = _mirror(upstream, methods, mirror_root)
    refusal = "I'm sorry, but I can't help with that."
    server = FakeLLMServer(reply=lambda body: refusal).start()
    try:
        base_env = {k: v for k, v in os.environ.items() if k not in ("TRUSTMH_METHODS_DIR", "CI")}
        base_env.update({k: expand(v) for k, v in job["env"].items()})
        base_env.update({"TRUSTMH_DATA_URL": mirror.url, "OPENAI_BASE_URL": server.openai_base_url})
        outputs = {}
        for s in runs[1:]:  # the install step ran already: this checkout is the pinned version
            env = dict(base_env, **{k: expand(v) for k, v in s.get("env", {}).items()})
            proc = _step(expand(s["run"]), work, env)
            outputs[s["name"]] = proc
            if s["name"] != "Gate":
                assert proc.returncode == 0, (s["name"], proc.stdout[-2000:], proc.stderr[-2000:])
        # the data came through the mirror once; a second pull (a cache hit) fetches nothing
        assert hits and "method files" in outputs[runs[1]["name"]].stdout
        hits.clear()
        again = _step("trustmh data pull", work, base_env)
        assert again.returncode == 0 and hits == [] and "0 data and 0 method files" in again.stdout
        # the call count the page states is the plan's, and what the run paid for
        planned = outputs["Plan (calls and prompt tokens; calls nothing)"].stdout
        total = next(ln for ln in planned.splitlines() if ln.lstrip("│ ").startswith("total")).split("│")
        assert int(total[4]) == 60 and int(total[6]) == 0, total  # model calls, judge calls
        assert "**60 model calls**" in DOC and "**no judge calls**" in DOC
        tokens = int(total[5])
        assert 20_000 <= tokens <= 30_000 and "about 25,000 prompt tokens" in DOC, tokens
        assert server.n_requests == 60
        # the gate's log is the page's example, for a model that refuses everything
        gate = outputs["Gate"]
        assert gate.returncode == 1, gate.stdout + gate.stderr
        shown = _block("text").replace("openai/MODEL", f"openai/{MODEL}").strip().splitlines()
        assert gate.stdout.strip().splitlines() == shown
    finally:
        server.stop()
        mirror.close()
