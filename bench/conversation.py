"""crisis.conversation's engine: conversations as chains of dependent calls, every model's at once.

    python bench/conversation.py [--latency 0.05] [--connections 64] [--personas 9] [--runs 5] [--turns 30]

A run of `--personas` x `--runs` conversations of `--turns` messages (the simulated person first, trustmh's
protocol: the whole history each turn) for 1 model and for 4 models, against the lean loopback server in
its own process (bench/_server.py), which answers every request after exactly L seconds: the person at
/user, each model at /mK. The rules judge, so only the conversations are measured.

The ideal is what the endpoints and the chains allow if nothing but L cost time:
    max(busiest endpoint's calls / (C / L), longest chain x L)
a chain's turns follow one another (L each), and an endpoint answers at most C at a time. The person's
first message does not depend on the model: one request, asked once for all models (the store and the
endpoint's in-flight sharing), which the call counts say. Printed: the server's window (first request to
last reply) and the whole command against the ideal (target >= 0.9 of the window), the client's CPU per
turn, and peak RSS; and the same chains as a schedule with no CPU, served first come first served (FCFS
s), which shows how much of the gap to the formula no client could close. Beside each, the same chains
sent by a bare loop over trustmh's HTTP client (no engine, no store, no first message shared): what the
machine allows at its load at that moment, so the engine's own cost is the ratio of the two rows,
whatever the load."""

from __future__ import annotations

import argparse
import csv
import io
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Server, machine, peak_rss_mb, quiet_env  # noqa: E402

from trustmh.engine import Limits, RunSpec, run  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "src/trustmh/data/sample/vera-mh/data/personas.tsv"


def personas_file(n: int, folder: Path) -> Path:
    """`n` personas: the sample suite's, renamed in turn (each a distinct prompt)."""
    rows = list(csv.reader(io.StringIO(SAMPLE.read_text(encoding="utf-8"), newline=""), delimiter="\t"))
    head, body = rows[0], rows[1:]
    out = [head] + [[f"{body[i % len(body)][0]}{i}"] + body[i % len(body)][1:] for i in range(n)]
    path = folder / "personas.tsv"
    path.write_text("\n".join("\t".join(r) for r in out), encoding="utf-8")
    return path


def one(models: int, args, server: Server, tmp: Path, personas: Path) -> dict:
    base = f"http://127.0.0.1:{server.port}"
    specs = [f"openai/bench-{k}" for k in range(models)]
    spec = RunSpec(models=specs, tasks="crisis.conversation", suite="sample", judge="rules", n_boot=0,
                   personas=str(personas), runs=args.runs, turns=args.turns, user_model="openai/person",
                   user_model_base_url=f"{base}/user/v1", base_urls={m: f"{base}/m{k}/v1" for k, m in enumerate(specs)})
    before = server.stats()
    cpu0, t0 = time.process_time(), time.perf_counter()
    run(spec, tmp / f"run{models}", limits=Limits(max_connections=args.connections))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    after = server.stats()
    calls = {k: after["by_endpoint"].get(k, 0) - before["by_endpoint"].get(k, 0) for k in after["by_endpoint"]}
    busiest = max(calls.values())
    chain = args.turns * args.latency
    ideal = max(busiest / (args.connections / args.latency), chain)
    window = after["last_answer"] - after["first_request"] if not before["requests"] else \
        after["last_answer"] - _first_after(after, before)
    turns = sum(calls.values())
    return {"models": models, "calls": calls, "turns": turns, "ideal": ideal, "window": window, "wall": wall,
            "scheduled": scheduled(models, args, shared_first=True),
            "cpu_ms_per_turn": 1000 * cpu / max(1, turns)}


def _first_after(after: dict, before: dict) -> float:
    return after["first_request"] if not before["requests"] else before["last_answer"]


def scheduled(models: int, args, shared_first: bool) -> float:
    """How long the same chains take when nothing but L costs time, served first come first served by
    endpoints of C slots each (a discrete-event replay of the schedule, no HTTP, no CPU). The formula's
    ideal leaves out that a chain fills and drains its endpoints: while every model answers the person's
    first message the person's endpoint idles, and the last person's message still waits for the model's
    reply. `shared_first`: the person's first message is one request for every model (trustmh's engine)."""
    import heapq
    from collections import deque
    lat, cap = args.latency, args.connections
    busy = {"user": 0, **{f"m{k}": 0 for k in range(models)}}
    queues = {name: deque() for name in busy}
    events: list[tuple[float, int, str, object]] = []  # (time, order, endpoint, what: a chain or a group)
    order = 0
    chains = [(f"m{k}", p) for p in range(args.personas * args.runs) for k in range(models)]
    turn = {c: 0 for c in chains}
    firsts = {p: [c for c in chains if c[1] == p] for p in range(args.personas * args.runs)}

    def ask(name: str, what, now: float) -> None:
        nonlocal order
        if busy[name] < cap:
            busy[name] += 1
            order += 1
            heapq.heappush(events, (now + lat, order, name, what))
        else:
            queues[name].append(what)

    def after(c, now: float) -> None:
        turn[c] += 1
        if turn[c] < args.turns:
            ask("user" if turn[c] % 2 == 0 else c[0], c, now)

    for p, group in firsts.items():
        if shared_first:
            ask("user", ("first", p), 0.0)
        else:
            for c in group:
                ask("user", c, 0.0)
    now = 0.0
    while events:
        now, _, name, what = heapq.heappop(events)
        busy[name] -= 1
        if queues[name]:
            ask(name, queues[name].popleft(), now)
        for c in (firsts[what[1]] if isinstance(what, tuple) and what[0] == "first" else [what]):
            after(c, now)
    return now


def bare(models: int, args, server: Server) -> dict:
    """The same chains with nothing but trustmh's HTTP client (models/_http.py): one client per endpoint
    with C connections, each conversation `turns` requests in turn, the person's and the model's; no
    engine, no store. What this machine allows at its current load, measured beside the engine's rows."""
    import asyncio
    import json as _json
    from trustmh.models._http import HTTPClient
    base = f"http://127.0.0.1:{server.port}"

    async def go() -> tuple[float, int]:
        clients = {name: HTTPClient(f"{base}/{name}/v1/chat/completions", max_connections=args.connections,
                                    timeout=60, headers={"Content-Type": "application/json"})
                   for name in ["user"] + [f"m{k}" for k in range(models)]}
        sem = {name: asyncio.Semaphore(args.connections) for name in clients}
        history = [{"role": "system", "content": "x" * 1500}]

        async def chain(model: str) -> None:
            msgs = list(history)
            for n in range(args.turns):
                who = "user" if n % 2 == 0 else model
                async with sem[who]:
                    _, _, raw = await clients[who].post(_json.dumps({"model": who, "messages": msgs}).encode())
                msgs.append({"role": "user", "content": _json.loads(raw)["choices"][0]["message"]["content"]})
        t0 = time.perf_counter()
        await asyncio.gather(*(chain(f"m{k}") for k in range(models) for _ in range(args.personas * args.runs)))
        wall = time.perf_counter() - t0
        for c in clients.values():
            await c.close()
        return wall, models * args.personas * args.runs * args.turns
    cpu0 = time.process_time()
    wall, calls = asyncio.run(go())
    cpu = time.process_time() - cpu0
    busiest = max(models * args.personas * args.runs * ((args.turns + 1) // 2), args.personas * args.runs * (args.turns // 2))
    ideal = max(busiest / (args.connections / args.latency), args.turns * args.latency)
    return {"models": models, "calls": {"(bare chains)": calls}, "turns": calls, "ideal": ideal, "window": wall,
            "scheduled": scheduled(models, args, shared_first=False),
            "wall": wall, "cpu_ms_per_turn": 1000 * cpu / calls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--personas", type=int, default=9)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--turns", type=int, default=30)
    args = ap.parse_args()
    print(machine())
    print(f"{args.personas} personas x {args.runs} runs x {args.turns} messages, L = {args.latency * 1000:.0f} ms, "
          f"C = {args.connections} per endpoint, trustmh protocol, rules judge")
    rows = []
    with quiet_env(), tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        personas = personas_file(args.personas, tmp)
        for models in (1, 4):
            with Server(args.latency, reply="I hear you.", varied=True) as server:
                rows.append(bare(models, args, server))
            with Server(args.latency, reply="I hear you.", varied=True) as server:
                rows.append(one(models, args, server, tmp, personas))
    print(f"{'models':>6} {'calls by endpoint':<44} {'ideal s':>8} {'window s':>9} {'ratio':>6} {'command s':>10} "
          f"{'ratio':>6} {'CPU ms/turn':>11} {'FCFS s':>7} {'window / FCFS':>13}")
    for r in rows:
        calls = ", ".join(f"{k or '/'}: {v}" for k, v in sorted(r["calls"].items()))
        print(f"{r['models']:>6} {calls:<44} {r['ideal']:>8.2f} {r['window']:>9.2f} {r['ideal'] / r['window']:>6.2f} "
              f"{r['wall']:>10.2f} {r['ideal'] / r['wall']:>6.2f} {r['cpu_ms_per_turn']:>11.2f} {r['scheduled']:>7.2f} "
              f"{r['scheduled'] / r['window']:>13.2f}")
    print(f"peak RSS {peak_rss_mb():.0f} MiB (self), children {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
