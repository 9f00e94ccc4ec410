"""Adaptive concurrency and rate pacing against a rate-limited server: does trustmh settle near the
server's rate R without failing samples, and how many 429s does it meet on the way?

    python bench/rate_limit.py [--cases 200:1500,50:400,20:200] [--latency 0.05] [--connections 64]

Each case is R:N, a server admitting R req/s and N samples. The lean server (own process) admits R
requests/s from a token bucket (one second of burst) and answers the rest 429 with Retry-After at once.
With C connections and latency L, the client could send C / L req/s, far above R. The job is generation
+ judge per sample (openai/ models, both endpoints on the same server, so they share R). At 20 req/s and
50 ms each endpoint gets ~10 req/s, half a request per round trip: below what one request in flight
sends, the case the concurrency limit alone cannot handle. Rows, each on a fresh server:

  adaptive    trustmh as shipped: a 429 cuts the in-flight limit, pauses for Retry-After, and (from the
              second cut on) paces request starts at the rate the server was measured to admit
  no-pacing   the same without the pacing (AdaptiveLimiter(pacing=False)): the limiter before pacing
  fixed       no cut, no shared pause, no pacing (each request still honours its own Retry-After and
              retries up to --max-retries): what a plain bounded pool does

Printed: the settled rate (successful replies/s between 30% and 90% of the run, past the bucket's
initial burst) divided by R, the 429s received, samples that failed (must be 0; a failed generation or
judge call fails its sample), the final in-flight limits and pace (req/s, '-' when not pacing) of the
two endpoints, and the wall time."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Server, collect_once, machine, synthetic_spec  # noqa: E402

from trustmh.engine import _endpoint as endpoint_mod  # noqa: E402  (where Endpoint builds its limiter)
from trustmh.engine import _limiter as limiter_mod  # noqa: E402
from trustmh import engine as runner  # noqa: E402


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


def one_run(row: str, samples: int, a, srv: Server) -> dict:
    made: list[limiter_mod.AdaptiveLimiter] = []

    class Recorded(limiter_mod.AdaptiveLimiter):
        def __init__(self, *args, **kw):
            super().__init__(*args, pacing=row == "adaptive", **kw)
            made.append(self)

        if row == "fixed":
            def on_rate_limit(self, epoch, retry_after):  # a plain bounded pool: no cut, no shared pause
                return None

    original = endpoint_mod.AdaptiveLimiter
    endpoint_mod.AdaptiveLimiter = Recorded
    tmp = Path(tempfile.mkdtemp(prefix="trustmh-bench-"))
    s0 = srv.stats()
    poll = Poller(srv)
    poll.thread.start()
    try:
        spec = synthetic_spec(samples, base_url=srv.base_url)
        r = collect_once(spec, runner.Limits(max_connections=a.connections, max_retries=a.max_retries), tmp)
    finally:
        poll.stop.set()
        poll.thread.join()
        endpoint_mod.AdaptiveLimiter = original
        shutil.rmtree(tmp, ignore_errors=True)
    s1 = srv.stats()
    return {"settled": poll.rate(0.3, 0.9), "limited": s1["rate_limited"] - s0["rate_limited"],
            "failed": r["failed"], "wall": r["wall"], "ok": s1["ok"] - s0["ok"],
            "limits": "/".join(f"{x.limit:.1f}" for x in made),
            "pace": "/".join("-" if x.rate is None else f"{x.rate:.0f}" for x in made)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="200:1500,50:400,20:200", help="R:N,... (server req/s : samples)")
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--max-retries", type=int, default=6)
    ap.add_argument("--rows", default="adaptive,no-pacing,fixed")
    a = ap.parse_args()
    print(f"machine: {machine()}")
    print(f"server: token bucket, {a.latency * 1e3:.0f} ms latency; client: {a.connections} connections per "
          f"endpoint (could send {2 * a.connections / a.latency:.0f} req/s), generation + judge per sample, "
          f"--max-retries {a.max_retries}")
    for case in a.cases.split(","):
        rate, samples = float(case.split(":")[0]), int(case.split(":")[1])
        print(f"\nserver {rate:.0f} req/s ({rate * a.latency:.1f} per round trip), {samples} samples")
        print(f"{'run':<10} {'settled/R':>9} {'429s':>6} {'failed samples':>14} {'final limits':>13} "
              f"{'pace':>8} {'wall s':>7}")
        for row in a.rows.split(","):
            with Server(a.latency, rate_limit=rate) as srv:  # a fresh bucket per run
                r = one_run(row, samples, a, srv)
            print(f"{row:<10} {r['settled'] / rate:>9.2f} {r['limited']:>6} {r['failed']:>14} {r['limits']:>13} "
                  f"{r['pace']:>8} {r['wall']:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
