"""A fresh clone: the test suite's own behaviour without ../shared beside the checkout, and the README's
commands as a new user runs them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
import pytest
from conftest import METHODS
from trustmh.data.methods import method_files, read


@pytest.mark.needs_methods
def test_needs_a_method_file():
    read(next(iter(method_files())), METHODS)


def test_reads_a_method_file_unmarked():
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
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsf", "--strict-markers", "-p", "no:cacheprovider",
                           "tests"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)


def test_method_file_tests_skip_with_one_reason_without_shared_and_fail_in_ci(tmp_path):
    # A checkout with the suite's conftest and no ../shared sibling (tmp_path holds nothing else).
    project = tmp_path / "clone"
    (project / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "conftest.py", project / "tests" / "conftest.py")
    (project / "tests" / "test_probe.py").write_text(PROBE, encoding="utf-8")
    local = _pytest(project, ci=False)
    assert local.returncode == 1, local.stdout  # the unrelated failure still fails
    assert "2 failed, 1 passed, 1 skipped" in local.stdout, local.stdout
    missing = tmp_path / "shared" / "methods"
    assert f"SKIPPED [1] tests/test_probe.py:7: method files not found at {missing} (../shared/methods" in local.stdout
    # only the marked test skips: one that reads the files unmarked fails, naming the missing folder
    summary = local.stdout.split("short test summary")[-1]
    failed = sorted(ln.split(" ")[1] for ln in summary.splitlines() if ln.startswith("FAILED"))
    assert failed == ["tests/test_probe.py::test_fails_for_another_reason",
                      "tests/test_probe.py::test_reads_a_method_file_unmarked"], summary
    ci = _pytest(project, ci=True)
    assert ci.returncode == 4, ci.stdout + ci.stderr  # a usage error: nothing ran, nothing looks green
    assert "CI: upstream data missing" in ci.stdout + ci.stderr
    # with the data there but the method files absent, CI stops on the method files
    for sibling in ("upstream", "external/mentalalign", "external/vera-mh"):  # all CI needs but the method files
        (tmp_path / "shared" / "data" / sibling).mkdir(parents=True)
    ci = _pytest(project, ci=True)
    assert ci.returncode == 4 and f"CI: method files missing: {missing}" in ci.stdout + ci.stderr


# --------------------------------------------------------------------- one import for data and methods

import hashlib  # noqa: E402
import json  # noqa: E402

from conftest import make_synthetic_data  # noqa: E402

from trustmh.data.fetch import copy_roots, pull  # noqa: E402
from trustmh.data.manifest import DataFile, Dataset  # noqa: E402


def _tiny() -> dict[str, Dataset]:
    def entry(path, body):
        return DataFile(path, len(body), hashlib.sha256(body).hexdigest(), "http://127.0.0.1:9/x")
    return {"d": Dataset("d", "data", "MIT", "x/y@" + "0" * 40, files=(entry("d/a.txt", b"data\n"),)),
            "e": Dataset("e", "beyond the paper", "MIT", "x/z@" + "0" * 40, files=(entry("e/b.txt", b"more\n"),)),
            "methods": Dataset("methods", "m", "MIT", "x/y@" + "0" * 40,
                               files=(entry("methods/o+r/m.py", b"PROMPT = 'x'\n"),
                                      entry("methods/O+Vr/g/v.py", b"TEMPLATE = 'v'\n")))}


def _lay(root: Path, data_at: str | None, methods_at: str | None) -> None:
    if data_at is not None:
        (root / data_at / "d").mkdir(parents=True, exist_ok=True)
        (root / data_at / "d" / "a.txt").write_bytes(b"data\n")
        # a dataset beyond the paper's: beside the paper's data, or in ../shared under data/external/
        beyond = root / ("data/external" if data_at == "data/upstream" else data_at) / "e"
        beyond.mkdir(parents=True, exist_ok=True)
        (beyond / "b.txt").write_bytes(b"more\n")
    if methods_at is not None:
        (root / methods_at / "o+r").mkdir(parents=True, exist_ok=True)
        (root / methods_at / "o+r" / "m.py").write_bytes(b"PROMPT = 'x'\n")
        # a method beyond the paper's (VERA-MH's code): in ../shared staged apart, data/external/<repo>/method/
        beyond = root / "data/external/vr/method/g" if data_at == "data/upstream" else root / methods_at / "O+Vr/g"
        beyond.mkdir(parents=True, exist_ok=True)
        (beyond / "v.py").write_bytes(b"TEMPLATE = 'v'\n")


def test_pull_from_takes_data_and_method_files_in_any_layout(tmp_path):
    layouts = {  # name: (where data sits, where the method files sit, the folder given to --from)
        "data-dir layout": (".", "methods", "."),
        "a folder holding data/upstream and methods (../shared)": ("data/upstream", "methods", "."),
        "the upstream folder, methods beside its data/": ("data/upstream", "methods", "data/upstream"),
        "the methods folder itself": (None, "methods", "methods"),
    }
    for i, (name, (data_at, methods_at, given)) in enumerate(layouts.items()):
        src = tmp_path / f"copy{i}"
        _lay(src, data_at, methods_at)
        dest = tmp_path / f"data{i}"
        statuses = {s.path: s.state for s in pull(dest, from_dir=src / given, progress=False, manifest=_tiny())}
        assert statuses["methods/o+r/m.py"] == "present", name
        assert (dest / "methods/o+r/m.py").read_bytes() == b"PROMPT = 'x'\n", name
        assert statuses["methods/O+Vr/g/v.py"] == "present", name
        assert (dest / "methods/O+Vr/g/v.py").read_bytes() == b"TEMPLATE = 'v'\n", name
        assert statuses["d/a.txt"] == ("missing" if data_at is None else "present"), name
        assert statuses["e/b.txt"] == ("missing" if data_at is None else "present"), name
        if data_at is not None:
            assert (dest / "e/b.txt").read_bytes() == b"more\n", name
    # a folder holding neither is one line, not an import of nothing
    (tmp_path / "empty").mkdir()
    import pytest
    from trustmh.errors import UserError
    with pytest.raises(UserError, match="holds neither"):
        pull(tmp_path / "d9", from_dir=tmp_path / "empty", progress=False, manifest=_tiny())
    assert copy_roots(tmp_path / "empty", _tiny()) == (None, None)


def test_pull_from_the_methods_folder_says_in_one_short_line_what_it_took(fresh_cli, methods, tmp_path):
    proc = fresh_cli("data", "pull", "--from", methods, "--data-dir", tmp_path / "data")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.strip().splitlines()
    assert "0 data and 70 method files" in line and "not in the copy: 90 data files" in line
    # it listed all the files on one ~10 KB line; the folder's own name (longer under pytest-xdist) aside
    assert len(line.replace(str(tmp_path), "TMP")) < 300, line


def test_data_check_reads_the_method_files_where_run_does(fresh_cli, methods, tmp_path):
    def methods_row(*args, env=None):
        proc = fresh_cli("data", "check", "--data-dir", tmp_path, *args, env_extra=env)
        (row,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("│ methods ")]
        return row
    assert "missing" in methods_row() and "0/70" in methods_row()
    assert "present" in methods_row(env={"TRUSTMH_METHODS_DIR": str(methods)}) and "70/70" in methods_row(
        env={"TRUSTMH_METHODS_DIR": str(methods)})
    assert "70/70" in methods_row("--methods-dir", methods)


def test_run_exits_2_naming_the_fix_when_a_paper_task_lacks_its_method_file(fresh_cli, tmp_path):
    data = make_synthetic_data(tmp_path / "data", n_tier1=3, n_ethics=3)
    # a task the paper protocol runs with trustmh's own method (no method file): it still runs
    sample = Path(__file__).resolve().parents[1] / "src/trustmh/data/sample/usmle-mental"
    shutil.copytree(sample, data / "usmle-mental")
    proc = fresh_cli("run", "--data-dir", data, "--tasks", "privacy.awareness_tier1,reliability.knowledge",
               "--methods-dir", tmp_path / "no-methods", "--out", tmp_path / "run", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "not run for want of the authors' method files (privacy.awareness_tier1)" in proc.stderr
    assert "`trustmh data pull methods`" in proc.stderr
    # what did run is written all the same, and the offline default judged offline with data present
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["spec"]["judge"] == "rules" and "proxy_judge" not in res["spec"].get("options", {})
    assert res["models"]["baseline/counselor"]["tasks"]["reliability.knowledge"]["status"] == "ok"
    assert "needs an API key" not in proc.stderr


def test_key_hints_name_the_flag_of_the_role(fresh_cli, tmp_path):
    import pytest
    from trustmh.errors import UserError
    from trustmh.models import make_model
    for purpose, flag in (("model", "--base-url"), ("judge", "--judge-base-url"),
                          ("proxy", "--proxy-judge-base-url")):
        for spec in ("openai/gpt-4.1", "anthropic/claude-x"):
            with pytest.raises(UserError, match=f"needs an API key.*pass {flag} for"):
                make_model(spec, purpose=purpose)
    proc = fresh_cli("run", "--suite", "sample", "--tasks", "ethics", "--judge", "openai/gpt-4.1", "--out",
               tmp_path / "r", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 2 and "--judge-base-url" in proc.stderr and " --base-url" not in proc.stderr
