"""Adaptive concurrency against a rate-limited server: does trustmh settle near the server's rate R
without failing samples?

    python bench/rate_limit.py [--rate 200] [--latency 0.05] [--connections 64] [--samples 1500]

The lean server (own process) admits R requests/s from a token bucket (one second of burst) and answers
the rest 429 with Retry-After at once. With C connections and latency L, the client could send C / L
req/s, far above R. Two runs side by side, the same job (generation + judge per sample, openai/ models):

  adaptive  trustmh as shipped: a 429 cuts the in-flight limit and pauses for Retry-After
  fixed     the same with the cut and the pause switched off (each request still honours its own
            Retry-After and retries up to --max-retries): what a plain bounded pool does

Printed: the settled rate (successful replies/s between 30% and 90% of the run, past the bucket's
initial burst) divided by R, the 429s received, and samples that failed (must be 0)."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Server, collect_once, machine, synthetic_spec  # noqa: E402

from trustmh import limiter as limiter_mod  # noqa: E402
from trustmh import runner  # noqa: E402


class Poller:
    """Samples the server's counters every 0.1 s so the settled rate can be read off a window."""

    def __init__(self, srv: Server):
        self.srv, self.points, self.stop = srv, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import time
        while not self.stop.is_set():
            self.points.append((time.monotonic(), self.srv.stats()["ok"]))
            self.stop.wait(0.1)

    def rate(self, lo: float, hi: float) -> float:
        t0, t1 = self.points[0][0], self.points[-1][0]
        window = [p for p in self.points if t0 + lo * (t1 - t0) <= p[0] <= t0 + hi * (t1 - t0)]
        (ta, a), (tb, b) = window[0], window[-1]
        return (b - a) / (tb - ta)


def one_run(adaptive: bool, a, srv: Server) -> dict:
    made: list[limiter_mod.AdaptiveLimiter] = []

    class Recorded(limiter_mod.AdaptiveLimiter):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            made.append(self)

        if not adaptive:
            def on_rate_limit(self, epoch, retry_after):  # a plain bounded pool: no cut, no shared pause
                return None

    original = runner.AdaptiveLimiter
    runner.AdaptiveLimiter = Recorded
    tmp = Path(tempfile.mkdtemp(prefix="trustmh-bench-"))
    s0 = srv.stats()
    poll = Poller(srv)
    poll.thread.start()
    try:
        spec = synthetic_spec(a.samples, base_url=srv.base_url)
        r = collect_once(spec, runner.Limits(max_connections=a.connections, max_retries=a.max_retries), tmp)
    finally:
        poll.stop.set()
        poll.thread.join()
        runner.AdaptiveLimiter = original
        shutil.rmtree(tmp, ignore_errors=True)
    s1 = srv.stats()
    return {"settled": poll.rate(0.3, 0.9), "limited": s1["rate_limited"] - s0["rate_limited"],
            "failed": r["failed"], "limits": [round(x.limit, 1) for x in made], "wall": r["wall"],
            "ok": s1["ok"] - s0["ok"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--samples", type=int, default=1500)
    ap.add_argument("--max-retries", type=int, default=6)
    a = ap.parse_args()
    print(f"machine: {machine()}")
    print(f"server: {a.rate:.0f} req/s token bucket, {a.latency * 1e3:.0f} ms latency; client: {a.connections} "
          f"connections per endpoint (could send {2 * a.connections / a.latency:.0f} req/s), "
          f"{a.samples} samples x (generation + judge), --max-retries {a.max_retries}\n")
    print(f"{'run':<9} {'settled/R':>9} {'429s':>6} {'failed samples':>14} {'final limits':>14} {'wall s':>7}")
    for adaptive in (True, False):
        with Server(a.latency, rate_limit=a.rate) as srv:  # a fresh bucket per run
            r = one_run(adaptive, a, srv)
        print(f"{'adaptive' if adaptive else 'fixed':<9} {r['settled'] / a.rate:>9.2f} {r['limited']:>6} "
              f"{r['failed']:>14} {str(r['limits']):>14} {r['wall']:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
