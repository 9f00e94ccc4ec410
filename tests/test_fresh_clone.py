"""A fresh clone: the test suite's own behaviour without ../shared beside the checkout, and the README's
commands as a new user runs them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
from conftest import METHODS
from trustmh.data.methods import method_files, read


def test_needs_a_method_file():
    read(next(iter(method_files())), METHODS)


def test_fails_for_another_reason():
    assert 1 == 2


def test_passes():
    pass
'''


def _pytest(project: Path, ci: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TRUSTMH_METHODS_DIR")}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)


def test_method_file_tests_skip_with_one_reason_without_shared_and_fail_in_ci(tmp_path):
    # A checkout with the suite's conftest and no ../shared sibling (tmp_path holds nothing else).
    project = tmp_path / "clone"
    (project / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "conftest.py", project / "tests" / "conftest.py")
    (project / "tests" / "test_probe.py").write_text(PROBE, encoding="utf-8")
    local = _pytest(project, ci=False)
    assert local.returncode == 1, local.stdout  # the unrelated failure still fails
    assert "1 failed, 1 passed, 1 skipped" in local.stdout, local.stdout
    missing = tmp_path / "shared" / "methods"
    assert f"method files not found at {missing} (../shared/methods" in local.stdout
    assert "MethodError" not in local.stdout.split("short test summary")[-1]
    ci = _pytest(project, ci=True)
    assert ci.returncode == 4, ci.stdout + ci.stderr  # a usage error: nothing ran, nothing looks green
    assert "CI: upstream data missing" in ci.stdout + ci.stderr
    # with the data there but the method files absent, CI stops on the method files
    (tmp_path / "shared" / "data" / "upstream").mkdir(parents=True)
    ci = _pytest(project, ci=True)
    assert ci.returncode == 4 and f"CI: method files missing: {missing}" in ci.stdout + ci.stderr
