"""A run's first request waits only for what building and sending it needs (issue 46 item 5, the small job):
results.json's pydantic models, scipy and the report load after the requests are in flight (phase 2 beside
phase 1, the report's template while phase 1 waits), not at start-up. numpy is not on the list: the tasks
compute with it and are imported to build the prompts. Each check runs in a fresh interpreter, as a user's
command does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
# Loaded only once something is scored or reported; pydantic also comes with typer's parsing of the flags
# (typer 0.29 builds its coercions with it), which a bare import does not do.
LATER = ("trustmh.scoring.results", "pydantic", "scipy", "trustmh.report", "trustmh.analysis")


def _python(code: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": SRC, "OPENAI_API_KEY": "test-not-a-key"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_the_command_line_and_the_engine_import_nothing_of_scoring_or_the_report():
    loaded = json.loads(_python(
        "import json, sys\n"
        "import trustmh.cli, trustmh.engine, trustmh.models.openai_api, trustmh.engine.judge\n"
        f"print(json.dumps([m for m in {LATER!r} if m in sys.modules]))\n"))
    assert loaded == []


# A child `trustmh run` that notes the modules loaded when it opens its first connection (the first request).
_AT_FIRST_CONNECT = """
import json, socket, sys
seen = {}
connect = socket.socket.connect
def first(self, address):
    seen.setdefault("modules", [m for m in sys.modules])
    return connect(self, address)
socket.socket.connect = first
sys.argv = ["trustmh", *sys.argv[1:]]
from trustmh.cli import main
try:
    main()
finally:
    print(json.dumps(seen.get("modules")))
"""


def test_a_runs_first_request_is_sent_before_any_scipy_or_results_model(fake_llm, tmp_path):
    srv = fake_llm(reply=lambda body: "Answer: 1")
    out = tmp_path / "run"
    at_first = json.loads(_python(
        _AT_FIRST_CONNECT, "run", "--model", "openai/m", "--judge", "openai/j", "--base-url", srv.openai_base_url,
        "--judge-base-url", srv.openai_base_url, "--tasks", "privacy.awareness_tier1", "--limit", "6",
        "--suite", "sample", "--no-progress", "--max-judge-failed", "1", "--out", str(out)))
    assert at_first is not None and "trustmh.engine.collect" in at_first  # the hook saw the run's first request
    # The report's template is compiled in a thread of its own once the first requests are out, which may
    # import the results models about then; scipy comes in only with scoring.
    assert [m for m in at_first if m == "scipy" or m.startswith("scipy.")] == []
    assert (out / "results.json").is_file()  # and the run went on to score and report
