"""The report in a real headless Chromium (the Debian `chromium`): it loads without console errors,
shows the leaderboard and radar, its filters and pages work, and a reply carrying script runs nothing.
A full-page screenshot is kept in test-artifacts/report.png."""

import asyncio
import json
import os
from pathlib import Path

import pytest

from conftest import run_quiet, run_spec, write_replay
from test_report import EVIL, sample_items
from trustmh.compare import load_run
from trustmh.report import write_report
from trustmh.report.browser import Chromium, find_chromium

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
PAGE_SIZE = 4


@pytest.fixture(scope="module")
def chromium():
    exe = find_chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI (.ci/run installs the Debian package)")
        pytest.skip("chromium not installed (apt-get install chromium); browser checks skipped")
    return exe


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Two models on the sample suite: a replay whose first EthicMH reply is a script injection, and the
    counselor baseline. Returns (report path, samples per model, ethics items)."""
    tmp = tmp_path_factory.mktemp("browser")
    ethics = sample_items("ethics.reasoning")
    tier1 = sample_items("privacy.awareness_tier1")
    recs = [{"task": "ethics.reasoning", "item_id": it.id, "response": EVIL if i == 0 else "Answer: A"}
            for i, it in enumerate(ethics)]
    recs += [{"task": "privacy.awareness_tier1", "item_id": it.id, "response": "Answer: 2"} for it in tier1]
    replay = write_replay(tmp / "replies.jsonl", recs)
    spec = run_spec(models=[f"replay/{replay}", "baseline/counselor"], tasks="ethics,privacy.awareness_tier1",
                    suite="sample")
    run_quiet(spec, tmp / "run")
    path = write_report([load_run(tmp / "run")], tmp / "run" / "report.html", page_size=PAGE_SIZE)
    return path, len(ethics) + len(tier1), len(ethics)


def run_page(chromium, path: Path, check):
    async def go():
        async with Chromium(chromium) as page:
            await page.goto(path.as_uri())
            return await check(page)
    return asyncio.run(go())


def test_report_in_chromium(chromium, report):
    path, per_model, n_ethics = report
    total = 2 * per_model

    async def check(page):
        await page.wait_for("document.body.getAttribute('data-samples-ready') === '1'")
        assert await page.eval("document.querySelectorAll('table.board tbody tr').length") == 2
        assert await page.eval("document.querySelectorAll('#radar g.series').length") == 2
        assert await page.eval("document.querySelectorAll('#sample-rows tr.sample').length") == PAGE_SIZE
        pages = -(-total // PAGE_SIZE)
        assert await page.eval("document.getElementById('page-info').textContent") == f"page 1 of {pages}"
        await page.click("#next")
        assert await page.eval("document.getElementById('page-info').textContent") == f"page 2 of {pages}"

        # Filter by task: only that task's rows, and the count says how many of all.
        await page.eval("""(() => { const s = document.getElementById('f-task');
            s.value = [...s.options].find(o => o.textContent === 'ethics.reasoning').value;
            s.dispatchEvent(new Event('change')); })()""")
        tasks = await page.eval("[...document.querySelectorAll('#sample-rows tr.sample td:nth-child(4)')]"
                                ".map(td => td.textContent)")
        assert tasks and set(tasks) == {"ethics.reasoning"}
        assert await page.eval("document.getElementById('f-count').textContent") == \
            f"{2 * n_ethics} of {total} samples"

        # Search for the injected reply, open it: it shows as text and nothing ran.
        await page.eval("""(() => { const q = document.getElementById('f-search'); q.value = '__pwned';
            q.dispatchEvent(new Event('input')); })()""")
        await page.wait_for("document.getElementById('f-count').textContent.startsWith('1 of')")
        await page.click("#sample-rows tr.sample")
        reply = await page.eval("document.querySelector('#sample-rows .detail pre.reply').textContent")
        assert reply == EVIL
        assert await page.eval("typeof window.__pwned") == "undefined"
        assert await page.eval("document.querySelectorAll('#samples img, #samples a[href], #samples script')"
                               ".length") == 0
        # The artifact shows the page with the injected reply opened, as text.
        shot = await page.screenshot(ARTIFACTS / "report.png")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        # The "show samples" button of a task sets the task filter.
        await page.eval("document.getElementById('f-search').value = ''")
        await page.click("button[data-task-id='privacy.awareness_tier1']")
        tasks = await page.eval("[...document.querySelectorAll('#sample-rows tr.sample td:nth-child(4)')]"
                                ".map(td => td.textContent)")
        assert tasks and set(tasks) == {"privacy.awareness_tier1"}
        assert await page.eval("typeof window.__pwned") == "undefined"
        assert page.errors == []

    run_page(chromium, path, check)


def test_the_marker_check_detects_running_script(chromium, tmp_path):
    """The check above can fail: the same payload put into a page as markup does set the marker."""
    bad = tmp_path / "unsafe.html"
    payload = json.dumps(EVIL).replace("</", "<\\/")  # keep the inline script in one piece
    bad.write_text(f"<!doctype html><html><body><div id='x'></div><script>"
                   f"document.getElementById('x').innerHTML = {payload};</script></body></html>")

    async def check(page):
        await page.wait_for("window.__pwned === 1", timeout=10)
        return True

    assert run_page(chromium, bad, check)
