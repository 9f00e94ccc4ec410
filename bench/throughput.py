"""Throughput of phase 1 (generation + LLM judge) against the ideal for a server of fixed latency.

    python bench/throughput.py [--latency 0.05] [--connections 16,64,256] [--samples N]

Each sample is one generation and one judge call, on two endpoints with --max-connections C each. The
ideal is what those two pools could do if nothing but the server's latency L cost time: generations
run C at a time back to back, and the last judgements finish one latency after the last generation,
so 2N requests take L * (ceil(N / C) + 1) seconds. Printed ratio = achieved req/s / ideal req/s.

Rows, measured side by side in one run:
  runner   trustmh's runner with an in-process model that sleeps L (no HTTP): its own ceiling
  trustmh  `openai/` models (default transport "http": trustmh's own kept-alive HTTP/1.1 client,
           models/_http.py) against the lean loopback server in a separate process: what a user gets
  trustmh+aiohttp  the same with `--transport aiohttp` (what "http" falls back to behind a proxy)
  trustmh+sdk  the same with `--transport sdk` (the openai SDK over its aiohttp transport)
  lean     the bare models/_http.py client, C requests in flight, no runner (ratio against C / L)
  sdk      the bare openai SDK, same job
  aiohttp  a bare aiohttp client, same job: the cost of each HTTP stack on its own

The server runs in its own process (bench/_server.py) so the client has a core to itself; the project's
FakeLLMServer in the same process would take half the client's CPU. Client CPU per request comes from
process_time, server CPU from /proc."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Server, collect_once, machine, synthetic_spec  # noqa: E402

from trustmh import engine as runner  # noqa: E402
# The module phase 1 builds its models in (its name is also the function `trustmh.engine.collect`).
collect_mod = importlib.import_module("trustmh.engine.collect")
from trustmh.models.base import Model  # noqa: E402
from trustmh.types import Response  # noqa: E402

MSGS = [{"role": "system", "content": "You are a careful counsellor. Answer with 1, 2, 3 or 4."},
        {"role": "user", "content": "I have been feeling low for weeks and I cannot sleep. " * 10}]


class SleepModel(Model):
    """A model that answers after exactly `latency` seconds, without any I/O."""

    def __init__(self, spec: str, latency: float):
        super().__init__(spec)
        self.latency = latency

    async def generate(self, request):
        await asyncio.sleep(self.latency)
        return Response("Answer: 1", "stop", 10, 2, self.latency)


def pool_ideal(n: int, c: int, latency: float) -> float:
    return 2 * n / (latency * (math.ceil(n / c) + 1))


def run_trustmh(n: int, c: int, latency: float, base_url: str | None, transport: str = "http") -> tuple[float, float]:
    """(achieved req/s, client CPU ms per request) for one collect of n samples."""
    tmp = Path(tempfile.mkdtemp(prefix="trustmh-bench-"))
    original = collect_mod.make_model
    if base_url is None:  # in-process model: swap the factory the runner uses
        collect_mod.make_model = lambda spec, **kw: SleepModel(spec, latency)
    try:
        spec = synthetic_spec(n, base_url=base_url or "http://unused.invalid/v1")
        if transport != "http":
            spec.transport = transport
        r = collect_once(spec, runner.Limits(max_connections=c), tmp)
    finally:
        collect_mod.make_model = original
        shutil.rmtree(tmp, ignore_errors=True)
    if r["calls"] != 2 * n:
        raise SystemExit(f"expected {2 * n} calls, made {r['calls']}")
    return r["calls"] / r["wall"], r["cpu"] / r["calls"] * 1e3


async def _bare(kind: str, base_url: str, c: int, n: int) -> tuple[float, float]:
    import aiohttp
    import openai
    if kind == "sdk":
        limits = openai._constants.DEFAULT_CONNECTION_LIMITS.__class__(max_connections=c, max_keepalive_connections=c)
        client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0,
                                    http_client=openai.DefaultAioHttpClient(limits=limits))

        async def one() -> None:
            await client.chat.completions.create(model="bench", messages=MSGS, max_tokens=64, temperature=0)
        close = client.close
    elif kind == "lean":
        from trustmh.models._http import HTTPClient
        lean = HTTPClient(base_url + "/chat/completions", max_connections=c, timeout=60,
                          headers={"Content-Type": "application/json"})

        async def one() -> None:
            status, _, raw = await lean.post(json.dumps({"model": "bench", "messages": MSGS}).encode())
            json.loads(raw)
        close = lean.close
    else:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c))

        async def one() -> None:
            async with session.post(base_url + "/chat/completions", json={"model": "bench", "messages": MSGS}) as r:
                await r.json()
        close = session.close
    sem = asyncio.Semaphore(c)

    async def bounded() -> None:
        async with sem:
            await one()
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(bounded() for _ in range(n)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        await close()
    return n / wall, cpu / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--connections", default="16,64,256")
    ap.add_argument("--samples", type=int, default=0, help="samples per run (default: max(1000, 20 C))")
    ap.add_argument("--rows", default="runner,trustmh,trustmh+aiohttp,trustmh+sdk,lean,aiohttp,sdk")
    ap.add_argument("--jitter", type=float, default=0.0, help="server latency varies by +- this fraction")
    a = ap.parse_args()
    rows = a.rows.split(",")
    print(f"machine: {machine()}")
    print(f"server latency {a.latency * 1e3:.0f} ms; ratio = achieved / ideal requests per second\n")
    print(f"{'row':<15} {'C':>4} {'samples':>7} {'ideal/s':>8} {'got/s':>8} {'ratio':>6} {'client ms/req':>13} "
          f"{'server ms/req':>13}")
    with Server(a.latency, jitter=a.jitter) as srv:
        for c in (int(x) for x in a.connections.split(",")):
            n = a.samples or max(1000, 20 * c)
            for row in rows:
                s0, cpu0 = srv.stats()["ok"], srv.cpu_s()
                if row in ("runner", "trustmh", "trustmh+sdk", "trustmh+aiohttp"):
                    got, ms = run_trustmh(n, c, a.latency, srv.base_url if row != "runner" else None,
                                          {"trustmh+aiohttp": "aiohttp", "trustmh+sdk": "sdk"}.get(row, "http"))
                    ideal = pool_ideal(n, c, a.latency)
                else:
                    asyncio.run(_bare(row, srv.base_url, c, c))  # warm the connections
                    s0, cpu0 = srv.stats()["ok"], srv.cpu_s()
                    got, ms = asyncio.run(_bare(row, srv.base_url, c, n))
                    ideal = c / a.latency
                served = srv.stats()["ok"] - s0
                server_ms = f"{(srv.cpu_s() - cpu0) / served * 1e3:.3f}" if served else "-"
                print(f"{row:<15} {c:>4} {n:>7} {ideal:>8.0f} {got:>8.0f} {got / ideal:>6.2f} {ms:>13.3f} "
                      f"{server_ms:>13}", flush=True)


if __name__ == "__main__":
    main()
