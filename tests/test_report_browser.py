"""The report in a real headless Chromium (the Debian `chromium`, driven by Playwright): it loads without
console errors, shows the leaderboard and radar, its filters and pages work, and a reply carrying script
runs nothing. A full-page screenshot is kept in test-artifacts/report.png."""

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from conftest import run_quiet, run_spec, write_replay
from test_report import EVIL, sample_items
from trustmh.analysis.runs import load_run
from trustmh.report import write_report
from trustmh.testing.browser import chromium_browser, chromium_tab

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
PAGE_SIZE = 4


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


@pytest.fixture(scope="module")
def browser(chromium, report):
    """One Chromium for this file's pages, each in a fresh context (as a new browser's), without the second
    of CPU a launch costs. Opened after `report`'s run: while it is open, asyncio.run cannot run here."""
    with chromium_browser(chromium) as b:
        yield b


def run_page(browser, path: Path, check):
    with chromium_tab(browser=browser) as tab:
        tab.page.goto(path.as_uri())
        return check(tab)


def texts(page, selector):
    return page.eval_on_selector_all(selector, "nodes => nodes.map(n => n.textContent)")


def test_report_in_chromium(browser, report):
    path, per_model, n_ethics = report
    total = 2 * per_model

    def check(tab):
        page = tab.page
        # Waits go through locators: the report's CSP forbids the eval that wait_for_function uses.
        page.locator("body[data-samples-ready='1']").wait_for(state="attached")
        assert page.locator("table.board tbody tr").count() == 2
        assert page.locator("#radar g.series").count() == 2
        assert page.locator("#sample-rows tr.sample").count() == PAGE_SIZE
        pages = -(-total // PAGE_SIZE)
        assert page.text_content("#page-info") == f"page 1 of {pages}"
        page.click("#next")
        assert page.text_content("#page-info") == f"page 2 of {pages}"

        # Filter by task: only that task's rows, and the count says how many of all.
        page.select_option("#f-task", label="ethics.reasoning")
        tasks = texts(page, "#sample-rows tr.sample td:nth-child(4)")
        assert tasks and set(tasks) == {"ethics.reasoning"}
        assert page.text_content("#f-count") == f"{2 * n_ethics} of {total} samples"

        # Search for the injected reply, open it: it shows as text and nothing ran.
        page.fill("#f-search", "__pwned")
        expect(page.locator("#f-count")).to_have_text(re.compile(r"^1 of "))
        page.click("#sample-rows tr.sample")
        assert page.text_content("#sample-rows .detail pre.reply") == EVIL
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.locator("#samples img, #samples a[href], #samples script").count() == 0
        # The artifact shows the page with the injected reply opened, as text.
        ARTIFACTS.mkdir(exist_ok=True)
        shot = page.screenshot(path=ARTIFACTS / "report.png", full_page=True)
        assert shot[:8] == b"\x89PNG\r\n\x1a\n"

        # The "show samples" button of a task sets the task filter.
        page.evaluate("document.getElementById('f-search').value = ''")
        page.click("button[data-task-id='privacy.awareness_tier1']")
        tasks = texts(page, "#sample-rows tr.sample td:nth-child(4)")
        assert tasks and set(tasks) == {"privacy.awareness_tier1"}
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert tab.errors == []

    run_page(browser, path, check)


def test_the_marker_check_detects_running_script(browser, tmp_path):
    """The check above can fail: the same payload put into a page as markup does set the marker."""
    bad = tmp_path / "unsafe.html"
    payload = json.dumps(EVIL).replace("</", "<\\/")  # keep the inline script in one piece
    bad.write_text(f"<!doctype html><html><body><div id='x'></div><script>"
                   f"document.getElementById('x').innerHTML = {payload};</script></body></html>")

    def check(tab):
        tab.page.wait_for_function("window.__pwned === 1", timeout=10_000)
        return True

    assert run_page(browser, bad, check)


def test_view_pages_filters_and_searches_in_chromium(browser, report):
    """`trustmh view`'s page on its loopback server: pages, filters by model, task and outcome, searches,
    opens a sample whose reply is a script injection as text; no console error, no outside request."""
    import threading
    from trustmh.report.viewer import make_server
    path, per_model, n_ethics = report
    total = 2 * per_model
    server = make_server([load_run(path.parent)], 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"  # server.url: base with the token
    outside = []

    def check(tab):
        page = tab.page
        page.on("request", lambda r: None if r.url.startswith(base) else outside.append(r.url))
        page.goto(server.url + f"&size={PAGE_SIZE}")
        ready = page.locator("body[data-ready='1']")
        ready.wait_for(state="attached")
        pages = -(-total // PAGE_SIZE)
        assert page.locator("#v-rows tr.sample").count() == PAGE_SIZE
        assert page.text_content("#page-info") == f"page 1 of {pages}"
        assert page.text_content("#f-count") == f"{total} of {total} samples"
        def shown():
            return list(zip(texts(page, "#v-rows tr.sample td:nth-child(3)"),
                            texts(page, "#v-rows tr.sample td:nth-child(5)")))
        first = shown()
        page.click("#next")
        expect(page.locator("#page-info")).to_have_text(f"page 2 of {pages}")
        assert len(shown()) == PAGE_SIZE and not set(shown()) & set(first)

        page.select_option("#f-model", label="baseline/counselor")
        expect(page.locator("#f-count")).to_have_text(f"{per_model} of {total} samples")
        assert set(texts(page, "#v-rows tr.sample td:nth-child(3)")) == {"baseline/counselor"}
        page.select_option("#f-task", label="ethics.reasoning")
        expect(page.locator("#f-count")).to_have_text(f"{n_ethics} of {total} samples")
        assert set(texts(page, "#v-rows tr.sample td:nth-child(4)")) == {"ethics.reasoning"}
        page.select_option("#f-status", "error")
        expect(page.locator("#f-count")).to_have_text(f"0 of {total} samples")
        assert page.text_content("#v-rows") == "no sample matches"
        page.select_option("#f-status", "")
        page.select_option("#f-model", "")
        page.select_option("#f-task", "")

        page.fill("#f-search", "__pwned")
        expect(page.locator("#f-count")).to_have_text(f"1 of {total} samples")
        page.click("#v-rows tr.sample")
        page.locator("#v-rows tr.sample[data-opened='1']").wait_for()
        assert page.text_content("#v-rows .detail pre.reply") == EVIL
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.locator("#samples img, #samples a[href], #samples script").count() == 0
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=ARTIFACTS / "view.png", full_page=True)
        assert tab.errors == [] and outside == []

    try:
        with chromium_tab(browser=browser) as tab:
            check(tab)
    finally:
        server.shutdown()
        server.server_close()
