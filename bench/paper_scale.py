"""The paper's comparison at scale: M tested models (1, 4, 12) in one `trustmh run --protocol paper`, each
on its own endpoint, one shared LLM judge, against the lean bench server; and the small job (privacy +
ethics, one model) at three connection/latency settings.

    python bench/paper_scale.py --data-dir DIR --methods-dir DIR [--models 1,4,12] [--limit 20]
                                [--connections 64] [--latency 0.2] [--small] [--scale-only]

Every run is `trustmh run` in a child process (the CLI users have; the M models listed in a `--models`
TOML file), against `_server.py` in another: model i answers at <server>/m<i>/v1, the judge at
<server>/judge/v1, each with --max-connections C. The server counts calls per endpoint, so the figures
rest on what was really sent.

Ideal: nothing but the server's latency L costs time, so each endpoint's N calls run C at a time back to
back; the run can end no sooner than its busiest endpoint: ceil(N_busiest / C) * L, plus one L before the
first replies let the judge start and one for the last judgement (`run`: the child's whole wall time,
start-up and report included). `window` is the same from the server's first request to its last reply
(ideal (ceil(N_busiest / C) + 1) * L): the request path alone, what "transport speed" means. Printed
ratios are ideal / measured (1.0 = transport speed). CPU is the child's user + system time (wait4); `ms/call` is
that over its calls (start-up, scoring and the report in it), `marginal` the extra CPU per extra call
against the first row of the table (the same job for fewer models: start-up cancels out, the scoring and
report of the extra samples stay in). Peak RSS is the child's own (GNU time's %M). `start` is the
child's time before the server's first request, `tail` after its last reply (scoring what was left,
samples.jsonl, results.json and report.html), both on the monotonic clock the server stamps with.

The whole benchmark for M models takes M x ~20k model and ~45k judge calls; at 64 connections and
200 ms the judge alone needs 12 x 45k x 0.2 / 64 s, ~28 min, more than a bench run may take here. With
--limit N the run is measured as it is and then extrapolated to the whole benchmark, labelled so: the
per-model call counts of both (from the run's own dry-run plan, `engine._plan`) scale the wall time
(at the measured ratio), samples.jsonl and the report's time (report.html has a size budget of its own);
peak RSS is printed as measured, not scaled (the claim is that it does not grow). `trustmh report` is timed on the run directory in a child; the
report's load time in Chromium is bench/report_scale.py's part.

The bench server answers every model call with REPLY below and every judge call with "Answer: 1":
REPLY parses under both privacy awareness scales, so the paper's re-asks (privacy asks again while a
rating does not parse) do not turn one call per sample into five."""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Server, machine  # noqa: E402

SRC = Path(__file__).resolve().parent.parent / "src"
REPLY = "Answer: 1 (neutral; very sensitive)"
SMALL = "privacy,ethics"
SMALL_CONFIGS = ((16, 0.1), (64, 0.25), (256, 1.0))


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OPENAI_API_KEY"] = "bench-not-a-key"  # loopback server only; never checked
    return env


RSS_EVERY: float | None = None  # --rss-every: poll the child's VmRSS this often (s)


def _vm_rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return None


def _poll_rss(time_pid: int, every: float, out: list[tuple[float, float]], t0: float) -> None:
    """(seconds, VmRSS MiB) of GNU time's child (the trustmh process) until it ends."""
    pid = None
    while pid is None:
        try:
            kids = Path(f"/proc/{time_pid}/task/{time_pid}/children").read_text().split()
        except OSError:
            return
        pid = int(kids[0]) if kids else None
        time.sleep(0.01)
    while (rss := _vm_rss_mib(pid)) is not None:
        out.append((time.perf_counter() - t0, rss))
        time.sleep(every)


def rss_timeline(samples: list[tuple[float, float]], points: int = 12) -> str:
    """The polled RSS as `points` evenly spaced readings (the highest in each stretch) and its peak."""
    if not samples:
        return "no RSS readings"
    end = samples[-1][0]
    cuts = [[] for _ in range(points)]
    for t, rss in samples:
        cuts[min(points - 1, int(t / end * points)) if end else 0].append(rss)
    peak_t, peak = max(samples, key=lambda x: x[1])
    return ("RSS MiB over time (max of each 1/%d): " % points
            + " ".join(f"{max(c):.0f}" if c else "-" for c in cuts) + f"; peak {peak:.0f} at {peak_t:.0f} of {end:.0f} s")


def busy_timeline(stats: dict, conn: int, latency: float, points: int = 12) -> str:
    """How busy the busiest endpoint was over the window: the requests that reached it in each 1/`points`
    of the window against what transport speed sends in that time (C / L per second)."""
    name = max(stats["by_endpoint"], key=stats["by_endpoint"].get)
    per_s = stats.get("per_second", {}).get(name, [])
    if not per_s:
        return "no per-second counts"
    cuts = [0] * points
    for i, n in enumerate(per_s):
        cuts[min(points - 1, i * points // len(per_s))] += n
    seconds = [sum(1 for i in range(len(per_s)) if min(points - 1, i * points // len(per_s)) == c) for c in range(points)]
    full = conn / latency
    return (f"busiest endpoint ({name or 'model'}) requests / transport speed, each 1/{points} of the window: "
            + " ".join(f"{n / (s * full):.2f}" if s else "-" for n, s in zip(cuts, seconds)))


def wait_timeline(stats: dict, points: int = 10) -> str:
    """The busiest endpoint's mean wait between a reply and its connection's next request in each
    1/`points` of the window: the client's own time per reply, which transport speed leaves out, and when
    in the run it was spent (the server measures it: bench/_server.py's `reuse_wait`)."""
    name = max(stats["by_endpoint"], key=stats["by_endpoint"].get)
    waits = stats.get("reuse_wait", {}).get(name, [])
    if not waits:
        return "no waits recorded"
    cuts = [[0.0, 0] for _ in range(points)]
    for i, (seconds, n) in enumerate(waits):
        cut = cuts[min(points - 1, i * points // len(waits))]
        cut[0] += seconds
        cut[1] += n
    total = sum(s for s, _ in waits) / max(1, sum(n for _, n in waits))
    return (f"reply -> next request on its connection ({name or 'model'}), mean ms, each 1/{points} of the window: "
            + " ".join(f"{1e3 * s / n:.1f}" if n else "-" for s, n in cuts) + f"; overall {1e3 * total:.2f}")


def child(cmd: list[str]) -> dict[str, float]:
    """Run a child to its end: wall s, CPU s and peak RSS MiB of that child alone. The child is started by
    GNU time, a small process: Linux carries a process's peak RSS across exec, so a child forked from this
    script (which has loaded the benchmark to plan it) would report this script's size as its own."""
    t0, started = time.perf_counter(), time.monotonic()  # monotonic: the bench server's clock too
    proc = subprocess.Popen(["/usr/bin/time", "-f", "RSS_KB %M", *cmd], env=child_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    polled: list[tuple[float, float]] = []
    if RSS_EVERY:
        import threading
        threading.Thread(target=_poll_rss, args=(proc.pid, RSS_EVERY, polled, t0), daemon=True).start()
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall, ended = time.perf_counter() - t0, time.monotonic()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[3:6])} ... failed ({proc.returncode}):\n{err[-3000:]}")
    rss_kb = [line for line in err.splitlines() if line.startswith("RSS_KB ")][-1].split()[1]
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": int(rss_kb) / 1024, "polled": polled,
            "started": started, "ended": ended}


def write_models(path: Path, url: str, m: int) -> list[str]:
    specs = [f"openai/m{i}" for i in range(m)]
    path.write_text("".join(f'[[model]]\nspec = "{s}"\nbase_url = "{url}/m{i}/v1"\nlabel = "Model {i}"\n'
                            f'group = "{"general" if i % 2 == 0 else "mental-health"}"\n\n'
                            for i, s in enumerate(specs)), encoding="utf-8")
    return specs


def planned_calls(a, tasks: str, limit: int | None) -> tuple[int, int]:
    """(model calls, judge calls) one model's run would make, from the engine's dry-run plan."""
    sys.path.insert(0, str(SRC))
    from trustmh.engine import RunSpec, context, prepare
    from trustmh.engine._plan import plan
    spec = RunSpec(models=["openai/m0"], judge="openai/j", tasks=tasks, limit=limit, suite="data",
                   data_dir=a.data_dir, protocol="paper", methods_dir=a.methods_dir, base_url="http://127.0.0.1:9/v1",
                   judge_base_url="http://127.0.0.1:9/judge/v1")
    prepared, _ = prepare(spec, context(spec))
    with tempfile.TemporaryDirectory(prefix="trustmh-plan-") as nowhere:  # a run folder that never exists
        rows = plan(spec, context(spec), prepared, Path(nowhere) / "none")
    return sum(r.model_calls for r in rows), sum(r.judge_calls for r in rows)


def one_run(a, m: int, tasks: str, limit: int | None, conn: int, latency: float, tmp: Path,
            report: bool) -> dict:
    run_dir = tmp / f"run-{m}-{conn}"
    with Server(latency, reply=REPLY) as server:
        url = f"http://127.0.0.1:{server.port}"
        listing = tmp / f"models-{m}.toml"
        specs = write_models(listing, url, m)
        # --models FILE; code from before it (--src) is given the same models as --model SPEC@URL
        chosen = ["--models", str(listing)] if a.src is None else \
            [x for i, spec in enumerate(specs) for x in ("--model", f"{spec}@{url}/m{i}/v1")]
        cmd = [sys.executable, "-m", "trustmh.cli", "run", *chosen, "--judge", "openai/j",
               "--judge-base-url", f"{url}/judge/v1", "--max-connections", str(conn), "--suite", "data",
               "--data-dir", a.data_dir, "--methods-dir", a.methods_dir, "--protocol", "paper", "--tasks", tasks,
               "--bootstrap", str(a.bootstrap), "--out", str(run_dir), "--no-progress",
               # the bench judge answers "Answer: 1", which most rubrics cannot read: the gate on unusable
               # verdicts (exit 2) is not what this measures
               "--max-judge-failed", "1",
               # privacy.leakage's third party is the run's judge, on this server (the paper's default proxy,
               # openai/gpt-4, would be called at api.openai.com)
               "--proxy-judge", "rules"]
        if limit is not None:
            cmd += ["--limit", str(limit)]
        load0 = os.getloadavg()[0]
        r = child(cmd)
        stats = server.stats()
    r["load"] = (load0, os.getloadavg()[0])
    by = stats["by_endpoint"]
    r["calls"], r["busiest"] = sum(by.values()), max(by.values())
    r["judge_calls"] = by.get("/judge", 0)
    waves = math.ceil(r["busiest"] / conn)  # C at a time: the last wave takes a whole L however full
    r["ideal"] = (waves + 2) * latency
    r["window"] = stats["last_answer"] - stats["first_request"]
    r["window_ideal"] = (waves + 1) * latency
    # the child's time before the server's first request, and after its last reply (scoring what was left,
    # samples.jsonl, results.json, report.html)
    r["start_s"], r["tail_s"] = stats["first_request"] - r["started"], r["ended"] - stats["last_answer"]
    r["busy"] = busy_timeline(stats, conn, latency)
    r["waits"] = wait_timeline(stats)
    r["report_mb"] = (run_dir / "report.html").stat().st_size / 2**20
    r["samples_mb"] = (run_dir / "samples.jsonl").stat().st_size / 2**20
    r["store_mb"] = (run_dir / "store.sqlite").stat().st_size / 2**20
    if report:
        rep = child([sys.executable, "-m", "trustmh.cli", "report", str(run_dir), "-o", str(tmp / "report.html")])
        r["report_s"], r["report_rss"] = rep["wall"], rep["rss"]
    shutil.rmtree(run_dir, ignore_errors=True)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--methods-dir", required=True)
    ap.add_argument("--models", default="1,4,12", help="model counts to run, comma-separated")
    ap.add_argument("--tasks", default="all")
    ap.add_argument("--limit", type=int, default=20, help="first N items of each task (0: the whole benchmark)")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--small", action="store_true", help="also the small job at (16, 0.1), (64, 0.25), (256, 1)")
    ap.add_argument("--scale-only", action="store_true", help="with --small: skip the M-model runs")
    ap.add_argument("--rss-every", type=float, default=None, metavar="S",
                    help="also poll the run's RSS every S seconds and print it over time")
    ap.add_argument("--src", type=Path, default=None,
                    help="run the children with this src/ folder (another checkout's, e.g. from `git archive`)")
    ap.add_argument("--pyc", action="store_true",
                    help="compile the src/ folder's bytecode first, as an installed package has it (where "
                         "PYTHONDONTWRITEBYTECODE is set, each child otherwise compiles trustmh's ~90 modules "
                         "from source: ~0.2 s of its start-up)")
    a = ap.parse_args()
    global SRC, RSS_EVERY
    SRC = a.src.resolve() if a.src else SRC
    if a.pyc:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(SRC)], check=True, stdout=subprocess.DEVNULL)
    RSS_EVERY = a.rss_every
    limit = a.limit or None
    tmp = Path(tempfile.mkdtemp(prefix="trustmh-scale-"))
    print(machine())
    print(f"src: {SRC}{' (bytecode compiled first)' if a.pyc else ''}")
    print(f"load average at start {os.getloadavg()[0]:.2f}")
    try:
        if a.small:
            print(f"\nsmall job: {SMALL}, one model + judge, --protocol paper, 1000 resamples")
            print(f"{'C':>4} {'L s':>5} {'calls':>6} {'busiest':>7} {'window s':>8} {'ideal':>6} {'ratio':>5}   "
                  f"{'run s':>6} {'ideal':>6} {'ratio':>5} {'CPU s':>6} {'ms/call':>7} {'start s':>7} {'tail s':>6}  load")
            for conn, lat in SMALL_CONFIGS:
                r = one_run(a, 1, SMALL, None, conn, lat, tmp, report=False)
                print(f"{conn:>4} {lat:>5} {r['calls']:>6} {r['busiest']:>7} {r['window']:>8.2f} "
                      f"{r['window_ideal']:>6.2f} {r['window_ideal'] / r['window']:>5.2f}   {r['wall']:>6.2f} "
                      f"{r['ideal']:>6.2f} {r['ideal'] / r['wall']:>5.2f} {r['cpu']:>6.2f} "
                      f"{r['cpu'] / r['calls'] * 1e3:>7.3f} {r['start_s']:>7.2f} {r['tail_s']:>6.2f}  "
                  f"{r['load'][0]:.1f}->{r['load'][1]:.1f}", flush=True)
                print(f"      {r['waits']}", flush=True)
        if a.scale_only:
            return
        full = planned_calls(a, a.tasks, None)
        at = planned_calls(a, a.tasks, limit) if limit else full
        scale = (full[0] + full[1]) / max(1, at[0] + at[1])
        print(f"\nM models x {a.tasks} (--limit {limit or 'none'}), {a.connections} connections per endpoint, "
              f"{a.latency * 1000:.0f} ms, --protocol paper, {a.bootstrap} resamples")
        print(f"planned calls per model: {at[0]} model + {at[1]} judge at this limit; the whole benchmark "
              f"{full[0]} + {full[1]} (x{scale:.1f})")
        print(f"{'M':>3} {'calls':>7} {'busiest':>7} {'window s':>8} {'ideal':>6} {'ratio':>5}   {'run s':>6} "
              f"{'ideal':>6} {'ratio':>5} {'CPU s':>6} {'ms/call':>7} {'marginal':>8} {'RSS MiB':>7} {'report MB':>9} "
              f"{'samples MB':>10} {'report s':>8} {'start s':>7} {'tail s':>6}  load")
        first = None
        for m in (int(x) for x in a.models.split(",")):
            r = one_run(a, m, a.tasks, limit, a.connections, a.latency, tmp, report=True)
            first = first or r
            marginal = (f"{(r['cpu'] - first['cpu']) / (r['calls'] - first['calls']) * 1e3:>8.3f}"
                        if r["calls"] > first["calls"] else f"{'-':>8}")
            print(f"{m:>3} {r['calls']:>7} {r['busiest']:>7} {r['window']:>8.1f} {r['window_ideal']:>6.1f} "
                  f"{r['window_ideal'] / r['window']:>5.2f}   {r['wall']:>6.1f} {r['ideal']:>6.1f} "
                  f"{r['ideal'] / r['wall']:>5.2f} {r['cpu']:>6.1f} {r['cpu'] / r['calls'] * 1e3:>7.3f} {marginal} "
                  f"{r['rss']:>7.0f} {r['report_mb']:>9.1f} {r['samples_mb']:>10.1f} {r['report_s']:>8.1f} "
                  f"{r['start_s']:>7.1f} {r['tail_s']:>6.1f}  "
                  f"{r['load'][0]:.1f}->{r['load'][1]:.1f}", flush=True)
            print(f"    {r['busy']}", flush=True)
            print(f"    {r['waits']}", flush=True)
            if RSS_EVERY:
                print(f"    {rss_timeline(r['polled'])}; `trustmh report` on the run: peak RSS {r['report_rss']:.0f} MiB",
                      flush=True)
            if limit:
                print(f"    extrapolated to the whole benchmark (x{scale:.1f}, not measured): run "
                      f"~{r['wall'] * scale / 60:.0f} min at this ratio (ideal {r['ideal'] * scale / 60:.0f} min), "
                      f"samples.jsonl ~{r['samples_mb'] * scale:.0f} MB, trustmh report ~{r['report_s'] * scale:.0f} s; "
                      f"report.html is held to a fixed budget (bench/report_scale.py --paper-scale), not scaled",
                      flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
