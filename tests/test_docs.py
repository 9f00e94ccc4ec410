"""The documentation site builds with `mkdocs build --strict` (a broken link, a missing anchor or a page left
out of the navigation fails it), offline; its API page documents exactly `trustmh.__all__`, each from its
docstring; every page of docs/ is in the site, and the README links only to pages that exist."""

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

import trustmh

ROOT = Path(__file__).resolve().parents[1]


def _nav_pages(nav) -> list[str]:
    out = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_the_site_builds_strict_offline_with_the_api_of_all(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT / "src"))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    documented = re.findall(r'<h3 id="trustmh\.[\w.]*?\.?(\w+)"', api)
    assert sorted(documented) == sorted(trustmh.__all__)
    # each from its docstring: the first line of Task's and of run's docstrings are on the page
    for name in ("Task", "run", "RunSpec"):
        first = (getattr(trustmh, name).__doc__ or "").strip().splitlines()[0]
        assert first and first.split()[0] in api, name
    # no page pulls anything from the network when read: no web fonts, no CDN scripts
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis" not in index and "cdn." not in index


def test_every_page_is_in_the_navigation_and_the_readme_links_resolve():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", ""))
    nav = set(_nav_pages(config["nav"]))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages == nav, (pages ^ nav)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local and all((ROOT / link).exists() for link in local), [x for x in local if not (ROOT / x).exists()]


def test_every_flag_of_run_is_in_its_table_and_every_row_is_a_flag():
    """docs/run.md's flags table and `trustmh run`'s options are the same set (a `--no-x` form aside)."""
    import typer
    from trustmh.cli import app
    command = typer.main.get_command(app).commands["run"]
    options = {o for p in command.params for o in p.opts if o.startswith("--")} - {"--help"}
    rows = [ln.split("|")[1] for ln in (ROOT / "docs" / "run.md").read_text(encoding="utf-8").splitlines()
            if ln.startswith("| `")]
    documented = {flag for row in rows for flag in re.findall(r"--[a-z][a-z-]*", row)}
    assert options <= documented, sorted(options - documented)
    secondary = {o for p in command.params for o in p.secondary_opts}
    assert documented <= options | secondary, sorted(documented - options - secondary)
