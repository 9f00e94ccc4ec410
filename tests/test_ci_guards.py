"""The suite's own guards in CI: missing upstream data stops the run with one line instead of letting every
real-data test skip, and hypothesis draws fixed examples. Checked on a copy of conftest.py in a folder
that has no ../shared beside it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = '''
from hypothesis import settings

def test_probe():
    assert {check}
'''


def run_copy(tmp_path: Path, ci: str | None, check: str) -> subprocess.CompletedProcess:
    tests = tmp_path / "repo" / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).with_name("conftest.py"), tests / "conftest.py")
    (tests / "test_probe.py").write_text(PROBE.format(check=check))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=tests.parent, env=env, capture_output=True, text=True, timeout=120)


def test_ci_without_upstream_data_fails_with_one_line(tmp_path):
    assert not (tmp_path / "shared").exists()
    proc = run_copy(tmp_path, "true", "True")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == [f"ERROR: CI: upstream data missing: {tmp_path / 'shared/data/upstream'} "
                     f"(../shared/data/upstream) not found"]
    assert "passed" not in proc.stdout


def test_outside_ci_hypothesis_explores(tmp_path):
    proc = run_copy(tmp_path, None, "settings.default.derandomize is False")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


@pytest.mark.parametrize("ci", ["", "0", "false"])
def test_ci_set_to_false_does_not_stop_the_run(tmp_path, ci):
    proc = run_copy(tmp_path, ci, "True")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_ci_with_data_runs_and_derandomises(tmp_path):
    for sibling in ("shared/data/upstream", "shared/data/external/mentalalign", "shared/data/external/vera-mh",
                    "shared/methods"):  # all CI requires
        (tmp_path / sibling).mkdir(parents=True)
    proc = run_copy(tmp_path, "true", "settings.default.derandomize is True and settings.default.database is None")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_the_files_handed_out_first_are_the_suites_and_go_first_whole():
    from types import SimpleNamespace

    from conftest import SLOW_FILES, pytest_collection_modifyitems
    here = Path(__file__).parent
    assert [n for n in SLOW_FILES if not (here / n).is_file()] == [], "a renamed or removed file: update SLOW_FILES"
    assert len(set(SLOW_FILES)) == len(SLOW_FILES)
    names = ["test_a.py", "test_a.py", SLOW_FILES[1], "test_b.py", SLOW_FILES[0], SLOW_FILES[1]]
    items = [SimpleNamespace(path=here / n, i=i) for i, n in enumerate(names)]
    pytest_collection_modifyitems(None, items)
    assert [(it.path.name, it.i) for it in items] == [(SLOW_FILES[0], 4), (SLOW_FILES[1], 2), (SLOW_FILES[1], 5),
                                                     ("test_a.py", 0), ("test_a.py", 1), ("test_b.py", 3)]


def test_no_test_runs_the_command_line_through_typers_runner():
    """Tests run `trustmh` through main() (the `cli`/`cli_here` fixtures, or a process of its own): typer's
    CliRunner calls the app beneath main(), so a UserError reached the test as an exception object where a
    user sees `error: ...` on stderr and exit code 2, and a test could pass on what no user sees."""
    import ast
    found = []
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
            found += [f"{path.name}:{node.lineno}" for n in names if n.startswith(("typer.testing", "click.testing"))]
    assert found == [], "run the command through the cli or cli_here fixture (tests/conftest.py) instead"


def test_the_controller_writes_the_rewritten_test_modules_the_workers_read(pytestconfig):
    """conftest._rewrite_test_modules_once (xdist's controller runs it) leaves this file's assertion-rewritten
    code where pytest's import reads it: should pytest's private functions change, this fails, rather than
    every worker quietly rewriting every file again."""
    from _pytest.assertion import rewrite
    from conftest import _rewrite_test_modules_once
    _rewrite_test_modules_once(pytestconfig)
    here = Path(__file__)
    pyc = rewrite.get_cache_dir(here) / (here.name[:-3] + rewrite.PYC_TAIL)
    assert rewrite._read_pyc(here, pyc) is not None
