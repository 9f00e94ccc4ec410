"""`trustmh view` as a person uses it, in headless Chromium (issue 34, item 10): the filters and the opened
sample live in the URL, so a copied address opens the same view; no column is cut; search reads replies,
judge output and the item's own text but not its task's template; every model's reply to one item side by
side. And the report's leaderboard fits 1,280 px without a horizontal scroll."""

import json
import threading
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from conftest import run_quiet, run_spec, write_replay
from test_report import sample_items
from trustmh.analysis.runs import load_run
from trustmh.report import write_report
from trustmh.report.viewer import make_server
from trustmh.testing.browser import chromium_browser, chromium_tab

TASKS = "crisis.identification,ethics.reasoning,reliability.emotion_recognition"
LABELS = {"baseline/counselor": "A counselling baseline with a rather long name (v2, 2026)",
          "baseline/refuse": "Refuser"}


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    """Three models on the sample suite (a replay that answers 'no_crisis' to every crisis item, and two
    labelled baselines) served by `trustmh view`; yields (the URL it prints, run dir, replay spec)."""
    tmp = tmp_path_factory.mktemp("viewer")
    recs = [{"task": "crisis.identification", "item_id": it.id,
             "response": '{"label": "no_crisis", "explanation": "Nothing here points to a risk."}'}
            for it in sample_items("crisis.identification")]
    recs += [{"task": "ethics.reasoning", "item_id": it.id, "response": f"Answer: {'AB'[k % 2]}"}
             for k, it in enumerate(sample_items("ethics.reasoning"))]
    replay = f"replay/{write_replay(tmp / 'replies.jsonl', recs)}"
    spec = run_spec(models=[replay, *LABELS], tasks=TASKS, suite="sample",
                    model_info={m: {"label": v} for m, v in LABELS.items()})
    run_quiet(spec, tmp / "run")
    server = make_server([load_run(tmp / "run")], 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.url, tmp / "run", replay  # with the session's token, as `trustmh view` prints it
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(chromium, viewer):
    """One Chromium for the file's tests, each in a fresh context of it (a launch is ~1 s of CPU). Started
    after `viewer`'s run: no trustmh run (asyncio) can start while Playwright's own loop is open."""
    with chromium_browser(chromium) as b:
        yield b


def total(run) -> int:
    return len((run / "samples.jsonl").read_text(encoding="utf-8").splitlines())


def ready(page):
    page.locator("body[data-ready='1']").wait_for(state="attached")


def args(page) -> dict[str, str]:
    """The view's state in the address bar, less the session's token (which it keeps, unchanged)."""
    query = parse_qs(urlsplit(page.url).query)
    assert query.pop("t", None), "the address lost the session's token"
    return {k: v[-1] for k, v in query.items()}


def test_filters_and_the_opened_sample_are_in_the_url(browser, viewer):
    base, run, replay = viewer
    with chromium_tab(browser=browser) as tab:
        page = tab.page
        page.goto(base + "&size=3&keep=me")  # a parameter of someone else's stays
        ready(page)
        page.select_option("#f-model", label="Refuser")
        page.select_option("#f-task", label="ethics.reasoning")
        page.select_option("#f-sort", "data")
        expect(page.locator("#f-count")).to_have_text(f"5 of {total(run)} samples")
        page.click("#next")
        expect(page.locator("#page-info")).to_have_text("page 2 of 2")
        page.locator("#v-rows tr.sample").first.click()
        page.locator("#v-rows tr.sample[data-opened='1']").wait_for()
        reply = page.text_content("#v-rows .detail pre.reply")
        opened = page.locator("#v-rows tr.sample").first.get_attribute("data-i")
        state = args(page)
        assert state == {"size": "3", "keep": "me", "model": "Refuser", "task": "ethics.reasoning", "sort": "data",
                         "page": "2", "open": opened}
        shared = page.url
    with chromium_tab(browser=browser) as tab:  # a fresh context, as another browser: the copied address alone
        page = tab.page
        page.goto(shared)
        ready(page)
        assert page.locator("#f-model option:checked").inner_text() == "Refuser"
        assert page.locator("#f-task option:checked").inner_text() == "ethics.reasoning"
        assert page.locator("#f-sort").input_value() == "data"
        assert page.text_content("#page-info") == "page 2 of 2"
        page.locator(f"#v-rows tr.sample[data-i='{opened}'][data-opened='1']").wait_for()
        assert page.text_content("#v-rows .detail pre.reply") == reply
        # the search too; and a sample opened by address that is not on the page shown opens above the table
        page.goto(base + f"&q=answer&open={opened}")
        ready(page)
        assert page.input_value("#f-search") == "answer"
        page.locator(f"#v-open[data-opened='{opened}']").wait_for()
        assert page.text_content("#v-open pre.reply") == reply
        assert tab.errors == []


def test_every_models_reply_to_one_item_side_by_side(browser, viewer):
    base, run, replay = viewer
    by_model = {}
    for line in (run / "samples.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec["task"] == "crisis.identification" and rec["item_id"] == "1":
            by_model[LABELS.get(rec["model"], rec["model"])] = rec["response"]
    assert len(by_model) == 3
    with chromium_tab(browser=browser) as tab:
        page = tab.page
        page.goto(base + "&task=crisis.identification&sort=data&model=Refuser")
        ready(page)
        row = page.locator("#v-rows tr.sample", has_text="Refuser").filter(has=page.locator("td.mono", has_text="1"))
        row.first.click()
        page.locator("#v-rows tr.sample[data-opened='1']").wait_for()
        page.click("#v-rows button.side-button")
        page.locator("#v-rows .side-area[data-side='3']").wait_for()
        got = {c.get_attribute("data-model"): c.locator("pre.reply").inner_text()
               for c in page.locator("#v-rows .side .model-reply").all()}
        assert got == by_model
        # side by side, next to each other: one row of three columns at 1,280 px
        boxes = [c.bounding_box() for c in page.locator("#v-rows .side .model-reply").all()]
        assert len({round(b["y"]) for b in boxes}) == 1 and boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
        assert args(page)["side"] == "1"
        shared = page.url
        page.goto(shared)
        ready(page)
        page.locator(".side-area[data-side='3']").wait_for()
        assert tab.errors == []


def test_no_column_is_cut(browser, viewer):
    base, run, _ = viewer
    with chromium_tab(browser=browser, width=1280) as tab:
        page = tab.page
        page.goto(base + "&size=200")
        ready(page)
        cells = page.eval_on_selector_all("#v-rows tr.sample td", """cells => cells.map(c => ({
            text: c.textContent, cut: c.scrollWidth > c.clientWidth + 1 || c.scrollHeight > c.clientHeight + 1}))""")
        assert len(cells) == total(run) * 6
        assert [c["text"] for c in cells if c["cut"]] == []
        assert any(LABELS["baseline/counselor"] == c["text"] for c in cells)  # the long label is there whole
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_search_reads_the_items_own_text_not_the_template(browser, viewer):
    base, run, _ = viewer
    items = {it.id: it for it in sample_items("crisis.identification")}
    crisis = [json.loads(x) for x in (run / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    crisis = [r for r in crisis if r["task"] == "crisis.identification"]
    assert all("suicid" in r["messages"][-1]["content"].lower() for r in crisis)  # the template says it everywhere
    # By hand: a sample matches when its item's own text or gold label says it, or its reply, judge output or
    # parsed answer does (the template's words are not the item's).
    def says(r):
        it = items[r["item_id"]]
        mine = [json.dumps(it.input, ensure_ascii=False), str(it.target), str(r.get("response")),
                json.dumps(r.get("judge"), ensure_ascii=False), json.dumps(r.get("parsed"), ensure_ascii=False)]
        return "suicid" in " ".join(mine).lower()
    expected = [r for r in crisis if says(r)]
    assert 0 < len(expected) < len(crisis)
    with chromium_tab(browser=browser) as tab:
        page = tab.page
        page.goto(base + "&task=crisis.identification&q=suicid")
        ready(page)
        expect(page.locator("#f-count")).to_have_text(f"{len(expected)} of {total(run)} samples")
        shown = page.eval_on_selector_all("#v-rows tr.sample", "rows => rows.map(r => r.cells[4].textContent)")
        assert sorted(shown) == sorted(r["item_id"] for r in expected)
        # a reply's words are found (the replay's explanation)
        page.fill("#f-search", "points to a risk")
        expect(page.locator("#f-count")).to_have_text(f"{len(items)} of {total(run)} samples")
        assert tab.errors == []


def test_the_leaderboard_fits_1280_px(browser, tmp_path):
    """Twelve models with long labels and every pillar: the leaderboard's table needs no horizontal scroll."""
    from test_rank_table_browser import ROWS, write_run
    models = {f"openai/some-provider/a-rather-long-model-name-{k:02d}": {t: float((7 * k + 3 * j) % 90) for j, t in
                                                                       enumerate(ROWS)} for k in range(12)}
    labels = {m: f"Model number {k} with a long descriptive label" for k, m in enumerate(models)}
    run = write_run(tmp_path / "run", models, labels=labels)
    path = write_report([load_run(run)], tmp_path / "r.html", include_samples=False)
    with chromium_tab(browser=browser, width=1280) as tab:
        page = tab.page
        page.goto(path.as_uri())
        fits = page.eval_on_selector("table.board", """t => {
            const box = t.closest('.scroll') || t.parentElement;
            return {table: t.getBoundingClientRect().right, view: window.innerWidth,
                    scroll: box.scrollWidth - box.clientWidth, page: document.documentElement.scrollWidth};}""")
        assert fits["scroll"] <= 1 and fits["table"] <= fits["view"] and fits["page"] <= fits["view"], fits
        heads = page.locator("table.board thead th").all_inner_texts()
        assert "Anti-Sycophancy" in heads and "Ethics" in heads
        assert tab.errors == []
