"""Installing trustmh as the README, the install page and the CI guide say, from its repository: each
documented install command, run as written by bash, against a local clone of this repository through a
`file://` URL, offline, with the current pip and with pip 23 (the one Python 3.11's ensurepip carries; it
still refuses some URL forms that newer pips take).

The clone has no release tag, as the repository has none: `TRUSTMH_REV` is its commit, as the pages say;
the tag form the pages give for when a release exists is run against a tag made in the clone. Only the
environment is added to the commands, as a user's shell would have it: `TRUSTMH_GIT` and `TRUSTMH_REV`, a
`pip` and a `python` on PATH, and pip's own variables for offline use (no index, no dependencies: they are
this environment's; no build isolation: the build backend is this environment's setuptools; `PIP_TARGET`,
a fresh folder standing in for a new virtual environment, so nothing is installed over the environment the
suite runs in). Each installed copy then runs trustmh from that folder: `--version`, and an offline run of
the sample suite, which needs the package data (templates, sample suite, schema) the install must carry."""

import ensurepip
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# pip 23, as a wheel pip runs from (how ensurepip itself runs it); absent on a Python that carries pip >= 24
PIP23 = next(iter(sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-23.*.whl"))), None)
PIPS = [pytest.param("current", id="pip-current"),
        pytest.param("23", id="pip-23", marks=pytest.mark.skipif(PIP23 is None, reason="no pip 23 wheel"))]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A clone of this repository, as its URL and its commit; it has no tag, like the repository."""
    clone = tmp_path_factory.mktemp("repo") / "trustmh"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, capture_output=True)
    assert subprocess.run(["git", "-C", str(clone), "tag"], check=True, capture_output=True, text=True).stdout == ""
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    return clone, commit


def _shell(command: str, tmp: Path, pip: str, rev: str, git_url: str) -> subprocess.CompletedProcess:
    """`command` exactly as a page writes it, in bash, in `tmp`, installing into `tmp/site`."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    runs_pip = f'"{sys.executable}" -m pip' if pip == "current" else f'"{sys.executable}" "{PIP23}/pip"'
    for name, line in (("pip", runs_pip), ("python", f'"{sys.executable}"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {line} "$@"\n')
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", TRUSTMH_GIT=git_url, TRUSTMH_REV=rev, PIP_NO_INDEX="1",
               PIP_NO_DEPS="1", PIP_TARGET=str(tmp / "site"), PIP_DISABLE_PIP_VERSION_CHECK="1",
               # pip reads a --no-X variable as the value of X: "0" here is --no-build-isolation
               PIP_NO_BUILD_ISOLATION="0")
    return subprocess.run(["bash", "-c", command], cwd=tmp, env=env, capture_output=True, text=True, timeout=600)


def _installs(command: str, tmp: Path, pip: str, rev: str, git_url: str, run: bool = True) -> None:
    proc = _shell(command, tmp, pip, rev, git_url)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (tmp / "site" / f"trustmh-{VERSION}.dist-info").is_dir()
    _runs_from(tmp / "site", tmp, run)


def _runs_from(target: Path, tmp: Path, run: bool = True) -> None:
    """trustmh as installed in `target` (not this checkout's): its version, and an offline run (`run`; the
    same setuptools builds the same files from one commit for every URL form, so one form's run is kept
    for the pip-23 and tag forms' installs, which check what differs: the URL and the pip that read it)."""
    env = dict(os.environ, PYTHONPATH=str(target))
    where = subprocess.run([sys.executable, "-c", "import trustmh; print(trustmh.__file__)"], env=env, cwd=tmp,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(target), where
    version = subprocess.run([sys.executable, "-m", "trustmh", "--version"], env=env, cwd=tmp, capture_output=True,
                             text=True, check=True).stdout
    assert version.strip() == f"trustmh {VERSION}"
    if not run:
        return
    (tmp / "work").mkdir(exist_ok=True)
    run = subprocess.run([sys.executable, "-m", "trustmh", "run", "--tasks", "ethics", "--bootstrap", "0", "--out",
                          "r", "--quiet"], env=env, cwd=tmp / "work", capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    res = json.loads((tmp / "work" / "r" / "results.json").read_text())
    assert res["versions"]["trustmh"] == VERSION and res["models"]["baseline/counselor"]["tasks"]["ethics.reasoning"]["n"] > 0
    assert (tmp / "work" / "r" / "report.html").stat().st_size > 10_000


def _install_section(page: str, heading: str) -> tuple[list[str], str]:
    """The section's shell blocks, and its prose."""
    text = (ROOT / page).read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```\n(.*?)```", section, re.S)], section


def _readme_install() -> list[str]:
    readme, _ = _install_section("README.md", "## Install\n")
    page, _ = _install_section("docs/install.md", "# Install\n")
    assert page == readme  # the install page says the same: running the README's commands runs both
    return readme


@pytest.mark.parametrize("pip", PIPS)
def test_the_readme_installs_from_the_git_url_at_a_commit(repo, tmp_path, pip):
    clone, commit = repo
    git, _ = _readme_install()
    assert git == 'pip install "git+$TRUSTMH_GIT@$TRUSTMH_REV"'
    _installs(git, tmp_path, pip, commit, clone.as_uri(), run=pip == "current")


def test_the_readme_builds_a_wheel_from_a_checkout_and_installs_it(repo, tmp_path):
    clone, commit = repo
    _, wheel = _readme_install()
    _installs(wheel, tmp_path, "23" if PIP23 else "current", commit, clone.as_uri())
    assert [w.name for w in (tmp_path / "dist").glob("*.whl")] == [f"trustmh-{VERSION}-py3-none-any.whl"]


def test_the_tag_form_installs_a_release(repo, tmp_path):
    """The pages' tag form, for when a release exists: the same command with the tag as TRUSTMH_REV."""
    clone, _ = repo
    _, prose = _install_section("README.md", "## Install\n")
    assert f"`TRUSTMH_REV` is the tag, for example `v{VERSION}`" in prose.replace("\n", " ")
    tagged = tmp_path / "tagged"
    subprocess.run(["git", "clone", "--quiet", str(clone), str(tagged)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(tagged), "tag", f"v{VERSION}"], check=True, capture_output=True)
    git, _ = _readme_install()
    _installs(git, tmp_path, "current", f"v{VERSION}", tagged.as_uri(), run=False)


@pytest.mark.skipif(PIP23 is None, reason="no pip 23 wheel")
def test_pip_23_refuses_the_named_form_with_a_file_url_as_the_pages_say(repo, tmp_path):
    """The extras form (`trustmh[hf] @ git+URL@REV`), which the pages warn pip 23 refuses with `file:///`."""
    clone, commit = repo
    _, prose = _install_section("README.md", "## Install\n")
    assert "pip 23 refuses this named form with a `file:///path` URL" in prose.replace("\n", " ")
    named = 'pip install "trustmh @ git+$TRUSTMH_GIT@$TRUSTMH_REV"'
    refused = _shell(named, tmp_path, "23", commit, clone.as_uri())
    assert refused.returncode != 0 and "Invalid requirement" in refused.stdout + refused.stderr
    assert not (tmp_path / "site").exists()


def test_the_ci_guide_installs_from_a_commit_of_the_repository(repo, tmp_path):
    clone, commit = repo
    doc = (ROOT / "docs" / "ci-gate.md").read_text(encoding="utf-8")
    (workflow,) = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    steps = yaml.safe_load(workflow)["jobs"]["trust"]["steps"]
    (install,) = [s["run"] for s in steps if s.get("run", "").startswith("pip install")]
    # the Actions variables are the shell's here, as the workflow fills them in
    command = install.replace("${{ vars.TRUSTMH_GIT }}", "$TRUSTMH_GIT").replace("${{ vars.TRUSTMH_REV }}", "$TRUSTMH_REV")
    assert "${{" not in command
    # The README's command, which test_the_readme_installs_from_the_git_url_at_a_commit installs as written
    # (with the machine's pip 23 and the current pip): the same words need no second install here.
    git, _ = _readme_install()
    assert command == git, (command, git)
