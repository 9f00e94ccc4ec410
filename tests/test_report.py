"""The HTML report without a browser: what it is built from, that it is written after a run, and that
nothing from a model or a data file can reach the page as markup."""

import json
import re
from pathlib import Path

import pytest

from conftest import UPSTREAM, run_quiet, run_spec, write_replay
from test_compare_gate import ethics_replay
from trustmh.analysis.runs import load_run
from trustmh.report import build_context, render, write_report
from trustmh.report.charts import radar_svg
from trustmh.scoring.results import MetricValue, ModelResults, PillarResult, RunResults, TaskResult
from trustmh.tasks import TASKS, DataSource, RunContext

SAMPLE = Path(__file__).resolve().parents[1] / "src" / "trustmh" / "data" / "sample"
EVIL = ('<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
        '<a href="javascript:window.__pwned=1">x</a> Answer: A')
JSON_BLOCK = re.compile(r'<script type="application/json" id="samples-data">(.*?)</script>', re.S)


def sample_items(task: str):
    return TASKS[task]().method(RunContext()).load(DataSource(SAMPLE, "sample"), RunContext())


def test_run_writes_report_next_to_results(cli_here, tmp_path, capsys):
    code, out, _ = cli_here("run", "--suite", "sample", "--tasks", "ethics", "--bootstrap", "50",
                       "--out", tmp_path / "run", "--no-progress")
    assert code == 0
    html = (tmp_path / "run" / "report.html").read_text()
    assert "report:" in out and 'id="leaderboard"' in html and "ethics.reasoning" in html


def test_report_command_says_how_far_it_got_and_how_big_the_page_is(cli_here, tmp_path, capsys):
    code, _, _ = cli_here("run", "--suite", "sample", "--tasks", "ethics", "--bootstrap", "50",
                     "--out", tmp_path / "run", "--no-progress")
    n = sum(1 for _ in (tmp_path / "run" / "samples.jsonl").open())
    code, out, err = cli_here("report", tmp_path / "run", "--samples-per-task", "2")
    assert code == 0 and re.search(r"report: .*report\.html \(\d+\.\d MB\)", out)
    assert f"report: {n} samples read" in err
    assert "2 samples of" in (tmp_path / "run" / "report.html").read_text()
    code, _, err = cli_here("report", tmp_path / "run", "--samples-per-task", "0")
    assert code == 2 and "--samples-per-task" in err


def test_a_report_failure_never_loses_the_results(cli_here, tmp_path, capsys, monkeypatch):
    import trustmh.report

    def broken(*a, **k):
        raise RuntimeError("renderer exploded")

    monkeypatch.setattr(trustmh.report, "write_report", broken)
    code, _, err = cli_here("run", "--suite", "sample", "--tasks", "ethics", "--bootstrap", "50",
                       "--out", tmp_path / "run", "--no-progress")
    assert code == 0
    assert (tmp_path / "run" / "results.json").is_file() and (tmp_path / "run" / "samples.jsonl").is_file()
    assert "report.html not written" in err and "renderer exploded" in err
    assert not (tmp_path / "run" / "report.html").exists()


def test_model_output_and_names_are_escaped(tmp_path):
    items = sample_items("ethics.reasoning")
    replay = write_replay(tmp_path / "evil<b>.jsonl",
                          [{"task": "ethics.reasoning", "item_id": it.id, "response": EVIL} for it in items])
    run_quiet(run_spec(models=[f"replay/{replay}"], tasks="ethics", suite="sample"), tmp_path / "run")
    html = render([load_run(tmp_path / "run")])
    # Two script elements only: the JSON data block and the report's own script (with the CSP nonce).
    assert html.count("<script") == 2
    nonce = re.search(r"script-src 'nonce-([^']+)'", html).group(1)
    assert f'<script nonce="{nonce}">' in html
    block = JSON_BLOCK.search(html).group(1)
    page = html.replace(block, "")  # the data block is checked below; the rest holds no reply text at all
    assert "onerror" not in page and "javascript:" not in page and "<img" not in page and "__pwned" not in page
    assert "evil<b>" not in html and "evil&lt;b&gt;" in html
    assert "<" not in block and ">" not in block
    data = json.loads(block)
    assert [r["r"] for r in data["rows"]] == [EVIL] * len(items)


def test_report_is_self_contained(tmp_path):
    run_quiet(run_spec(models=["baseline/counselor"], tasks="ethics", suite="sample"), tmp_path / "run")
    html = render([load_run(tmp_path / "run")])
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    assert "default-src 'none'" in html


@pytest.fixture(scope="module")
def three_models(tmp_path_factory):
    """One run, three replay models on EthicMH: all right, all but one right, 60 right."""
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    tmp = tmp_path_factory.mktemp("three")
    items = TASKS["ethics.reasoning"]().method(RunContext()).load(DataSource(UPSTREAM, "data"), RunContext())
    n_gold = sum(it.target is not None for it in items)
    specs = [f"replay/{ethics_replay(tmp / f'{name}.jsonl', items, n)}"
             for name, n in (("all", None), ("one_off", n_gold - 1), ("sixty", 60))]
    run_quiet(run_spec(models=specs, tasks="ethics.reasoning", suite="data", data_dir=str(UPSTREAM)), tmp / "run")
    return load_run(tmp / "run"), specs, n_gold


def test_leaderboard_ranks_and_ties_by_paired_bootstrap(three_models):
    run, specs, n_gold = three_models
    ctx = build_context([run], paired=True, n_boot=200)
    board = ctx["board"]
    labels = [e.label for e in ctx["entries"]]
    idx = {spec: labels.index(spec) for spec in specs}
    cells = {spec: board.cells[(idx[spec], "ethics")] for spec in specs}
    assert [cells[s].score for s in specs] == pytest.approx([100.0, 100 * (n_gold - 1) / n_gold, 100 * 60 / n_gold])
    assert [cells[s].rank for s in specs] == [1, 2, 3]
    assert [board.cells[(idx[s], "overall")].rank for s in specs] == [1, 2, 3]
    # One discordant item is no evidence of a difference; 65 are.
    assert "paired bootstrap" in cells[specs[1]].tie_note
    assert cells[specs[2]].tie_note == "" and cells[specs[0]].tie_note == ""
    assert [ctx["entries"][i].model for i in board.order] == specs


def test_the_report_reads_samples_once_and_its_rows_are_those_read_apart(three_models, monkeypatch):
    """The drill-down's pass over samples.jsonl builds the rows the paired ties and rank intervals read
    (issue 46 item 5: the report read the file twice, ~a third of its CPU): one pass, and the rows equal
    read_rows' own from a pass of its own; a single model's report unpaired builds none it would not read."""
    from trustmh.analysis import runs
    run, _, _ = three_models
    apart = runs.read_rows(run)
    passes = []
    real = runs.Run.iter_samples
    monkeypatch.setattr(runs.Run, "iter_samples", lambda self: passes.append(1) or real(self))
    kept = {}
    real_keep = runs.keep_rows

    def keeping(rs):  # what the report's passes left kept, as it leaves keep_rows
        ctx = real_keep(rs)

        class Seen:
            def __enter__(self):
                return ctx.__enter__()

            def __exit__(self, *exc):
                kept.update(rs[0].kept_rows or {})
                return ctx.__exit__(*exc)
        return Seen()
    monkeypatch.setattr("trustmh.report.html.keep_rows", keeping)
    build_context([run], paired=True, n_boot=50)
    assert len(passes) == 1
    assert kept["all"].keys() == apart.keys()
    for where, rows in apart.items():
        got = kept["all"][where]
        assert got.keys == rows.keys and got.clusters == rows.clusters
        for name in rows.values:
            want = rows.column(name, rows.keys).tolist()
            assert got.column(name, rows.keys).tolist() == pytest.approx(want, nan_ok=True)
    passes.clear()
    kept.clear()
    one = runs.Run(run.dir, run.results.model_copy(update={"models": dict(list(run.results.models.items())[:1])}))
    build_context([one], paired=False)
    assert len(passes) == 1 and "all" not in kept


def test_leaderboard_ties_by_interval_overlap_without_pairing(three_models):
    run, specs, _ = three_models
    ctx = build_context([run], paired=False, include_samples=False)
    labels = [e.model for e in ctx["entries"]]
    assert "overlaps" in ctx["board"].cells[(labels.index(specs[1]), "ethics")].tie_note


def test_lowest_scoring_samples_sort_first_and_are_kept_when_trimming(three_models):
    run, specs, _ = three_models
    data = json.loads(JSON_BLOCK.search(render([run], paired=False, per_task=10**6)).group(1))
    sixty = data["entries"].index(specs[2])
    rows = [r for r in data["rows"] if r["e"] == sixty]
    # Accuracy is the mean of `correct`, so each sample's score is its own correctness.
    assert all(r["s"] == r["va"]["correct"] for r in rows if "correct" in r["va"])
    trimmed = build_context([run], paired=False, max_samples=30)
    kept = json.loads(str(trimmed["samples_json"]))["rows"]
    assert trimmed["n_total"] == len(data["rows"]) and len(kept) == 30
    assert all(r["s"] == 0 for r in kept if r["e"] == sixty)


def test_correlation_tasks_have_no_per_sample_score(tmp_path):
    run_quiet(run_spec(models=["baseline/random"], tasks="privacy.awareness_tier1", suite="sample"), tmp_path / "run")
    data = json.loads(JSON_BLOCK.search(render([load_run(tmp_path / "run")])).group(1))
    assert data["rows"] and all(r["s"] is None for r in data["rows"])


def _synthetic_run(path: Path) -> Path:
    """A results.json from a future version: an unknown task in an unknown pillar, with grouped metrics."""
    mv = lambda v: MetricValue(value=v, ci=(v - 0.1, v + 0.1), n=10)  # noqa: E731
    metrics = {"drop": mv(0.2), "drop[swap@low]": mv(0.1), "drop[swap@high]": mv(0.3), "drop[@low]": mv(0.1),
               "drop[@high]": mv(0.3), "rate[method=cot]": mv(0.5), "rate[method=plain]": mv(0.7),
               "confusion[a->a]": mv(3.0), "confusion[a->b]": mv(1.0), "confusion[b->a]": mv(0.0),
               "confusion[b->b]": mv(4.0)}
    task = TaskResult(task="future.task", pillar="wellbeing", status="ok", metric="drop", value=0.2, ci=(0.1, 0.3),
                      higher_is_better=False, trust_score=60.0, n=10, n_samples=10, metrics=metrics)
    model = ModelResults(model="m<1>", tasks={"future.task": task}, trust_score=60.0,
                         pillars={"wellbeing": PillarResult(pillar="wellbeing", trust_score=60.0,
                                                            tasks=["future.task"])})
    res = RunResults(run_id="future", created="2030-01-01T00:00:00+00:00", spec={"models": ["m<1>"], "seed": 3},
                     data={"sha256": {}}, versions={}, bootstrap={}, models={"m<1>": model})
    path.mkdir()
    (path / "results.json").write_text(res.model_dump_json())
    return path


def test_unknown_tasks_and_pillars_render_generically(tmp_path):
    run = load_run(_synthetic_run(tmp_path / "future"))
    ctx = build_context([run])
    assert "wellbeing" in ctx["pillars"]
    blocks = {(b.kind, b.title): b for b in ctx["groups"]["future.task"]["blocks"]}
    assert ("curve", "drop by intensity") in blocks
    assert blocks[("table", "rate by method")].shown == {"method=cot": "cot", "method=plain": "plain"}
    matrix = blocks[("matrix", "confusion (row → column)")]
    assert (matrix.rows, matrix.cols) == (["a", "b"], ["a", "b"])
    html = render([run])
    assert "m&lt;1&gt;" in html and "m<1>" not in html
    out = write_report([run], tmp_path / "r.html")
    assert 'class="curve"' in out.read_text() and 'class="cm"' in out.read_text()


def test_radar_places_each_pillar_on_its_axis():
    labels = [f"p{i}" for i in range(8)]
    svg = str(radar_svg(labels, [("m", "#000", [100.0] + [50.0] * 7)], size=440))
    pts = re.search(r'<polygon points="([^"]+)" fill="#000"', svg).group(1).split()
    assert len(pts) == 8
    x0, y0 = map(float, pts[0].split(","))
    x4, y4 = map(float, pts[4].split(","))
    # Axis 0 points straight up at full radius, axis 4 straight down at half of it.
    assert x0 == pytest.approx(x4) and (y4 - 220) == pytest.approx((220 - y0) / 2, abs=0.2)


def test_partial_pillars_are_marked_and_drawn_hollow_and_tasks_name_their_protocol(tmp_path):
    # Jailbreak alone (with over-refusal, which its credit rests on): the paper's safety pillar has two rows
    # (Jailbreak Resistance, Antitoxic), so it is partial; ethics' one row is complete.
    spec = run_spec(models=["baseline/refuse"], tasks="safety.jailbreak,safety.over_refusal,ethics.reasoning",
                    suite="sample")
    run_dir, res, _ = run_quiet(spec, tmp_path / "run")
    mr = res.models["baseline/refuse"]
    assert mr.pillars["safety"].partial and not mr.pillars["ethics"].partial
    html = write_report([run_dir], tmp_path / "r.html").read_text()
    board = html[html.index('id="leaderboard"'):html.index('id="ranks"')]
    assert board.count('<span class="partial" title="partial: 1 of the paper&#39;s 2 rows">') == 1
    assert 'title="partial: 2 of 8 pillars, or a partial pillar"' in board  # the overall score
    radar = html[html.index('<svg id="radar"'):]
    radar = radar[:radar.index("</svg>")]
    vertices = re.findall(r'<circle [^>]*fill="([^"]+)"[^>]*><title>[^<]*· (\w+): [0-9.]+( \(partial\))?', radar)
    assert {(axis, fill == "white", bool(note)) for fill, axis, note in vertices} == {
        ("safety", True, True), ("ethics", False, False)}
    assert html.count("protocol: <b>trustmh</b> · evidence") == 3


def test_trimming_ranks_unanswered_samples_with_the_scored(tmp_path):
    # A refusal is scored against the model (status "no_answer"); trimming used to raise KeyError on it.
    run_quiet(run_spec(models=["baseline/refuse"], tasks="ethics", suite="sample"), tmp_path / "run")
    run = load_run(tmp_path / "run")
    full = json.loads(JSON_BLOCK.search(render([run], paired=False)).group(1))["rows"]
    assert any(r["st"] == "no_answer" for r in full)
    ctx = build_context([run], paired=False, max_samples=2)
    kept = json.loads(str(ctx["samples_json"]))["rows"]
    assert len(kept) == ctx["n_rows"] == 2 < len(full) == ctx["n_total"]
    # Data order, page JSON unchanged by the trimming but for the prompt index: only the kept rows'
    # prompts are in the page, re-numbered.
    prompts = json.loads(str(ctx["samples_json"]))["prompts"]
    assert len(prompts) == len({r["p"] for r in kept}) and sorted({r["p"] for r in kept}) == list(range(len(prompts)))
    assert [dict(r, p=None) for r in kept] == [dict(r, p=None) for r in full if dict(r, p=None) in
                                               [dict(k, p=None) for k in kept]]


def test_the_sample_block_streams_as_it_would_be_written_whole(tmp_path, monkeypatch):
    # script_json is compositional (what lets write_report stream the block a row at a time) on the values
    # that need care: NaN and infinities (null), markup characters, line separators, non-BMP characters.
    from trustmh.report.drilldown import script_json
    parts = [{"a": float("nan"), "b": [1.5, float("-inf")], "c": "</script><!-- & \u2028\u2029 😀"}, "x<y",
             [None, {"d": float("inf")}], 0.1]
    assert script_json(parts) == "[" + ",".join(script_json(p) for p in parts) + "]"
    assert json.loads(script_json(parts))[0] == {"a": None, "b": [1.5, None], "c": parts[0]["c"]}
    # The file write_report streams is the page render() returns.
    monkeypatch.setattr("secrets.token_urlsafe", lambda n=None: "fixed")
    items = sample_items("ethics.reasoning")
    replay = write_replay(tmp_path / "r.jsonl", [{"task": "ethics.reasoning", "item_id": it.id, "response": EVIL}
                                                 for it in items])
    run_quiet(run_spec(models=[f"replay/{replay}", "baseline/refuse"], tasks="ethics", suite="sample"),
              tmp_path / "run")
    run = load_run(tmp_path / "run")
    out = write_report([run], tmp_path / "r.html", paired=False)
    assert out.read_text(encoding="utf-8") == render([run], paired=False)
    assert not list(tmp_path.glob("r.html.*.tmp"))


def test_the_page_keeps_the_worst_of_each_task_within_its_byte_budget_and_no_other_prompt(three_models):
    run, specs, _ = three_models
    full = json.loads(JSON_BLOCK.search(render([run], paired=False, per_task=10**6)).group(1))
    ctx = build_context([run], paired=False, per_task=10)
    page = json.loads(str(ctx["samples_json"]))
    # The 10 worst of each model: the one-off model's single miss and the sixty model's misses come first.
    by_model = {e: [r for r in page["rows"] if r["e"] == e] for e in range(3)}
    assert [len(v) for v in by_model.values()] == [10, 10, 10]
    sixty = page["entries"].index(specs[2])
    assert all(r["s"] == 0 for r in by_model[sixty])
    one_off = page["entries"].index(specs[1])
    assert sorted(r["s"] for r in by_model[one_off])[0] == 0
    # A byte budget: the block is under it, still spread over every model, and holds only the prompts of
    # the rows it keeps (the prompt of a dropped row is nowhere in the page).
    budget = 12_000
    html = render([run], paired=False, max_bytes=budget)
    block = JSON_BLOCK.search(html).group(1)
    small = json.loads(block)
    assert len(block.encode("utf-8")) <= budget and {r["e"] for r in small["rows"]} == {0, 1, 2}
    kept_ids = {r["id"] for r in small["rows"]}
    dropped = {full["prompts"][r["p"]][0]["content"] for r in full["rows"] if r["id"] not in kept_ids}
    assert dropped and len(small["prompts"]) == len(kept_ids)
    from trustmh.report.drilldown import script_json
    assert not any(script_json(text)[1:-1] in block for text in dropped)
    assert all(script_json(m["content"])[1:-1] in block for m in small["prompts"][0])  # the check can fail
    assert ctx["n_total"] == len(full["rows"]) and f"of {ctx['n_total']}" in html and "trustmh view" in html
