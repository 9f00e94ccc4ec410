"""trustmh against a local OpenAI-compatible server: llama-cpp-python's, serving the GGUF that hf_real_model.py
loads through transformers, on the same prompts with the same settings.

llama-cpp-python lives in an environment of its own (it compiles llama.cpp; trustmh does not depend on it):

    python3 -m venv ~/lcpp-venv
    ~/lcpp-venv/bin/pip install "llama-cpp-python[server]==0.3.36" --no-binary llama-cpp-python   # 10-20 min

This script starts `VENV/bin/python -m llama_cpp.server` on a free loopback port with the GGUF file
(--threads for both its decoding and prompt threads, n_ctx 2048), then, on the first N items of a task
(hf_real_model.real_prompts: crisis.escalation under the trustmh protocol), max --max-new tokens, greedy:

  bare     -- no trustmh: a loop of plain HTTP posts to /v1/chat/completions, one at a time
  trustmh  -- `trustmh run --model openai/<alias> --base-url ... --judge rules --max-connections C` as a
              user runs it, one fresh run directory per run (a stored reply is never asked again), at each C

Tokens are the server's own count for every row (`usage.completion_tokens`: the bare loop reads it from
each reply, trustmh's rows from the run store's calls table, where trustmh keeps it). A trustmh row's
tok/s is over the whole command (start-up, the store and results.json included); `window` is over its
first request to its last reply. Rows run in rotating order over --rounds rounds, each row's best kept.
The server keeps the prompt it evaluated last and reuses its common prefix; a short unrelated request
before each row (untimed) makes every row start from the same state.

llama-cpp-python's server answers one completion at a time: every request takes a lock around the one
model (app.py `get_llama_proxy`), so C connections queue at the server; it has no parallel slots (the
native `llama-server --parallel N` of llama.cpp does). --hf adds, after the server has stopped, the
hf/ backend's figure on the same prompts: hf_real_model.py in a child, with OMP_NUM_THREADS=--threads.

    PYTHONPATH=src python bench/llama_server.py --server-python ~/lcpp-venv/bin/python
    PYTHONPATH=src python bench/llama_server.py --server-python ~/lcpp-venv/bin/python --hf
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from hf_real_model import DATA, HERE, real_prompts

ALIAS = "smollm2"  # the name the server serves the model under: `openai/<ALIAS>` to trustmh
RESET = [{"role": "user", "content": "Hello."}]  # asked before each row, untimed


def server_python(given: str | None) -> str:
    """The interpreter that has llama_cpp.server; exits with one line when there is none."""
    py = given or os.environ.get("TRUSTMH_LLAMA_PYTHON") or sys.executable
    try:
        probe = subprocess.run([py, "-c", "import llama_cpp.server.app"], capture_output=True, text=True)
        why = (probe.stderr.strip().splitlines() or ["?"])[-1] if probe.returncode else ""
    except OSError as exc:
        why = f"{type(exc).__name__}: {exc.strerror}"
    if why:
        sys.exit(f"llama_server.py: {py} has no llama-cpp-python server ({why}); build it in its own venv"
                 " (see this script's docstring) and pass --server-python VENV/bin/python")
    return py


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(py: str, gguf: Path, threads: int, key: str, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [py, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", ALIAS, "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", str(threads), "--n_threads_batch", str(threads),
           "--api_key", key, "--verbose", "false"]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"llama_server.py: the server exited ({proc.returncode}): {log.read_text()[-600:]}")
        try:
            get = urllib.request.Request(base + "/models", headers={"Authorization": f"Bearer {key}"})
            with urllib.request.urlopen(get, timeout=5) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            time.sleep(0.5)
    proc.kill()
    sys.exit("llama_server.py: the server did not answer within 180 s")


def peak_rss_mib(pid: int) -> str:
    """The server's peak resident memory so far (Linux), the quantized weights included."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "?"
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return f"{int(found.group(1)) / 1024:.0f}" if found else "?"


def bare(base: str, key: str, msgs: list, max_new: int) -> tuple[list[str], int]:
    """One plain post after another: the replies' texts and the server's completion token count."""
    texts, tokens = [], 0
    for m in msgs:
        body = json.dumps({"model": ALIAS, "messages": m, "max_tokens": max_new, "temperature": 0.0,
                           "seed": 0}).encode()
        req = urllib.request.Request(base + "/chat/completions", data=body, headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.load(r)
        texts.append(out["choices"][0]["message"]["content"])
        tokens += out["usage"]["completion_tokens"]
    return texts, tokens


def trustmh(base: str, key: str, args, connections: int, out: Path) -> tuple[list[str], int, float]:
    """One `trustmh run` into a fresh folder: its replies, the server's token count, and its request window."""
    env = {**os.environ, "OPENAI_API_KEY": key}
    cmd = [sys.executable, "-m", "trustmh", "run", "--model", f"openai/{ALIAS}", "--base-url", base,
           "--judge", "rules", "--tasks", args.task, "--limit", str(args.n), "--protocol", "trustmh",
           "--data-dir", str(args.data_dir), "--max-tokens", str(args.max_new), "--temperature", "0",
           "--max-connections", str(connections), "--timeout", "600", "--out", str(out), "--quiet"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"llama_server.py: trustmh run failed ({done.returncode}): {done.stderr[-800:]}")
    with sqlite3.connect(f"file:{out / 'store.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT text, completion_tokens, created - latency_s, created FROM calls "
                          "WHERE purpose = 'model' AND ok = 1").fetchall()
    if len(rows) != args.n:
        sys.exit(f"llama_server.py: trustmh stored {len(rows)} replies for {args.n} prompts")
    return [r[0] for r in rows], sum(r[1] for r in rows), max(r[3] for r in rows) - min(r[2] for r in rows)


def hf_figure(args) -> str:
    """hf_real_model.py's batched and trustmh rows on the same prompts and settings (a child: torch stays there)."""
    cmd = [sys.executable, str(HERE / "hf_real_model.py"), "--task", args.task, "--n", str(args.n), "--max-new",
           str(args.max_new), "--rounds", "1", "--data-dir", str(args.data_dir), "--ways", "batched,trustmh"]
    if args.gguf:
        cmd += ["--gguf", str(args.gguf)]
    done = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)}, capture_output=True, text=True)
    if done.returncode != 0:
        return f"hf_real_model.py failed ({done.returncode}): {done.stderr.strip()[-400:]}"
    return "\n".join(line for line in done.stdout.splitlines() if re.match(r"(model:|way |batched |trustmh )", line))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-python", help="python of the venv with llama-cpp-python[server] "
                    "(default: $TRUSTMH_LLAMA_PYTHON, else this one)")
    ap.add_argument("--gguf", type=Path, help="the GGUF file (default: SmolLM2-135M-Instruct Q4_1, fetched)")
    ap.add_argument("--task", default="crisis.escalation")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--connections", default="1,2,8", help="trustmh --max-connections values")
    ap.add_argument("--threads", type=int, default=1, help="the server's threads (and torch's with --hf)")
    ap.add_argument("--data-dir", type=Path, default=DATA)
    ap.add_argument("--hf", action="store_true", help="then hf_real_model.py's figure on the same prompts")
    args = ap.parse_args()

    py = server_python(args.server_python)
    if args.gguf is None:
        import real_model
        args.gguf = real_model.smollm2_gguf()
    msgs = real_prompts(args.task, args.n, args.data_dir)
    version = subprocess.run([py, "-c", "import llama_cpp; print(llama_cpp.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    key = secrets.token_hex(16)  # the server refuses requests without it
    with tempfile.TemporaryDirectory(prefix="llama-bench-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        proc, base = start_server(py, args.gguf, args.threads, key, tmp / "server.log")
        print(f"server: llama-cpp-python {version}, {args.gguf.name}, {args.threads} thread(s), ready in "
              f"{time.perf_counter() - t0:.1f} s; {args.n} {args.task} prompts, {args.max_new} new tokens, greedy")
        try:
            rows = ["bare"] + [f"trustmh C={c}" for c in args.connections.split(",") if c]
            best: dict[str, tuple[float, int, float, list[str]]] = {}
            for r in range(args.rounds):
                for row in rows[r % len(rows):] + rows[: r % len(rows)]:
                    # The server reuses the cached prefix of the prompt it evaluated last: each row starts
                    # from the same unrelated one, so no row inherits another's (nor the one-off set-up).
                    bare(base, key, [RESET], 1)
                    t0 = time.perf_counter()
                    if row == "bare":
                        texts, tokens = bare(base, key, msgs, args.max_new)
                        window = None
                    else:
                        c = int(row.split("=")[1])
                        texts, tokens, window = trustmh(base, key, args, c, tmp / f"run-{c}-{r}")
                    wall = time.perf_counter() - t0
                    window = wall if window is None else window
                    print(f"  round {r + 1} {row:12} {wall:6.1f} s {tokens:5d} tokens {tokens / wall:6.1f} tok/s"
                          f" (window {tokens / window:6.1f})", flush=True)
                    if row not in best or tokens / wall > best[row][1] / best[row][0]:
                        best[row] = (wall, tokens, window, texts)
            print(f"server peak RSS: {peak_rss_mib(proc.pid)} MiB")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    ref = best["bare"][1] / best["bare"][0]
    print(f"{'row':12} {'wall s':>7} {'tokens':>6} {'tok/s':>6} {'window tok/s':>12} {'vs bare':>7}")
    for row in rows:
        wall, tokens, window, _ = best[row]
        print(f"{row:12} {wall:7.1f} {tokens:6d} {tokens / wall:6.1f} {tokens / window:12.1f} "
              f"{tokens / wall / ref:7.2f}")
    same = [sorted(best[row][3]) == sorted(best["bare"][3]) for row in rows[1:]]
    print(f"equal output: the replies of {sum(same)} of {len(same)} trustmh rows are the bare loop's")
    if args.hf:
        print("hf/ backend on the same prompts (hf_real_model.py, OMP_NUM_THREADS="
              f"{args.threads}, one round):\n{hf_figure(args)}", flush=True)


if __name__ == "__main__":
    main()
