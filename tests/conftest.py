import functools
import json
import os
import subprocess
import sys
import threading

# pytest-xdist's workers are started with COLUMNS=80 and LINES=24 in their environment, which a pytest run
# without workers does not have; the terminal output the tests read must not depend on how they are run.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"  # the sibling folder the README describes: data/upstream and methods
UPSTREAM = SHARED / "data" / "upstream"
METHODS = SHARED / "methods"
NEEDS_METHODS = "needs_methods"  # the marker of a test that reads them (pytest_itemcollected)
METHODS_SKIP = f"method files not found at {METHODS} (../shared/methods; see README, Run the tests)"
MENTALALIGN = SHARED / "data" / "external" / "mentalalign"  # judge-agreement checks (issue 25)
VERA = SHARED / "data" / "external" / "vera-mh"  # crisis.conversation: VERA-MH's data, code and transcripts (issue 36)
# CI=true (any value but empty, 0 or false): tests that need something may not skip for want of it.
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")

# In CI hypothesis draws the same examples every run (a failure there is reproducible from the log, and a
# green run is not luck); locally it keeps exploring new ones. Loaded here, before any test module builds
# its own settings on top of the default profile.
settings.register_profile("trustmh-ci", derandomize=True, database=None, print_blob=True)
if IN_CI:
    settings.load_profile("trustmh-ci")


def pytest_configure(config):
    # Registered here, with the hook that reads it, so that --strict-markers accepts it wherever conftest goes.
    config.addinivalue_line("markers", f"{NEEDS_METHODS}: reads the authors' method files (../shared/methods); "
                                       "skipped without them outside CI")
    # In CI the real-data tests would otherwise all skip and the run would look green: stop before
    # collecting anything, with one line (pytest prints it as "ERROR: ..." and exits 4).
    if IN_CI and not UPSTREAM.is_dir():
        raise pytest.UsageError(f"CI: upstream data missing: {UPSTREAM} (../shared/data/upstream) not found")
    if IN_CI and not MENTALALIGN.is_dir():
        raise pytest.UsageError(f"CI: MentalAlign-70k missing: {MENTALALIGN} (../shared/data/external/mentalalign) not found")
    if IN_CI and not VERA.is_dir():
        raise pytest.UsageError(f"CI: VERA-MH missing: {VERA} (../shared/data/external/vera-mh) not found")
    if IN_CI and not METHODS.is_dir():
        raise pytest.UsageError(f"CI: method files missing: {METHODS} (../shared/methods) not found")
    # Some tests start a fresh interpreter that imports trustmh (each worker's fork server, the servers the
    # docs pages start, `python -m trustmh`, scripts). An installed package has its bytecode compiled at
    # install time; this source tree does not, and where PYTHONDONTWRITEBYTECODE is set (as on this
    # project's machines) each of them compiled all of trustmh again: ~0.4 s of CPU each. Compiled once
    # here, by the controller only (xdist workers start after it), into the tree's ignored __pycache__/;
    # Python checks each file's timestamp, so an edited file is compiled anew.
    if not hasattr(config, "workerinput"):
        import compileall
        compileall.compile_dir(str(ROOT / "src" / "trustmh"), quiet=1, workers=1)
        if getattr(config.option, "numprocesses", None):
            _rewrite_test_modules_once(config)
    # xdist hands whole files to workers (--dist loadfile), by default the files with most tests first; a
    # long file of few tests then starts last and the run ends waiting on it alone (the kill campaign, one
    # test of ~30 s, did). Handed out in collection order instead, which pytest_collection_modifyitems makes
    # longest first.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _rewrite_test_modules_once(config) -> None:
    """Write pytest's assertion-rewritten bytecode of every test module, once, before xdist's workers start.

    Every worker collects every file, and pytest rewrites a test module's asserts (an AST walk, ~4 s of
    CPU for these ~130 files) unless it finds the rewritten code cached in __pycache__/, which it does not
    write where PYTHONDONTWRITEBYTECODE is set: each worker rewrote every file again. Written here with
    pytest's own functions, which a worker's import reads back (it checks the source's mtime and size, so
    an edited file is rewritten anew). They are private: should a pytest release change them, this does
    nothing and the workers rewrite as before (tests/test_ci_guards.py then fails)."""
    try:
        from _pytest.assertion import rewrite
        state = config.stash[rewrite.assertstate_key]
        for source in sorted((ROOT / "tests").glob("test_*.py")) + [ROOT / "tests" / "conftest.py"]:
            cache = rewrite.get_cache_dir(source)
            pyc = cache / (source.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(source, pyc) is None and rewrite.try_makedirs(cache):
                stat, code = rewrite._rewrite_test(source, config)
                rewrite._write_pyc(state, code, stat, pyc)
    except (ImportError, AttributeError, KeyError, TypeError):
        pass


# The files that take longest, longest first: seconds of a 3-worker run on 2 cores (2026-12-03), 5 s and
# more. Sleeping files (faults, ray, the installs) start early too, so that others' work fills their waits.
# Every other file follows in collection order; a name no longer here is ignored (test_ci_guards checks).
SLOW_FILES = (
    "test_real_model.py", "test_faults.py", "test_no_broken_model_on_top.py", "test_install.py", "test_plugins.py",
    "test_conversation_engine.py", "test_ray.py", "test_parsers_property.py",
    "test_kills.py", "test_openai_transport.py", "test_docs_commands.py", "test_agreement.py",
    "test_docs_commands_more.py", "test_inference_gate.py", "test_bootstrap.py", "test_viewer_browser.py",
    "test_rank_table_browser.py", "test_hf.py", "test_ratings_inference.py", "test_report_browser.py",
    "test_ci_guards.py", "test_paper_rank_table.py", "test_run_guards.py", "test_refusal.py", "test_swmh_pull.py",
    "test_calibration.py", "test_fake_server.py", "test_limiter.py", "test_labels_and_compare.py",
    "test_secrets.py", "test_group_counts.py", "test_mentalalign.py", "test_data_pull.py", "test_spend_cap.py",
    "test_run_spec.py", "test_validate_judge.py", "test_ci_gate_doc.py", "test_robustness_paper.py",
    "test_conversation_report.py", "test_cli.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests stay in order


def pytest_itemcollected(item):
    # A test that reads the authors' method files (a --protocol paper run, a `data pull` of them, a file
    # read) says so with @pytest.mark.needs_methods: without ../shared/methods it is skipped with one reason,
    # as the `methods` fixture skips its tests. Only a test that says so: any other test that fails for want
    # of them fails. In CI the run has stopped before this (pytest_configure).
    if item.get_closest_marker(NEEDS_METHODS) is not None and not METHODS.is_dir():
        item.add_marker(pytest.mark.skip(reason=METHODS_SKIP))


class Lazy:
    """A module imported when a test first uses it, not when its file is collected: every xdist worker
    collects every file, and torch, transformers, the two SDKs and ray were ~5 s of each worker's start
    for the few files that use them. A module that is not installed skips the test, as importorskip."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        # pytest's collection probes every name of a module for private markers (`_fixture_function_marker`,
        # `__test__`): those are not the module's to answer; a version number is.
        if attr.startswith("_") and attr != "__version__":
            raise AttributeError(attr)
        return getattr(pytest.importorskip(self._name), attr)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    # Tests never read a real key or a user's data dir.
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TRUSTMH_DATA_DIR", "TRUSTMH_DATA_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def upstream() -> Path:
    if not UPSTREAM.is_dir():  # in CI the run has already stopped (pytest_configure)
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    return UPSTREAM


@pytest.fixture(scope="session")
def chromium() -> str:
    """The system Chromium for the browser tests (Playwright drives it; no browser is downloaded), or a skip;
    in CI its absence fails the test."""
    from trustmh.testing.browser import find_chromium
    exe = find_chromium()
    if exe is None:
        if IN_CI:
            pytest.fail("chromium is required in CI (.ci/run installs the Debian package)")
        pytest.skip("chromium not installed (apt-get install chromium); browser checks skipped")
    return exe


@pytest.fixture(scope="session")
def mentalalign() -> Path:
    if not MENTALALIGN.is_dir():  # in CI the run has already stopped (pytest_configure)
        pytest.skip(f"MentalAlign-70k not found at {MENTALALIGN}")
    return MENTALALIGN


@pytest.fixture(scope="session")
def vera() -> Path:
    """VERA-MH as staged (data/, method/, conversations/); skips without it (CI has stopped)."""
    if not VERA.is_dir():
        pytest.skip(f"VERA-MH not found at {VERA}")
    return VERA


def methods_with_vera(root: Path) -> Path:
    """A methods folder as `trustmh data pull methods` lays it out: the staged authors' files and VERA-MH's
    code (staged apart, under vera-mh/method) as SpringCare+VERA-MH/. Links, nothing copied."""
    out = root / "methods"
    out.mkdir(parents=True, exist_ok=True)
    for entry in METHODS.iterdir() if METHODS.is_dir() else ():
        (out / entry.name).symlink_to(entry)
    if VERA.is_dir():
        (out / "SpringCare+VERA-MH").symlink_to(VERA / "method")
    return out


@pytest.fixture(scope="session")
def methods(tmp_path_factory) -> Path:
    """The staged method files (../shared/methods) with VERA-MH's code beside them, as `trustmh data pull
    methods` lays them out (`methods_with_vera`); skips with one reason without them (CI has stopped)."""
    if not METHODS.is_dir():
        pytest.skip(METHODS_SKIP)
    return methods_with_vera(tmp_path_factory.mktemp("all-methods"))


def write_replay(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


# CLI runs on real data follow the paper's protocol by default, which reads the authors' method files:
# subprocesses started by tests find the staged copy here (a test may still set its own).
os.environ.setdefault("TRUSTMH_METHODS_DIR", str(METHODS))


def run_spec(**kw):
    """A RunSpec for tests: the trustmh protocol unless a test asks for the paper's (most tests were
    written for trustmh's parsing); the paper's reads the staged method files; the rules judge unless a
    test names one (never the paper's default judge, a real server)."""
    from trustmh.engine import RunSpec
    kw.setdefault("n_boot", 200)
    kw.setdefault("protocol", "trustmh")
    kw.setdefault("judge", "rules")
    if kw["protocol"] == "paper":
        kw.setdefault("methods_dir", str(METHODS))
    return RunSpec(**kw)


def run_quiet(spec, out: Path, **kw):
    from trustmh.engine import run
    return run(spec, out, **kw)


def loopback_spec(srv, tasks: str, models=("openai/m",), **kw):
    """A run_spec whose models and judge are all answered by the loopback server `srv` (FakeLLMServer)."""
    return run_spec(models=list(models), judge="openai/j", base_url=srv.openai_base_url,
                    judge_base_url=srv.openai_base_url, tasks=tasks, **kw)


@pytest.fixture
def spec_for():
    """loopback_spec: `spec_for(srv, tasks, models=("openai/m",), **run_spec's fields)`."""
    return loopback_spec


@pytest.fixture
def fake_llm():
    """Start loopback fake servers (`fake_llm(reply=..., **FakeLLMServer's options)`), each stopped when the
    test ends."""
    from trustmh.testing.fake_server import FakeLLMServer
    started = []

    def start(**kw):
        srv = FakeLLMServer(**kw)
        srv.__enter__()
        started.append(srv)
        return srv
    yield start
    for srv in reversed(started):
        srv.__exit__(None, None, None)


# --- the command line, as a user runs it --------------------------------------------------------------

FRESH = ("TRUSTMH_METHODS_DIR",)  # what a fresh install's environment does not hold (conftest sets it above)


# Variables read once, when a library is imported or trustmh's consoles are made: a command given other
# values for them is run in a process of its own, where they are read anew.
_READ_AT_IMPORT = ("COLUMNS", "HF_", "HUGGINGFACE", "TRANSFORMERS", "RAY_", "PYTHON")


def run_cli(*args, cwd=None, env=None, without=(), env_extra=None, extra_path=None, merged=False, timeout=300,
            process=False):
    """`trustmh ARGS` (each str()-ed) as `python -m trustmh.cli ARGS` would run it, returning a
    CompletedProcess: its environment is this process's (or `env`) less the variables `without` plus
    `env_extra`; stderr joined to stdout when `merged`.

    It runs in this process (`main()` with that environment, folder, argv and standard streams, restored
    after), the same code path as the command without the ~0.7 s of start-up a subprocess costs, which
    were half the suite's CPU. It runs in a process of its own when the test asks for one (`process=True`:
    what it checks is another process) or the command needs one: a plugin folder (`extra_path`) or
    `--include` (its tasks would stay registered in this process). That process is forked from a server
    that imported trustmh once (tests/forking.py), unless the environment changes a variable read at
    import (`_READ_AT_IMPORT`): then it is a fresh interpreter, this tree's src (after `extra_path`) first
    on PYTHONPATH."""
    base = os.environ if env is None else env
    environment = {k: v for k, v in base.items() if k not in without}
    environment.update(env_extra or {})
    args = tuple(map(str, args))
    changed = {k for k in environment.keys() | os.environ.keys() if environment.get(k) != os.environ.get(k)}
    if _read_at_import(changed, environment):
        environment["PYTHONPATH"] = os.pathsep.join([
            *([str(extra_path)] if extra_path else []), str(ROOT / "src"),
            *([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else [])])
        return subprocess.run([sys.executable, "-m", "trustmh.cli", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True, cwd=cwd,
                              env=environment, timeout=timeout)
    if process or extra_path or "--include" in args:
        import forking
        return forking.run(["-m", "trustmh.cli", *args], env=environment, cwd=cwd, path_first=extra_path,
                           merged=merged, timeout=timeout)
    return _run_in_this_process(args, environment, cwd, merged)


def _read_at_import(changed: set[str], environment: dict[str, str]) -> bool:
    from trustmh.cli._base import out
    # COLUMNS only sizes the consoles, which this process made as wide as the value here would make them.
    return any(k.startswith(_READ_AT_IMPORT) and not (k == "COLUMNS" and environment.get(k) == str(out.width))
               for k in changed)


def _set_environ(wanted: dict[str, str]) -> None:
    # Key by key, so that a variable both have is never missing, even for a moment (a thread may read it).
    for k in [k for k in os.environ if k not in wanted]:
        del os.environ[k]
    for k, v in wanted.items():
        if os.environ.get(k) != v:
            os.environ[k] = v


def _run_in_this_process(args, environment, cwd, merged) -> subprocess.CompletedProcess:
    import contextlib
    import io
    import traceback
    saved = dict(os.environ), os.getcwd(), sys.argv, sys.stdin
    out = io.StringIO()
    err = out if merged else io.StringIO()
    _set_environ(environment)
    try:
        if cwd is not None:
            os.chdir(cwd)
        sys.stdin = io.StringIO()  # as a subprocess's: nothing to read
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = _exit_code_of_main(args)
            except Exception:  # uncaught: a traceback on stderr and exit code 1, as a process would end
                traceback.print_exc()
                code = 1
    finally:
        environ, folder, sys.argv, sys.stdin = saved
        _set_environ(environ)
        os.chdir(folder)
    return subprocess.CompletedProcess([sys.executable, "-m", "trustmh.cli", *args], code, out.getvalue(),
                                       None if merged else err.getvalue())


@pytest.fixture
def cli():
    """run_cli: the `trustmh` command, in this process where it can be (see run_cli)."""
    return run_cli


def assert_user_error(proc, *needles):
    """What a user sees of a UserError: exit 2, no traceback, and each needle in stderr (main() prints
    'error: MESSAGE' there); `proc` as run_cli returns it. Returns `proc`."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + (proc.stderr or "")
    for n in needles:
        assert n in proc.stderr, proc.stderr
    return proc


@pytest.fixture
def cli_process():
    """run_cli in a process of its own always: for tests of what another process does (a lock it meets)."""
    return functools.partial(run_cli, process=True)


@pytest.fixture
def fresh_cli():
    """run_cli as on a fresh install: no TRUSTMH_METHODS_DIR in the environment."""
    return functools.partial(run_cli, without=FRESH)


def _exit_code_of_main(args) -> int:
    """`trustmh ARGS` through `main()` in this process, with the exit code the interpreter would give its
    SystemExit (a message is printed to stderr and exits 1); any other exception goes to the caller."""
    from trustmh import cli as trustmh_cli
    old = sys.argv
    sys.argv = ["trustmh", *map(str, args)]
    try:
        trustmh_cli.main()
        return 0
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    finally:
        sys.argv = old


def run_here(capsys, *args) -> tuple[int, str, str]:
    """`trustmh ARGS` in this process, a crash raised in the test: (exit code, stdout, stderr)."""
    code = _exit_code_of_main(args)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture
def cli_here(capsys):
    """run_here: the `trustmh` command in this process, `cli_here(*args) -> (code, out, err)`."""
    return functools.partial(run_here, capsys)


# --- reliability campaign helpers (docs/reliability.md) ---------------------------------------------

@pytest.fixture
def figures(request, record_property):
    """Figures a reliability test measured (docs/reliability.md lists those of a passing run). They go into
    the JUnit XML and, with TRUSTMH_FIGURES=path, one JSON line per test into that file."""
    figs: dict = {}
    yield figs
    for k, v in figs.items():
        record_property(k, v)
    path = os.environ.get("TRUSTMH_FIGURES")
    if path and figs:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"test": request.node.nodeid, **figs}, sort_keys=True, default=str) + "\n")


def make_synthetic_data(root: Path, n_tier1: int, n_ethics: int) -> Path:
    """A data dir with `n_tier1` privacy tier-1 prompts and `n_ethics` EthicMH dilemmas, each carrying an
    id (item-N, case-N) that `synthetic_reply` answers from, so any run of it is reproducible."""
    priv = root / "trustmh/privacy"
    priv.mkdir(parents=True)
    (priv / "tier_1.txt").write_text("".join(f"Information about item-{i}: how sensitive is it?\n"
                                             for i in range(n_tier1)))
    (priv / "tier_1_labels.txt").write_text("".join(f"{1 + i % 4 + (i * 7 % 13) / 26:.2f}\n" for i in range(n_tier1)))
    eth = root / "trustmh/ethics"
    eth.mkdir(parents=True)
    rows = ["index,subcategory,scenario,options,reasoning_task,expected_reasoning"]
    for i in range(n_ethics):
        rows.append(f'{i},Sub {i % 3},"A counsellor faces case-{i}.","A.one\nB.two\nC.three\nD.four",'
                    f'Pick one.,{"ABCD"[i * 3 % 4]}')
    (eth / "EthicMH.csv").write_text("\n".join(rows) + "\n")
    return root


def synthetic_reply(body: dict) -> str:
    """Replies for `make_synthetic_data` prompts. The answer comes first, so a reply cut to half its words
    (the fake server's finish_reason=length fault) still holds it."""
    import re
    text = body["messages"][-1]["content"]
    n = int(re.search(r"(?:item|case)-(\d+)", text).group(1))
    if "APA" in text:  # the ethics judge rubric
        scores = {f"sc{k}": 1 + (n * k) % 5 for k in range(1, 6)}
        # Fenced, so that the paper's parser (fenced object or the whole text) reads it as trustmh's does.
        return "```json " + json.dumps(scores, separators=(",", ":")) + " ``` rationale:" + " fine" * 6
    if "case-" in text:
        return f"Answer: {'ABCD'[n % 4]}." + " because" * 8
    return f"Answer: {1 + n % 4})" + " because" * 8


class LoopbackHTTP:
    """A threaded HTTP server on 127.0.0.1 for one handler class, started at once; `url` is its base URL.
    Use as a context manager or call close()."""

    def __init__(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def fenced(text: str, name: str) -> str:
    """The text of the one `<name-TAG>` block of a judge prompt (tasks.base.render_judge fences each text
    in tags derived from the inputs); fails unless there is exactly one such block."""
    import re
    blocks = re.findall(rf"<{name}-([0-9a-f]{{12}})>\n(.*?)\n</{name}-\1>", text, re.S)
    assert len(blocks) == 1, f"{len(blocks)} <{name}-...> blocks in: {text[:300]!r}"
    return blocks[0][1]
