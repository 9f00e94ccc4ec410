"""The longest pages of tests/test_docs_commands.py, run in a file of their own (see that file)."""

import pytest

from test_docs_commands import LONGEST, ROOT, Sandbox, _mirror, judged_only, page_commands, run_page, stand_in
from trustmh.testing.fake_server import FakeLLMServer


@pytest.mark.parametrize("name", LONGEST)
def test_the_page_runs_as_written(name, tmp_path, upstream, methods):
    run_page(ROOT / "docs" / name, tmp_path)


def test_the_quickstarts_first_run_and_its_smoke_run_need_no_key(tmp_path, upstream, methods):
    """Issue 47: the quickstart's smoke run against a local server stopped for want of the paper's judge's
    key. Its first run (an offline model) and the smoke run (a local server, judged by the rules) run as
    written with no key in the environment and no provider's server to reach."""
    page = ROOT / "docs" / "quickstart.md"
    runs = [c for c in page_commands(page) if c.startswith("trustmh run ")]
    smoke = [c for c in runs if "--base-url http://127.0.0.1:8000/v1" in c]
    assert len(smoke) == 1 and runs[0] != smoke[0]
    mirror_root = tmp_path / "mirror"
    mirror_root.mkdir()
    with FakeLLMServer(reply=stand_in) as server, _mirror(mirror_root) as mirror:
        box = Sandbox(tmp_path, page, server, mirror.url)
        for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
            box.env.pop(name)
        for command in (runs[0], smoke[0]):
            proc = box.run(command)
            assert proc.returncode == 0 or judged_only(proc), (command, proc.stderr[-2000:])
            assert "API key" not in proc.stderr
        assert server.n_requests > 0  # the smoke run's model was asked, at the page's local server
