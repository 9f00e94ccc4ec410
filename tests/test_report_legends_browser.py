"""The report's header, legends and rank table in a real headless Chromium (issue 22): what a clinician must
read first (protocol, judge, data, subset, a --limit banner), the pillar and column legends written out rather
than hover tooltips (so they survive printing), evidence levels explained, provenance behind a "sources"
toggle, the paper's rank table shaded by rank, and the same page printed to PDF."""

from pathlib import Path

import pytest

from conftest import UPSTREAM, run_quiet, run_spec
from test_rankings import AWARENESS, TIERS, awareness_replays
from test_report_browser import ARTIFACTS
from trustmh.analysis.runs import load_run
from trustmh.report import write_report
from trustmh.testing.browser import chromium_tab

LIMIT = 8


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    tmp = tmp_path_factory.mktemp("legends")
    models = awareness_replays(tmp)
    spec = run_spec(models=[models["answers"], models["constant"], "baseline/refuse"], tasks=AWARENESS,
                    suite="data", data_dir=str(UPSTREAM), limit=LIMIT, protocol="paper")
    run_quiet(spec, tmp / "run")
    groups = {models["answers"]: "general", models["constant"]: "mental-health", "baseline/refuse": "general"}
    return write_report([load_run(tmp / "run")], tmp / "report.html", paired=False, groups=groups), models


@pytest.mark.needs_methods
def test_header_legends_and_rank_table_in_chromium_and_in_print(chromium, report):
    path, models = report
    with chromium_tab(chromium) as tab:
        page = tab.page
        page.goto(path.as_uri())
        header = page.locator("header")
        assert "the paper's" in header.locator(".h-protocol").inner_text()
        assert header.locator(".h-judge").inner_text().startswith("rules")
        assert f"the first {LIMIT} items of each task" in header.locator(".h-subset").inner_text()
        banner = header.locator(".limit-banner")
        assert banner.is_visible() and f"--limit {LIMIT}" in banner.inner_text()
        # The pillar legend is text on the page, under the paper's pillar name.
        legend = page.locator("dl.pillars-legend")
        assert legend.is_visible() and "Privacy" in legend.locator("dt").all_inner_texts()
        assert "secrets" in legend.inner_text()
        columns = page.locator(".columns-legend")
        assert columns.is_visible() and "no answer" in columns.inner_text() and "judge usable" in columns.inner_text()
        assert "only the paper's figures or README" in columns.inner_text()  # evidence D, written out
        # Provenance is behind a closed "sources" toggle; opening it shows the authors' file.
        sources = page.locator(f"[id='task-{TIERS[0]}'] details.sources")
        assert sources.count() == 1 and not sources.locator("li").first.is_visible()
        sources.locator("summary").click()
        assert sources.locator("li").first.is_visible() and "@" in sources.locator("li").first.inner_text()
        # The model that answered the same to everything says why its trust is 0.
        assert page.locator(".undefined-by-model").first.is_visible()
        # The rank table: one row for Privacy Awareness, a column per model grouped, cells shaded by rank.
        rows = page.locator("table.paper-ranks tbody tr")
        assert rows.count() == 1 and "Privacy Awareness" in rows.first.inner_text()
        assert page.locator("table.paper-ranks th.group").all_inner_texts() == ["general", "mental-health"]
        cells = rows.first.locator("td.rank-cell")
        # the two models whose replies leave the tiers' Pearson r undefined have no rank (issue 47)
        assert [c.split()[0] for c in cells.all_inner_texts()] == ["1", "undefined", "undefined"]
        best, worst = (cells.nth(k).evaluate("n => getComputedStyle(n).backgroundColor") for k in (0, 2))
        assert best != worst  # rank 1 shaded, the undefined cells not
        assert "1, 2, 2, 4" in page.locator(".rank-rules").inner_text()
        # Printed: the legends and the banner are still there (no hover needed), the navigation is not.
        page.emulate_media(media="print")
        assert legend.is_visible() and columns.is_visible() and banner.is_visible()
        assert not page.locator("nav").is_visible()
        ARTIFACTS.mkdir(exist_ok=True)
        pdf = page.pdf(path=str(ARTIFACTS / "report-legends.pdf"), format="A4", print_background=True)
        assert pdf[:5] == b"%PDF-" and len(pdf) > 10_000
        assert tab.errors == []
