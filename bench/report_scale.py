"""How the HTML report copes with a large run: generation time, file size, and in headless Chromium (the
system one, driven by Playwright from the dev extra) the time to first paint, to a usable sample table and
to apply a filter.

    python bench/report_scale.py [--data-dir DIR] [--models 14] [--repeat 3]
    python bench/report_scale.py --paper-scale [--models 12] [--source RUN]

The first form builds one real run (replay models over the privacy and ethics tasks of the upstream data,
731 samples per model) and compares the paged drill-down (50 rows a page, samples parsed after the first
frame) with rendering every row at once.

`--paper-scale` is the paper's comparison: M models (12) on the whole benchmark. It runs one model
(baseline/counselor, the paper protocol, the rules judge: no network, ~70 s here) on every task of the
upstream data, or takes `--source RUN`, and makes an M-model run of it: the same samples under M model
names, each reply lengthened by a seeded 0-6 sentences so that replies differ in size as real ones do
(prompts are the same for every model, as in a real run). Then `trustmh report` (a subprocess: wall
time and peak RSS) with its defaults (the worst 100 samples of each model and task within 20 MB) beside
the same page with every sample up to the old default of 50,000 rows, both loaded in Chromium; and
`trustmh view` on the same run: the index build and the first page of rows in Chromium. All measured
side by side in one process on one machine."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
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
    samples = [(t, s) for t in resolve_tasks("privacy,ethics") for it in t.method(ctx).load(data, ctx) for s in t.method(ctx).samples(it, ctx)]
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


def build_source(data_dir: Path, out: Path) -> Path:
    """One model on the whole benchmark, offline (the paper protocol's requests, the rules judge)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.setdefault("TRUSTMH_METHODS_DIR", str(ROOT.parent / "shared" / "methods"))
    subprocess.run([sys.executable, "-m", "trustmh", "run", "--model", "baseline/counselor", "--judge", "rules",
                    "--data-dir", str(data_dir), "--out", str(out), "--bootstrap", "100", "--no-progress"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return out


def replicate(source: Path, out: Path, n_models: int) -> int:
    """An M-model run of a one-model run: each sample under every model name, replies lengthened."""
    import hashlib
    out.mkdir()
    res = json.loads((source / "results.json").read_text(encoding="utf-8"))
    (only,) = res["models"].values()
    names = [f"model-{k:02d}" for k in range(n_models)]
    res["models"] = {n: dict(only, model=n) for n in names}
    res["spec"]["models"] = names
    n = 0
    h = hashlib.sha256()
    with (source / "samples.jsonl").open(encoding="utf-8") as src, (out / "samples.jsonl").open("wb") as dst:
        for i, line in enumerate(src):
            rec = json.loads(line)
            for k, name in enumerate(names):
                extra = FILLER * random.Random(i * 131 + k).randint(0, 6)
                blob = (json.dumps(dict(rec, model=name, response=(rec.get("response") or "") + " " + extra),
                                   ensure_ascii=False) + "\n").encode("utf-8")
                dst.write(blob)
                h.update(blob)
                n += 1
    res["outputs"]["samples_sha256"] = h.hexdigest()
    (out / "results.json").write_text(json.dumps(res), encoding="utf-8")
    return n


def timed_report(run: Path, out: Path, *extra: str) -> tuple[float, float]:
    """`trustmh report` in a subprocess: wall seconds and peak RSS (MiB) of that process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "trustmh", "report", str(run), "-o", str(out), "--no-paired",
                             *extra], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    assert status == 0, f"trustmh report failed ({status})"
    return time.perf_counter() - t0, usage.ru_maxrss / 1024


def measure_view(run: Path) -> dict[str, float]:
    """`trustmh view`: the index build, then in Chromium the time to the first page of rows and to a
    filtered page."""
    import threading
    from trustmh.analysis.runs import load_run
    from trustmh.report.viewer import make_server
    from trustmh.testing.browser import chromium_tab
    t0 = time.perf_counter()
    server = make_server([load_run(run)], 0)
    built = time.perf_counter() - t0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with chromium_tab() as tab:
            page = tab.page
            t0 = time.perf_counter()
            page.goto(server.url, timeout=300_000)  # the address with the session's token
            page.locator("body[data-ready='1']").wait_for(state="attached", timeout=300_000)
            first = time.perf_counter() - t0
            fcp = page.evaluate("(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime")
            def shown_after(action) -> float:
                """Seconds from `action` to the next page of rows shown."""
                n = int(page.get_attribute("body", "data-loads"))
                t0 = time.perf_counter()
                action()
                page.locator(f"body[data-loads='{n + 1}']").wait_for(state="attached", timeout=300_000)
                return time.perf_counter() - t0

            filtered = shown_after(lambda: page.select_option("#f-task", index=3))
            page_two = shown_after(lambda: page.click("#next"))
            shown_after(lambda: page.select_option("#f-task", index=0))
            # Every sample searched; the page waits 250 ms after the last keystroke, counted here.
            searched = shown_after(lambda: page.fill("#f-search", "hopeless"))
            assert not tab.errors, tab.errors
    finally:
        server.shutdown()
        server.server_close()
    return {"index_s": built, "first_rows_s": first, "first_paint_ms": fcp, "filter_s": filtered,
            "next_page_s": page_two, "search_s": searched, "samples": len(server.RequestHandlerClass.index.rows)}


def paper_scale(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        source = args.source or build_source(args.data_dir, tmp / "one")
        print(f"source run: {source} ({time.perf_counter() - t0:.0f} s)")
        n = replicate(source, tmp / "run", args.models)
        size = (tmp / "run" / "samples.jsonl").stat().st_size / 1e6
        print(f"{args.models} models x the whole benchmark: {n} samples, samples.jsonl {size:.0f} MB")
        variants = {"default (worst 100 per model and task, <= 20 MB)": (),
                    "every sample up to 50,000 rows (the old default)": ("--samples-per-task", "1000000",
                                                                         "--sample-mb", "100000")}
        rows = {}
        for name, extra in variants.items():
            if args.view_only:
                break
            out = tmp / f"report-{len(rows)}.html"
            wall, rss = timed_report(tmp / "run", out, *extra)
            rows[name] = {"size_mb": out.stat().st_size / 1e6, "report_s": wall, "rss_mib": rss,
                          **measure(out, args.repeat)}
        if rows:
            a, e = rows.values()
            print(f"\n{'':34}{'default':>12}{'every row':>12}{'every/default':>15}")
            for key, label in (("size_mb", "report.html (MB)"), ("report_s", "trustmh report (s)"),
                               ("rss_mib", "trustmh report peak RSS (MiB)"),
                               ("first_paint_ms", "first contentful paint (ms)"),
                               ("samples_ready_ms", "sample table usable (ms)"), ("filter_ms", "apply a filter (ms)")):
                ratio = e[key] / a[key] if a[key] else float("nan")
                print(f"{label:34}{a[key]:>12.2f}{e[key]:>12.2f}{ratio:>15.2f}")
        v = measure_view(tmp / "run")
        print(f"\ntrustmh view of the same run ({v['samples']} samples): index built in {v['index_s']:.1f} s; "
              f"in Chromium first paint {v['first_paint_ms']:.0f} ms, first page of rows {v['first_rows_s']:.2f} s, "
              f"a task filter {v['filter_s']:.2f} s, its next page {v['next_page_s']:.2f} s, a search of every sample "
              f"{v['search_s']:.2f} s")
        print(f"(page loads: medians of {args.repeat} in headless Chromium)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "upstream")
    ap.add_argument("--models", type=int, default=None,
                    help="replay models of 731 samples each (default 14: 10,234); with --paper-scale, models (12)")
    ap.add_argument("--repeat", type=int, default=3, help="page loads per variant (median reported)")
    ap.add_argument("--paper-scale", action="store_true", help="M models x the whole benchmark (see above)")
    ap.add_argument("--source", type=Path, default=None, help="--paper-scale: a one-model whole-benchmark run")
    ap.add_argument("--view-only", action="store_true", help="--paper-scale: measure trustmh view only")
    args = ap.parse_args()
    if args.paper_scale:
        args.models = args.models or 12
        return paper_scale(args)
    args.models = args.models or 14
    from trustmh.analysis.runs import load_run
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
