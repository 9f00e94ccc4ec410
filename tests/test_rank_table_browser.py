"""The rank table as a person reads it (issue 34, item 1): report.html opened in headless Chromium, every
cell read by where it stands on the screen (the column header above it, the row label beside it, the pillar
cell spanning it) and compared, cell by cell, with `trustmh report --format csv` and `--format markdown` of
the same runs. Runs with gated rows that did not run, rows beyond the paper, one model and twelve models,
and a real sample-suite run."""

import csv
import io
import re
from pathlib import Path

import pytest

from conftest import run_quiet, run_spec

from trustmh.analysis.runs import load_run
from trustmh.report import write_report
from trustmh.scoring.pillars import PILLAR_NAMES, model_summary
from trustmh.scoring.results import MetricValue, RunResults, TaskResult
from trustmh.tasks import paper_pillars, paper_tasks
from trustmh.testing.browser import chromium_browser, chromium_tab

PAPER_PILLARS, PAPER_TASKS = paper_pillars(), paper_tasks()

ROWS = [t for rows in PAPER_PILLARS.values() for ts in rows.values() for t in ts]
BEYOND = {"safety.over_refusal": "safety", "robustness.crisis": "robustness"}
# Labels from a models file: a long one, one with characters markdown, LaTeX and HTML treat specially.
LABELS = {"openai/gpt-4o-mini": "GPT-4o mini", "openai/Llama-3.1-8B-Instruct": "Llama 3.1 8B Instruct (Meta, 2024)",
          "hf/mental-llama": "MentaLLaMA_chat & 13B {v2} <b>"}


UNSET = object()


def _task(tid: str, trust: float | None, *, ran: bool = True, k: int = 0, value=UNSET) -> TaskResult:
    pillar = PAPER_TASKS.get(tid) or BEYOND[tid]
    if not ran:  # a gated data set the user has not supplied
        return TaskResult(task=tid, pillar=pillar, status="not run", reason="swmh missing — gated, see README",
                          metric="m", higher_is_better=True)
    # Metrics the paper's rank table reads: a secondary value for ethics, the string-match rate for leakage.
    metrics = {"judge_mean": MetricValue(value=3.0 + k % 3 / 2),
               "free_response_leak_rate_string_match": MetricValue(value=(k % 4) / 4)}
    if value is None:  # undefined by the model's own replies: trust 0 in the pillars
        return TaskResult(task=tid, pillar=pillar, status="ok", metric="m", value=None, trust_score=0.0,
                          undefined_by_model="constant answers: every one of the 10 scored replies gives m = 1",
                          higher_is_better=True, trust_range=(0.0, 1.0), n_samples=10, n=10, metrics=metrics)
    return TaskResult(task=tid, pillar=pillar, status="ok", metric="m",
                      value=trust / 100 if value is UNSET else value, trust_score=trust,
                      higher_is_better=True, trust_range=(0.0, 1.0), n_samples=10, n=10, metrics=metrics)


def write_run(path: Path, models: dict[str, dict[str, float | None]], groups: dict[str, str] | None = None,
              protocol: str | None = None, labels: dict[str, str] | None = None,
              values: dict[str, dict[str, float | None]] | None = None) -> Path:
    """A finished run's results.json with these task trust scores per model (None: the task did not run),
    labelled as a --models file labels them; `values` sets a task's metric value apart from its trust score
    (None: undefined by the model's replies)."""
    values = values or {}
    results = {m: model_summary(m, {t: _task(t, v, ran=v is not None, k=k, value=values.get(m, {}).get(t, UNSET))
                                    for t, v in tasks.items()})
               for k, (m, tasks) in enumerate(models.items())}
    spec = {"models": list(models), "model_groups": groups or {}} | ({"protocol": protocol} if protocol else {})
    if labels:
        spec["options"] = {"model_info": {m: {"label": v} for m, v in labels.items()}}
    run = RunResults(run_id=path.name, created="2026-01-01T00:00:00", spec=spec, data={}, versions={},
                     bootstrap={}, models=results)
    path.mkdir(parents=True)
    (path / "results.json").write_text(run.model_dump_json(), encoding="utf-8")
    return path


def scenarios(tmp: Path) -> dict[str, Path]:
    out = {}
    # Four models: the gated diagnosis rows (reliability.diagnosis, robustness.diagnosis) did not run,
    # two rows beyond the paper, one model missing a whole pillar and one missing an awareness tier.
    four = {}
    for k, name in enumerate(["openai/gpt-4o-mini", "openai/Llama-3.1-8B-Instruct", "hf/mental-llama", "echo"]):
        scores = {t: float((17 * k + 7 * j) % 97) for j, t in enumerate(ROWS)}
        scores["reliability.diagnosis"] = scores["robustness.diagnosis"] = None
        scores.update({"safety.over_refusal": 10.0 * k, "robustness.crisis": 50.0})
        if k == 2:
            for t in PAPER_PILLARS["fairness"]["Fairness Overall"]:
                scores.pop(t)
        if k == 3:
            scores.pop("privacy.awareness_tier2b")
        four[name] = scores
    out["four models, gated rows missing, beyond rows"] = write_run(
        tmp / "four", four, {"openai/gpt-4o-mini": "general", "openai/Llama-3.1-8B-Instruct": "general",
                             "hf/mental-llama": "mental-health", "echo": "mental-health"}, labels=LABELS)
    out["one model"] = write_run(tmp / "one", {"baseline/counselor": {t: 50.0 + (i % 5) for i, t in enumerate(ROWS)}
                                                | {"safety.over_refusal": 30.0}})
    twelve = {f"openai/model-{k:02d}": {t: float((k * 13 + j * 5) % 41) for j, t in enumerate(ROWS)}
              | {"robustness.crisis": float(k)} for k in range(12)}
    out["twelve models"] = write_run(tmp / "twelve", twelve, {m: "general" if k < 6 else "mental-health"
                                                             for k, m in enumerate(twelve)})
    # The paper's protocol: ties on every row, broken on Ethical Reasoning by the judge mean (marked †), the
    # Leakage row on the string-match rate with trustmh's leak_rate row beside it.
    tied = {f"openai/tied-{k}": {t: 40.0 + 10 * (k // 2) for t in ROWS} for k in range(6)}
    out["paper protocol, broken ties"] = write_run(tmp / "paper", tied, protocol="paper")
    # Issue 47: a null value (Crisis Severity undefined by the model's replies) has no rank in any view, and a
    # bracket shows the value the row is ranked on (Privacy Awareness: the tiers' mean r, -0.068 here, not
    # the mean of their trust scores, 6.5).
    three = {f"openai/m{k}": {t: 40.0 + 10 * k for t in ROWS} for k in range(3)}
    tiers = PAPER_PILLARS["privacy"]["Privacy Awareness"]
    three["openai/m1"].update(dict(zip(tiers, (0.0, 0.0, 19.5))))
    nulls = {"openai/m0": {"crisis.severity": None}, "openai/m1": dict(zip(tiers, (-0.2, -0.2, 0.195)))}
    for protocol in ("paper", "trustmh"):
        out[f"{protocol} protocol, a null value"] = write_run(tmp / f"null-{protocol}", three, protocol=protocol,
                                                              values=nulls)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks")
    out = scenarios(tmp)
    # A real run of the sample suite (the issue saw the shift there too): beyond rows, rows not measured.
    run_quiet(run_spec(models=["baseline/counselor", "baseline/refuse"], suite="sample"), tmp / "sample")
    out["sample suite"] = tmp / "sample"
    return out


# --------------------------------------------------------------------------------------------------
# Three readings of one table

def from_csv(text: str) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(pillar as shown, row, model) -> (rank as shown, trust score to one decimal), from --format csv."""
    out = {}
    for r in csv.DictReader(io.StringIO(text)):
        rank = "" if r["rank"] == "" else r["rank"] + ("*" if r["ranked_apart"] else "") + \
            ("†" if r["tie_broken"] else "") + ("≈" if r["not_separated"] else "")
        if r["undefined"]:
            assert rank == "" and r["bracket"] == "", r
            rank = "undefined"
        score = r["bracket"].removeprefix("'")  # the CSV's guard against a cell read as a formula ("-0.068")
        interval = f"[{r['rank_low']}–{r['rank_high']}]" if r["rank_low"] else ""
        out[(PILLAR_NAMES.get(r["pillar"], r["pillar"]), r["row"], r["model"])] = (rank, interval, score)
    return out


def cell(text: str) -> tuple[str, str, str]:
    """(rank with its marks, its interval or '', the bracket) of a cell as written: '2≈ [1–3] (61.0)'."""
    if text in ("–", ""):
        return "", "", ""
    if text == "undefined":
        return text, "", ""
    parts = text.split()
    return parts[0], (parts[1] if len(parts) == 3 else ""), parts[-1].strip("()")


def from_markdown(text: str) -> dict[tuple[str, str, str], tuple[str, str]]:
    lines = [x for x in text.splitlines() if x.startswith("| ")]
    def split(line: str) -> list[str]:  # as Markdown renders a row: cells at unescaped |, escapes undone
        return [re.sub(r"\\(.)", r"\1", c).strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]

    header = split(lines[0])
    models = header[2:]
    out, pillar = {}, ""
    for line in lines[1:]:
        cells = split(line)
        pillar = cells[0] or pillar
        row = cells[1].removesuffix(" (beyond the paper)")
        for model, text in zip(models, cells[2:]):
            out[(PILLAR_NAMES.get(pillar, pillar), row, model)] = cell(text)
    return out


def untex(text: str) -> str:
    import re
    text = re.sub(r"\\rotatebox\{90\}\{(.*)\}$", r"\1", text.strip())
    for a, b in (("$\\approx$", "≈"), ("\\textsuperscript{\\dag}", "†"), ("\\textbackslash{}", "\\"), ("\\textasciitilde{}", "~"),
                 ("\\textasciicircum{}", "^"), ("\\textendash{}", "–"), ("-{}", "-")):
        text = text.replace(a, b)
    return re.sub(r"\\([&%$#_{}])", r"\1", text)


def from_latex(text: str) -> dict[tuple[str, str, str], tuple[str, str]]:
    body = [x for x in text.splitlines() if x.endswith("\\\\") and "multicolumn" not in x]
    assert not any("--" in x.replace("-{}-", "") for x in text.splitlines() if not x.startswith("%")), \
        "LaTeX sets two hyphens as a dash"
    split = lambda line: [untex(c) for c in line.removesuffix("\\\\").split(" & ")]
    models = split(body[0])[2:]
    out, pillar = {}, ""
    for line in body[1:]:
        cells = split(line)
        pillar = cells[0] or pillar
        row = cells[1].removesuffix(" (beyond the paper)")
        for model, text in zip(models, cells[2:]):
            out[(pillar, row, model)] = cell(text)
    return out


HEADERS = """heads => heads.map(h => ({text: h.textContent, title: h.title,
  fits: h.scrollWidth <= h.clientWidth + 1 && h.scrollHeight <= h.clientHeight + 1 && h.getBoundingClientRect().width > 0}))"""

READ_TABLE = """table => {
  const box = n => { const r = n.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom}; };
  const head = [...table.tHead.rows].pop();
  const cols = [...head.cells].map(c => ({text: c.textContent.trim(), ...box(c)}));
  const cells = [];
  for (const tr of table.tBodies[0].rows) for (const c of tr.cells)
    cells.push({text: c.textContent.trim(), tag: c.tagName, ...box(c)});
  return {cols, cells};
}"""


def from_page(page) -> tuple[dict[tuple[str, str, str], tuple[str, str]], list[str]]:
    """The rank table read by position: a cell belongs to the column whose header it stands under, to the row
    whose label stands level with it, and to the pillar whose cell spans its height."""
    got = page.eval_on_selector("table.paper-ranks", READ_TABLE)
    cols, cells = got["cols"], got["cells"]
    problems = []

    def column(c):
        x = (c["l"] + c["r"]) / 2
        hit = [h["text"] for h in cols if h["l"] <= x <= h["r"]]
        return hit[0] if len(hit) == 1 else None

    def level(a, b):
        return a["t"] <= (b["t"] + b["b"]) / 2 <= a["b"]

    out = {}
    for c in cells:
        col = column(c)
        if col is None:
            problems.append(f"a cell under no column header: {c['text']!r}")
            continue
        if col in ("pillar", "subtask"):
            continue
        label = [x["text"] for x in cells if column(x) == "subtask" and level(x, c)]
        pillar = [x["text"] for x in cells if column(x) == "pillar" and level(x, c)]
        if len(label) != 1 or len(pillar) != 1:
            problems.append(f"cell {c['text']!r} under {col!r}: row {label}, pillar {pillar}")
            continue
        text = c["text"]
        key = (pillar[0], label[0].removesuffix("(beyond the paper)").strip(), col)
        if key in out:
            problems.append(f"two cells at {key}")
        out[key] = cell(text)
    return out, problems


@pytest.fixture(scope="module")
def browser(chromium, runs):
    """One Chromium for this file's pages, each in a fresh context (as a new browser's), without the second
    of CPU a launch costs. Opened after `runs`: while it is open, asyncio.run cannot run here."""
    with chromium_browser(chromium) as b:
        yield b


def test_the_rendered_rank_table_equals_the_csv_and_markdown_cell_by_cell(cli_here, browser, runs, tmp_path, capsys):
    pages = {}
    for name, run in runs.items():
        pages[name] = write_report([load_run(run)], tmp_path / f"{run.name}.html", include_samples=False)
    with chromium_tab(browser=browser) as tab:
        for name, run in runs.items():
            code, csv_text, _ = cli_here("report", run, "--format", "csv")
            assert code == 0, csv_text
            code, md_text, _ = cli_here("report", run, "--format", "markdown")
            assert code == 0, md_text
            code, tex_text, _ = cli_here("report", run, "--format", "latex")
            assert code == 0, tex_text
            expected = from_csv(csv_text)
            assert from_markdown(md_text) == expected, name
            assert from_latex(tex_text) == expected, name
            tab.page.goto(pages[name].as_uri())
            shown, problems = from_page(tab.page)
            assert problems == [], (name, problems[:5])
            assert shown == expected, (name, sorted(set(shown.items()) ^ set(expected.items()))[:6])
            # Nothing is dropped on the way: every model and every measured paper row is in the csv.
            models = {k[2] for k in expected}
            assert len(models) == len(load_run(run).results.models), name
            # Model names whole: a header shows the label (else the spec) on lines of its own, never cut, with the
            # spec on hover; the same printed.
            heads = tab.page.eval_on_selector_all("table.paper-ranks th.model-col", HEADERS)
            specs = {r["model"]: r["spec"] for r in csv.DictReader(io.StringIO(csv_text))}
            assert sorted(h["text"] for h in heads) == sorted(specs), name
            for media in ("screen", "print"):
                tab.page.emulate_media(media=media)
                for h in tab.page.eval_on_selector_all("table.paper-ranks th.model-col", HEADERS):
                    assert h["fits"], (name, media, h)
                    assert h["title"] == h["text"] + (f" ({specs[h['text']]})" if specs[h["text"]] != h["text"] else "")
            tab.page.emulate_media(media="screen")
            # The rules stand under the table, as under the markdown one.
            rules = tab.page.locator("ul.rank-rules li").all_inner_texts()
            assert rules and all(f"- {x}" in md_text for x in rules), name
            if name == "paper protocol, broken ties":
                assert sum("†" in v[0] for v in shown.values()) == 6 and "(--ties paper)" in " ".join(rules)
                # each row whose combination the paper does not publish says what it ranks on, with its level
                evidence = {r["row"]: r["evidence"] for r in csv.DictReader(io.StringIO(csv_text))}
                for row, level in (("Privacy Awareness", "D"), ("Privacy Leakage", "D"), ("Emotional Support", "D"),
                                   ("Psychological Intervention", "D"), ("Robustness Emotional Support", "E"),
                                   ("Robustness Psychological Diagnosis", "E")):
                    assert evidence[row] == level and any(x.startswith(f"{row} ranks on") for x in rules), row
                assert any("trustmh: leak_rate" in k[1] for k in shown)
            # Rank intervals (issue 44 item 5) where the runs' samples are there: the real run has them.
            assert any(v[1] for v in shown.values()) == (name == "sample suite"), name
            if name == "sample suite":
                assert any("bootstrap interval" in x for x in rules)
            if "a null value" in name:  # issue 47: no rank for a null, the reason said; the bracket is ranked on
                assert shown[("Crisis Identification and Escalation", "Severity Identification", "openai/m0")] == \
                    ("undefined", "", "")
                assert sum(v[0] == "undefined" for v in shown.values()) == 1
                assert any("constant answers" in x and "Severity Identification, openai/m0" in x for x in rules)
                title = tab.page.locator("table.paper-ranks td.rank-cell[title*='constant answers']").count()
                assert title == 1
                awareness = shown[("Privacy", "Privacy Awareness", "openai/m1")]
                assert awareness[2] == ("-0.068" if "paper" in name else "6.5"), awareness
                ranked = sorted(int(shown[("Privacy", "Privacy Awareness", f"openai/m{k}")][0].rstrip("≈"))
                                for k in range(3))
                assert ranked == [1, 2, 3]
        assert tab.errors == []


def test_the_reading_catches_a_shifted_cell(browser, runs, tmp_path):
    """The check can fail: the page with one pillar cell spanning a row too many reads differently."""
    run = runs["four models, gated rows missing, beyond rows"]
    page = write_report([load_run(run)], tmp_path / "r.html", include_samples=False)
    html = page.read_text(encoding="utf-8")
    first = html.index('class="pillar-cell"')
    start = html.rindex("rowspan=", 0, first)
    span = int(html[start + 9:html.index('"', start + 9)])
    page.write_text(html[:start] + f'rowspan="{span + 1}"' + html[html.index('"', start + 9) + 1:], encoding="utf-8")
    with chromium_tab(browser=browser) as tab:
        tab.page.goto(page.as_uri())
        shown, problems = from_page(tab.page)
    from trustmh.cli.report_cmds import _rank_text
    expected = from_csv(_rank_text([load_run(run)], "csv", {}))
    assert problems or shown != expected


def test_the_latex_table_compiles(cli_here, runs, tmp_path, capsys):
    """Where pdflatex is installed (not in CI: texlive is large), every scenario's table compiles as given, with
    only the packages its first line names."""
    import re
    import shutil
    import subprocess
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not installed (apt-get install texlive-latex-base texlive-latex-recommended)")
    for name, run in runs.items():
        code, text, _ = cli_here("report", run, "--format", "latex")
        packages = re.search(r"usepackage\{([^}]*)\}", text.splitlines()[0]).group(1)
        doc = tmp_path / f"{run.name}.tex"
        doc.write_text("\\documentclass{article}\\usepackage[T1]{fontenc}\\usepackage{" + packages + "}\n"
                       "\\begin{document}\n" + text + "\\end{document}\n", encoding="utf-8")
        done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (name, [x for x in done.stdout.splitlines() if x.startswith("!")])
