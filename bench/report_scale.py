"""How the HTML report copes with a 10,000-sample run: generation time, file size, and in headless
Chromium (the system one, driven by Playwright from the dev extra) the time to first paint, to a usable
sample table and to apply a filter, for the paged drill-down (50 rows a page, samples parsed after the
first frame) against rendering every row at once.

    python bench/report_scale.py [--data-dir DIR] [--models 14] [--repeat 3]

It builds one real run (replay models over the privacy and ethics tasks of the upstream data, 731
samples per model), writes both report variants from it and loads each in turn in the same browser,
so the ratios printed are measured side by side on one machine in one process."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILLER = ("I hear how hard this has been for you. Before anything else, I want to say that what you are "
          "feeling makes sense given everything you described. ")


def make_replays(data_dir: Path, out: Path, n_models: int) -> tuple[list[str], int]:
    """One replay file per model: a choice from each item's answer space (free text where it has none),
    followed by a paragraph, so replies have a realistic length."""
    from trustmh.tasks import DataSource, RunContext, resolve_tasks
    ctx, data = RunContext(), DataSource(data_dir, "data")
    samples = [(t, s) for t in resolve_tasks("privacy,ethics") for it in t.load(data, ctx) for s in t.samples(it, ctx)]
    specs = []
    for k in range(n_models):
        rng = random.Random(k)
        lines = []
        for task, s in samples:
            choice = rng.choice(s.choices) if s.choices else rng.choice(["I can't share that.", "Yes, Alex knows."])
            lines.append(json.dumps({"task": task.id, "item_id": s.item.id, "variant": s.variant,
                                     "response": f"Answer: {choice}\n\n" + FILLER * rng.randint(1, 4)}))
        path = out / f"model{k:02d}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        specs.append(f"replay/{path}")
    return specs, len(samples) * n_models


def measure(path: Path, repeat: int) -> dict[str, float]:
    from trustmh.testing.browser import chromium_tab
    runs: dict[str, list[float]] = {"first_paint_ms": [], "samples_ready_ms": [], "filter_ms": [], "rows_in_dom": []}
    with chromium_tab() as tab:
        page = tab.page
        for _ in range(repeat):
            page.goto(path.as_uri(), timeout=300_000)
            # A locator wait: the report's CSP forbids the eval behind wait_for_function.
            page.locator("body[data-samples-ready='1']").wait_for(state="attached", timeout=300_000)
            fcp = page.evaluate("(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime")
            ready = page.evaluate("performance.getEntriesByName('trustmh-samples-ready')[0].startTime")
            # A filter change is applied synchronously: time it inside the page.
            took = page.evaluate("""(() => { const s = document.getElementById('f-status');
                const t0 = performance.now(); s.value = 'ok'; s.dispatchEvent(new Event('change'));
                return performance.now() - t0; })()""")
            runs["first_paint_ms"].append(fcp)
            runs["samples_ready_ms"].append(ready)
            runs["filter_ms"].append(took)
            runs["rows_in_dom"].append(page.locator("#sample-rows tr").count())
        assert not tab.errors, tab.errors
    return {k: statistics.median(v) for k, v in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "upstream")
    ap.add_argument("--models", type=int, default=14, help="replay models of 731 samples each (14: 10,234)")
    ap.add_argument("--repeat", type=int, default=3, help="page loads per variant (median reported)")
    args = ap.parse_args()
    from trustmh.compare import load_run
    from trustmh.report import write_report
    from trustmh.engine import RunSpec, run
    from trustmh.testing.browser import find_chromium

    if not (args.data_dir / "trustmh").is_dir():
        sys.exit(f"no upstream data in {args.data_dir} (pass --data-dir)")
    if find_chromium() is None:
        sys.exit("chromium not found (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        specs, n = make_replays(args.data_dir, tmp, args.models)
        t0 = time.perf_counter()
        run(RunSpec(models=specs, tasks="privacy,ethics", suite="data", data_dir=str(args.data_dir), n_boot=100,
                    protocol="trustmh"),
            tmp / "run")
        print(f"run: {n} samples, {len(specs)} models, scored in {time.perf_counter() - t0:.1f} s")
        loaded = load_run(tmp / "run")
        variants = {"paged (50/page, parsed after first paint)": 50, "eager (every row at load)": 0}
        results = {}
        t0 = time.perf_counter()
        write_report([loaded], tmp / "warm-up.html", paired=False)  # the variants differ in one number only
        print(f"report generated in {time.perf_counter() - t0:.2f} s "
              f"({(tmp / 'warm-up.html').stat().st_size / 1e6:.1f} MB)")
        for name, size in variants.items():
            path = write_report([loaded], tmp / f"report-{size}.html", page_size=size, paired=False)
            results[name] = {"size_mb": path.stat().st_size / 1e6, **measure(path, args.repeat)}
        (paged, p), (eager, e) = results.items()
        print(f"\n{'':34}{'paged':>12}{'eager':>12}{'eager/paged':>14}")
        for key, label in (("size_mb", "file size (MB)"),
                           ("first_paint_ms", "first contentful paint (ms)"),
                           ("samples_ready_ms", "sample table usable (ms)"),
                           ("filter_ms", "apply a filter (ms)"), ("rows_in_dom", "sample rows in the DOM")):
            ratio = e[key] / p[key] if p[key] else float("nan")
            print(f"{label:34}{p[key]:>12.2f}{e[key]:>12.2f}{ratio:>14.2f}")
        print(f"\n(medians of {args.repeat} loads in headless Chromium; {n} samples)")


if __name__ == "__main__":
    main()
