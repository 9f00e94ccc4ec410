"""Installing trustmh as the CI guide and the README say, from its repository: the guide's install step
(`pip install "trustmh @ git+${{ vars.TRUSTMH_GIT }}@vX"`) and the README's two commands (the git URL at the
tag, and a wheel built by `python -m build` from a checkout of it), run against a local clone of this
repository tagged as a release is, through a `file://` URL, offline.

What the test adds to the commands is only what offline needs: pip's `--no-index --no-deps` (the
dependencies are this environment's) and `--target DIR` (so nothing is installed over the environment the
suite runs in), `python -m build --no-isolation` (the build backend is this environment's setuptools), and
`build` itself comes from the dev extra. Each installed copy then runs trustmh from that folder: `--version`,
and an offline run of the sample suite, which needs the package data (templates, sample suite, schema) the
install must carry."""

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
OFFLINE = ["--no-index", "--no-deps", "--no-build-isolation", "--quiet"]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A clone of this repository with the release tag, as its URL."""
    clone = tmp_path_factory.mktemp("repo") / "trustmh"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(clone), "tag", f"v{VERSION}"], check=True, capture_output=True)
    return clone.as_uri()


def _pip(command: str, target: Path, cwd: Path) -> None:
    argv = shlex.split(command)
    assert argv[:2] == ["pip", "install"], command
    proc = subprocess.run([sys.executable, "-m", *argv, *OFFLINE, "--target", str(target)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def _runs_from(target: Path, tmp: Path) -> None:
    """trustmh as installed in `target` (not this checkout's): its version, and an offline run."""
    env = dict(os.environ, PYTHONPATH=str(target))
    where = subprocess.run([sys.executable, "-c", "import trustmh; print(trustmh.__file__)"], env=env, cwd=tmp,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(target), where
    version = subprocess.run([sys.executable, "-m", "trustmh", "--version"], env=env, cwd=tmp, capture_output=True,
                             text=True, check=True).stdout
    assert version.strip() == f"trustmh {VERSION}"
    (tmp / "work").mkdir(exist_ok=True)
    run = subprocess.run([sys.executable, "-m", "trustmh", "run", "--tasks", "ethics", "--bootstrap", "0", "--out",
                          "r", "--quiet"], env=env, cwd=tmp / "work", capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    res = json.loads((tmp / "work" / "r" / "results.json").read_text())
    assert res["versions"]["trustmh"] == VERSION and res["models"]["baseline/counselor"]["tasks"]["ethics.reasoning"]["n"] > 0
    assert (tmp / "work" / "r" / "report.html").stat().st_size > 10_000


def test_the_ci_guide_installs_from_a_tag_of_the_repository(release, tmp_path):
    doc = (ROOT / "docs" / "ci-gate.md").read_text(encoding="utf-8")
    (workflow,) = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    steps = yaml.safe_load(workflow)["jobs"]["trust"]["steps"]
    (install,) = [s["run"] for s in steps if s.get("run", "").startswith("pip install")]
    assert f"@v{VERSION}\"" in install and "${{ vars.TRUSTMH_GIT }}" in install
    _pip(install.replace("${{ vars.TRUSTMH_GIT }}", release), tmp_path / "site", tmp_path)
    assert (tmp_path / "site" / f"trustmh-{VERSION}.dist-info").is_dir()
    _runs_from(tmp_path / "site", tmp_path)


def _readme_install() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```\n(.*?)```", section, re.S)]


def test_the_readme_installs_from_the_git_url_at_the_tag(release, tmp_path):
    git, _ = _readme_install()
    assert git == f'pip install "trustmh @ git+$TRUSTMH_GIT@v{VERSION}"'
    _pip(git.replace("$TRUSTMH_GIT", release), tmp_path / "site", tmp_path)
    _runs_from(tmp_path / "site", tmp_path)


def test_the_readme_builds_a_wheel_and_installs_it(release, tmp_path):
    _, wheel = _readme_install()
    steps = [s.strip() for s in wheel.replace('"$TRUSTMH_GIT"', release).split("&&")]
    assert steps[1] == "pip install build"  # the dev extra has it: offline, it is not fetched
    clone, build, install = steps[0], steps[2], steps[3]
    subprocess.run(shlex.split(clone), cwd=tmp_path, check=True, capture_output=True)
    argv = shlex.split(build)
    assert argv[:4] == ["python", "-m", "build", "--wheel"]
    proc = subprocess.run([sys.executable, *argv[1:], "--no-isolation"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    built = list((tmp_path / "trustmh-src" / "dist").glob("*.whl"))
    assert [w.name for w in built] == [f"trustmh-{VERSION}-py3-none-any.whl"] and install.endswith(built[0].name)
    _pip(install, tmp_path / "site", tmp_path)
    _runs_from(tmp_path / "site", tmp_path)
