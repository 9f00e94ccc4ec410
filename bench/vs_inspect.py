"""The same job through inspect_ai and through trustmh: same prompts, same server, same concurrency.

    pip install inspect-ai      # only for this benchmark; not a dependency of trustmh
    python bench/vs_inspect.py [--samples 1000] [--connections 64] [--latency 0.05]

The job: N samples of the synthetic task (bench/_common.py), each one generation and one LLM-judge call
with the judge prompt built from the reply, against the lean OpenAI-compatible server in its own
process. Each framework runs in a fresh child process and is timed from the call that starts the
evaluation to the return of its results (so both include their own set-up and writing their logs /
store); printed: requests/s of each, both as a share of the ideal, and trustmh / inspect_ai. A third row,
`trustmh-http`, is trustmh with its default transport (its own HTTP client instead of the SDK): what a
user gets, printed as a second ratio; the like-for-like ratio is the SDK one.

How the comparison is kept fair (inspect_ai 0.3.x):
  * the same openai SDK transport: inspect's OpenAI provider gets `http_client=DefaultAioHttpClient`
    (trustmh's openai/ backend runs with `--transport sdk`, the SDK's aiohttp transport, too), and
    `responses_api=False`, else it calls /v1/responses for model names it does not know;
  * the same bound: `max_connections=C` for the tested model and the judge model in both, with
    inspect's adaptive connections off, and `max_samples=2C` so that, like trustmh's 2C workers,
    enough samples are in progress to keep both models' connections busy;
  * `log_realtime=False` and `display="none"` (no per-event log flushing or live display), the
    same max_tokens and temperature 0, SDK retries off in both (each does its own);
  * the same judge prompt, built from the generated reply by the same function;
  * TIKTOKEN_CACHE_DIR points at a local directory, as inspect needs offline."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import SyntheticTask, Server, machine, synthetic_spec  # noqa: E402


def job(n: int):
    """(generation messages, judge-messages function) per sample, exactly as trustmh builds them."""
    from trustmh.tasks import RunContext
    SyntheticTask.size = n
    task, ctx = SyntheticTask(), RunContext()
    samples = [s for it in task.method(ctx).load(None, ctx) for s in task.method(ctx).samples(it, ctx)]
    return task, ctx, samples


def child_inspect(a) -> dict:
    import openai
    from inspect_ai import Task, eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig, get_model
    from inspect_ai.scorer import Score, Target, accuracy, scorer
    from inspect_ai.solver import TaskState, generate

    task, ctx, samples = job(a.samples)
    by_id = {s.item.id: s for s in samples}

    def msgs(messages):
        return [ChatMessageSystem(content=m["content"]) if m["role"] == "system" else ChatMessageUser(content=m["content"])
                for m in messages]

    def model_args():
        limits = openai._constants.DEFAULT_CONNECTION_LIMITS.__class__(
            max_connections=a.connections, max_keepalive_connections=a.connections)
        return {"responses_api": False, "http_client": openai.DefaultAioHttpClient(limits=limits), "max_retries": 0}

    fixed = GenerateConfig(max_connections=a.connections, adaptive_connections=False, max_tokens=64, temperature=0.0)

    @scorer(metrics=[accuracy()])
    def judge():
        model = get_model("openai/bench-judge", base_url=a.base_url, config=fixed, **model_args())

        async def score(state: TaskState, target: Target) -> Score:
            sample = by_id[str(state.sample_id)]
            out = await model.generate(msgs(task.method(ctx).judge_messages(sample, state.output.completion, ctx)))
            return Score(value=1 if out.completion.startswith("Answer") else 0)
        return score

    dataset = [Sample(input=msgs(s.messages), id=s.item.id) for s in samples]
    t0, c0 = time.perf_counter(), time.process_time()
    logs = inspect_eval(Task(dataset=dataset, solver=generate(), scorer=judge()), model="openai/bench-model",
                        model_base_url=a.base_url, model_args=model_args(), max_connections=a.connections,
                        adaptive_connections=False, max_samples=2 * a.connections, max_tokens=64, temperature=0.0,
                        log_realtime=False, log_dir=a.out, display="none", score_display=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if logs[0].status != "success":
        raise SystemExit(f"inspect_ai run failed: {logs[0].error}")
    return {"wall": wall, "cpu": cpu}


def child_trustmh(a) -> dict:
    from trustmh import engine as runner
    spec = synthetic_spec(a.samples, base_url=a.base_url, n_boot=0)
    if a.child == "trustmh":  # the same SDK transport as inspect (see the docstring), not the http default
        spec.transport = "sdk"
    t0, c0 = time.perf_counter(), time.process_time()
    runner.run(spec, Path(a.out), limits=runner.Limits(max_connections=a.connections))
    return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}


def measure(which: str, a, srv: Server) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"bench-{which}-"))
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=str(out / "tiktoken"), OPENAI_API_KEY="bench-not-a-key",
               INSPECT_LOG_DIR=str(out / "logs"))
    try:
        s0 = srv.stats()["ok"]
        proc = subprocess.run([sys.executable, __file__, "--child", which, "--base-url", srv.base_url,
                               "--out", str(out / "run"), "--samples", str(a.samples),
                               "--connections", str(a.connections)],
                              capture_output=True, text=True, env=env, cwd=out)
        if proc.returncode != 0:
            raise SystemExit(f"{which} failed:\n{proc.stderr[-3000:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        r["requests"] = srv.stats()["ok"] - s0
        return r
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--child", choices=("inspect", "trustmh", "trustmh-http"), help=argparse.SUPPRESS)
    ap.add_argument("--base-url", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        r = child_inspect(a) if a.child == "inspect" else child_trustmh(a)
        print(json.dumps(r))
        return
    from importlib import metadata
    import math
    print(f"machine: {machine()}")
    print(f"inspect_ai {metadata.version('inspect_ai')}, openai {metadata.version('openai')}; {a.samples} samples x "
          f"(generation + judge), max_connections {a.connections}, server latency {a.latency * 1e3:.0f} ms\n")
    ideal = 2 * a.samples / (a.latency * (math.ceil(a.samples / a.connections) + 1))
    rates = {}
    with Server(a.latency) as srv:
        for which in ("inspect", "trustmh", "trustmh-http"):
            r = measure(which, a, srv)
            if r["requests"] != 2 * a.samples:
                raise SystemExit(f"{which} made {r['requests']} requests, expected {2 * a.samples}")
            rates[which] = r["requests"] / r["wall"]
            print(f"{which:<12} {r['requests']} requests in {r['wall']:6.2f} s = {rates[which]:7.0f} req/s "
                  f"({rates[which] / ideal:.2f} of ideal {ideal:.0f}); its own CPU "
                  f"{r['cpu'] / r['requests'] * 1e3:.1f} ms per request", flush=True)
    print(f"\ntrustmh / inspect_ai throughput, both on the openai SDK: {rates['trustmh'] / rates['inspect']:.2f}x")
    print(f"trustmh as shipped (http transport) / inspect_ai: {rates['trustmh-http'] / rates['inspect']:.2f}x")


if __name__ == "__main__":
    main()
