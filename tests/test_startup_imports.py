"""A run's first request waits only for what building and sending it needs (issue 46 item 5, the small job):
results.json's pydantic models, scipy and the report are imported once the requests are in flight (by
phase 2 beside phase 1, or by the thread that warms up scoring and the report while phase 1 waits for its
first replies), never on the way to the first request. numpy is not on the list: the tasks compute with it
and are imported to build the prompts. Each check runs in a fresh interpreter, as a user's command does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
# Loaded only once something is scored or reported. pydantic is among them: typer 0.29 imported it to parse
# any command's flags (pyproject.toml holds typer below it).
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


# A child `trustmh run` that notes the modules its main thread (the one that sends the requests) imports
# before it opens its first connection, the first request. Other threads may import meanwhile: the run
# warms up what scoring and the report will need in a thread of its own while it waits for the first replies.
_MAIN_THREAD_BEFORE_FIRST_REQUEST = """
import json, socket, sys, threading
imported, sent = [], []
class Note:
    def find_spec(self, name, path=None, target=None):
        if not sent and threading.current_thread() is threading.main_thread():
            imported.append(name)
        return None
sys.meta_path.insert(0, Note())
connect = socket.socket.connect
def first(self, address):
    sent.append(True)
    return connect(self, address)
socket.socket.connect = first
sys.argv = ["trustmh", *sys.argv[1:]]
from trustmh.cli import main
try:
    main()
finally:
    print(json.dumps(imported if sent else None))
"""


def test_a_runs_first_request_waits_for_no_scoring_model_scipy_or_report(fake_llm, tmp_path):
    srv = fake_llm(reply=lambda body: "Answer: 1")
    out = tmp_path / "run"
    before = json.loads(_python(
        _MAIN_THREAD_BEFORE_FIRST_REQUEST, "run", "--model", "openai/m", "--judge", "openai/j", "--base-url",
        srv.openai_base_url, "--judge-base-url", srv.openai_base_url, "--tasks", "privacy.awareness_tier1",
        "--limit", "6", "--suite", "sample", "--no-progress", "--max-judge-failed", "1", "--out", str(out)))
    assert before is not None and "trustmh.engine.collect" in before  # the hook saw the run's first request
    assert [m for m in before if m.split(".")[0] == "scipy" or m.startswith(LATER)] == []
    # nor what only an error reply or a proxy reads (html, email.utils: importlib.metadata loads email itself)
    assert [m for m in before if m in ("urllib.request", "http.client", "html")] == []
    # only the selected task's pillar: every other is imported later, off the event loop's thread
    assert {m.split(".")[2] for m in before if m.startswith("trustmh.tasks.")} <= {"privacy", *_NOT_PILLARS}
    assert (out / "results.json").is_file() and (out / "report.html").is_file()  # and the run went on to the end


_NOT_PILLARS = {"base", "paper_names", "paper_rules", "versions", "labelled", "esconv_reference"}
_PILLAR_CHECK = """
import json, sys
import trustmh.tasks as t
def pillars():
    return sorted({m.split(".")[2] for m in sys.modules if m.startswith("trustmh.tasks.")} - NOT)
NOT = set(json.loads(sys.argv[1]))
seen = {"import": pillars()}
seen["resolve"] = ([x.id for x in t.resolve_tasks("privacy.leakage,ethics")], pillars())
seen["look-up"] = (t.TASKS["fairness.detection"].id if "fairness.detection" in t.TASKS else None, pillars())
from trustmh.scoring.pillars import paper_pillars  # scoring's own, which trustmh.tasks gave load_pillars
seen["rows"] = (sorted(paper_pillars()), pillars())
print(json.dumps(seen))
"""


def test_the_pillars_are_imported_when_first_needed_and_every_reader_sees_every_task():
    """Importing trustmh.tasks imports no pillar; resolving a selection only its pillars; a look-up of one
    id its pillar; reading the registry whole, or the paper's rows (from scoring, which imports no task),
    every pillar: whoever reads sees what every pillar imported first would show."""
    seen = json.loads(_python(_PILLAR_CHECK, json.dumps(sorted(_NOT_PILLARS))))
    assert seen["import"] == []
    assert seen["resolve"] == [["privacy.leakage", "ethics.reasoning"], ["ethics", "privacy"]]
    assert seen["look-up"][1] == ["ethics", "fairness", "privacy"]
    everything = ["crisis", "ethics", "fairness", "privacy", "reliability", "robustness", "safety", "sycophancy"]
    assert seen["rows"] == [everything, everything]
    listed = json.loads(_python("import json; from trustmh.tasks import TASKS; print(json.dumps(list(TASKS)))"))
    assert len(listed) == 24 and {t.split(".")[0] for t in listed} == set(everything)
    # the order tasks are listed in is the order every pillar imported at once gives, whatever came first
    later = json.loads(_python("import json; from trustmh.tasks import TASKS, resolve_tasks; resolve_tasks('privacy'); "
                               "print(json.dumps(list(TASKS)))"))
    assert later == listed


_SCIPY_AFTER_A_RUN = """
import json, sys
sys.argv = ["trustmh", *sys.argv[1:]]
from trustmh.cli import main
try:
    main()
finally:
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "scipy")))
"""


def test_a_run_with_free_text_or_closed_questions_loads_no_scipy(fake_llm, tmp_path):
    """The degenerate statistics' reply similarity (privacy.leakage's free-text stories) is computed with
    numpy alone: neither it nor a run of closed questions (privacy.awareness_tier1's ratings) imports scipy
    (0.13-0.27 s of CPU, most of it scipy's array-API layer)."""
    srv = fake_llm(reply=lambda body: "Answer: 1")
    loaded = {}
    for task in ("privacy.awareness_tier1", "privacy.leakage"):
        out = tmp_path / task
        loaded[task] = json.loads(_python(
            _SCIPY_AFTER_A_RUN, "run", "--model", "openai/m", "--judge", "openai/j", "--base-url",
            srv.openai_base_url, "--judge-base-url", srv.openai_base_url, "--tasks", task, "--limit", "6",
            "--suite", "sample", "--no-progress", "--max-judge-failed", "1", "--out", str(out)))
        assert (out / "results.json").is_file()
    assert loaded == {"privacy.awareness_tier1": [], "privacy.leakage": []}
    statistics = json.loads((tmp_path / "privacy.leakage" / "results.json").read_text())
    assert statistics["models"]["openai/m"]["tasks"]["privacy.leakage"]["near_duplicate_share"] is not None


_WHO_IMPORTS_NLTK = """
import json, sys, threading
who = []
class Note:
    def find_spec(self, name, path=None, target=None):
        if name == "nltk":
            who.append(threading.current_thread().name)
        return None
sys.meta_path.insert(0, Note())
sys.argv = ["trustmh", *sys.argv[1:]]
from trustmh.cli import main
try:
    main()
finally:
    print(json.dumps({"who": who, "scipy": [m for m in ("scipy", "scipy.stats", "sklearn") if m in sys.modules]}))
"""


def test_esconv_reference_metrics_import_nltk_ahead_without_scipy(fake_llm, upstream, tmp_path):
    """ESConv's reference metrics tokenise with nltk (~0.25 s to import, the whole package): the run's
    warm-up thread imports it while the first requests are out (Method.warm_up), not the event loop at the
    first reply scored; and without scipy.stats and sklearn, which nltk would otherwise load for features
    trustmh never uses."""
    srv = fake_llm(reply=lambda body: "Score: 4", latency_s=1.0)  # replies come well after the warm-up starts
    out = tmp_path / "run"
    got = json.loads(_python(
        _WHO_IMPORTS_NLTK, "run", "--model", "openai/m", "--judge", "openai/j", "--base-url", srv.openai_base_url,
        "--judge-base-url", srv.openai_base_url, "--tasks", "reliability.support", "--protocol", "paper",
        "--limit", "2", "--suite", "data", "--data-dir", str(upstream), "--no-progress",
        "--max-judge-failed", "1", "--out", str(out)))
    assert got == {"who": ["trustmh-while-waiting"], "scipy": []}
    task = json.loads((out / "results.json").read_text())["models"]["openai/m"]["tasks"]["reliability.support"]
    assert task["status"] == "ok" and task["metrics"]["ref_bleu-2"] is not None


def test_a_paper_protocol_runs_first_request_waits_for_no_template_engine(fake_llm, tmp_path):
    """Under --protocol paper the prompts are the authors' (their method files): jinja2, which renders
    trustmh's own templates and the report, is imported once the first requests are out."""
    import pytest
    from conftest import METHODS, METHODS_SKIP, UPSTREAM
    if not (UPSTREAM.is_dir() and METHODS.is_dir()):
        pytest.skip(METHODS_SKIP)
    srv = fake_llm(reply=lambda body: "Answer: 1")
    before = json.loads(_python(
        _MAIN_THREAD_BEFORE_FIRST_REQUEST, "run", "--model", "openai/m", "--judge", "openai/j", "--base-url",
        srv.openai_base_url, "--judge-base-url", srv.openai_base_url, "--tasks", "privacy,ethics", "--limit", "3",
        "--suite", "data", "--data-dir", str(UPSTREAM), "--methods-dir", str(METHODS), "--protocol", "paper",
        "--proxy-judge", "rules", "--no-progress", "--max-judge-failed", "1", "--out", str(tmp_path / "run")))
    assert before is not None and "trustmh.engine.collect" in before
    assert [m for m in before if m.split(".")[0] == "jinja2"] == []
    assert {m.split(".")[2] for m in before if m.startswith("trustmh.tasks.")} <= {"privacy", "ethics", *_NOT_PILLARS}
