"""`trustmh report --figures DIR` (issue 34, item 9): the rank heat map and the pillar radar as SVG and PNG,
built from the same rows as `--format csv`: each heat-map cell's text (kept as text in the SVG) is read back
and compared with the CSV's rank, model labels are whole, and the offline run never needs matplotlib."""

import csv
import io
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest


from test_rank_table_browser import ROWS, write_run

SVG = "{http://www.w3.org/2000/svg}"
pytest.importorskip("matplotlib", reason="matplotlib is in the dev extra; install with pip install -e '.[dev]'")


def texts(svg: ET.Element) -> list[str]:
    return ["".join(t.itertext()).strip() for t in svg.iter(f"{SVG}text")]


def test_figures_are_written_from_the_rank_table_rows(cli_here, tmp_path, capsys):
    models = {"openai/gpt-4o-mini": "GPT-4o-mini", "hf/mental-llama": "Mental & LLaMA_2 {x}",
              "openai/a-model-with-a-long-name-that-must-not-be-cut": "", "echo": ""}
    scores = {m: {t: float((11 * k + 5 * j) % 50) for j, t in enumerate(ROWS)} | {"safety.over_refusal": 1.0 * k}
              for k, m in enumerate(models)}
    run = write_run(tmp_path / "run", scores, {m: "general" if k < 2 else "mental-health"
                                               for k, m in enumerate(models)},
                    values={"echo": {"crisis.severity": None}})  # a null value: no rank (issue 47)
    code, out, err = cli_here("report", run, "--figures", tmp_path / "fig")
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "fig").iterdir())
    assert names == ["pillars-radar.png", "pillars-radar.svg", "ranks-heatmap.png", "ranks-heatmap.svg"]
    for png in ("pillars-radar.png", "ranks-heatmap.png"):
        data = (tmp_path / "fig" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    code, csv_text, _ = cli_here("report", run, "--format", "csv")
    records = list(csv.DictReader(io.StringIO(csv_text)))
    shown = [r["model"] for r in records[:len(models)]]  # the columns, in the table's order
    rows = list(dict.fromkeys((r["pillar"], r["row"]) for r in records))
    heat = ET.parse(tmp_path / "fig" / "ranks-heatmap.svg").getroot()
    cells = {g.get("id"): "".join(g.itertext()).strip() for g in heat.iter(f"{SVG}g")
             if (g.get("id") or "").startswith("cell-")}
    assert len(cells) == len(records) == len(rows) * len(models)
    for k, r in enumerate(records):
        i, j = divmod(k, len(models))
        expected = (r["rank"] + ("*" if r["ranked_apart"] else "") + ("†" if r["tie_broken"] else "")) or (
            "undefined" if r["undefined"] else "–")
        assert cells[f"cell-{i}-{j}"] == expected, (r["row"], r["model"])
    assert list(cells.values()).count("undefined") == 1 and not any(r["rank"] for r in records if r["undefined"])
    words = texts(heat)
    assert all(m in words for m in shown)  # whole model names, never cut
    assert all(row in words or f"{row} (beyond the paper)" in words for _, row in rows)
    assert {"general", "mental-health"} <= set(words)
    radar = texts(ET.parse(tmp_path / "fig" / "pillars-radar.svg").getroot())
    assert all(m in radar for m in shown) and "Reliability" in radar
    # The same runs give the same files (no date inside).
    code, _, _ = cli_here("report", run, "--figures", tmp_path / "again")
    assert (tmp_path / "again" / "ranks-heatmap.svg").read_bytes() == (tmp_path / "fig" / "ranks-heatmap.svg").read_bytes()


def test_figures_without_matplotlib_say_what_to_install(cli_here, tmp_path, capsys, monkeypatch):
    run = write_run(tmp_path / "run", {"m": {t: 50.0 for t in ROWS}})
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    code, _, err = cli_here("report", run, "--figures", tmp_path / "fig")
    assert code == 2 and 'pip install "trustmh[figures]"' in err and "Traceback" not in err
    (tmp_path / "file").write_text("x")
    code, _, err = cli_here("report", run, "--figures", tmp_path / "file")
    assert code == 2 and "not a folder" in err


def test_the_offline_run_and_the_report_never_import_matplotlib():
    code = ("import sys, trustmh, trustmh.cli, trustmh.report.html, trustmh.report.ranks; "
            "print('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
