"""Do two versions of trustmh compute the same numbers? Runs three evaluations with each and compares
results.json and samples.jsonl, field by field.

    python bench/identity_check.py BASE [HEAD]      # git refs; HEAD defaults to the working tree
    python bench/identity_check.py ../other-clone   # or a checkout's folder (one holding src/trustmh)

The three runs: the offline default (sample suite, baseline/counselor, rules judge); and the real data
(../shared) under --protocol paper and --protocol trustmh, with two models and a judge served by one
loopback fake server whose replies are a deterministic mix of the shapes the parsers meet (letters,
labels, ratings, JSON scores, refusals, prose), so that every parser and metric sees answered, unparsable
and refused replies. Each version runs from its own source tree (BASE from a git worktree) in a fresh
process, so nothing is shared but the fake server, which answers a request the same whatever asked.

What may differ, and is left out of the comparison: the run id and its time (`run_id`, `created`),
version stamps (`versions`, `scoring_version`), per-call timings (`latency_s`; `attempts`: which of two
samples asking one body sent it; and so `samples_sha256`); the trees' own
paths are written as <tree> before comparing.
Everything else must be equal; the first differences are printed. Prints IDENTICAL or DIFFERENT per run.
It is a check a refactoring runs before it lands, not a test: it needs ../shared and takes minutes."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
SHARED = ROOT.parent / "shared"
VOLATILE = {"run_id", "created", "versions", "scoring_version", "latency_s", "attempts", "samples_sha256"}

SHAPES = [
    "A", "Answer: B", "(C) because the reasoning is sound", "I can't help with that.",
    "suicidal_ideation", "no_crisis", "Label: self_harm", "2", "Rating: 3", "[[4]]",
    '{"fluency": 4, "professionalism": 3, "empathy": 5, "helpfulness": 2}',
    '{"score": 2, "reason": "partly appropriate"}', "Yes", "No", "75",
    "I hear how hard this is. Please consider calling 988, the Suicide & Crisis Lifeline.",
    "It sounds like you have been carrying a lot. What has helped you before?",
    '{"comprehensiveness": 1, "professionalism": 2, "authenticity": 3, "safety": 1}',
    "Explicit affirmation", "0", "1", "harmful", "safe", "The answer is D.",
]


def reply(request: dict) -> str:
    body = json.dumps(request.get("messages"), sort_keys=True) + str(request.get("model"))
    return SHAPES[int(hashlib.sha256(body.encode()).hexdigest(), 16) % len(SHAPES)]


def normalise(x, tree: str):
    """x without its volatile fields, the tree's own path written as <tree>."""
    if isinstance(x, dict):
        return {k: normalise(v, tree) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [normalise(v, tree) for v in x]
    return x.replace(tree, "<tree>") if isinstance(x, str) else x


def differences(a, b, path="", out=None):
    out = [] if out is None else out
    if len(out) > 20:
        return out
    if type(a) is not type(b):
        out.append(f"{path}: {type(a).__name__} vs {type(b).__name__}")
    elif isinstance(a, dict):
        for k in list(dict.fromkeys([*a, *b])):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'head' if k in b else 'base'}")
            else:
                differences(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} vs {len(b)} entries")
        for i, (u, v) in enumerate(zip(a, b)):
            differences(u, v, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {str(a)[:80]!r} vs {str(b)[:80]!r}")
    return out


def run(tree: Path, out: Path, args: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OPENAI_API_KEY": "sk-identity-check"}
    p = subprocess.run([sys.executable, "-m", "trustmh", "run", "--out", str(out), "--bootstrap", "200", *args],
                       env=env, cwd=out.parent, capture_output=True, text=True)
    if not (out / "results.json").exists():
        raise SystemExit(f"run in {tree} failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def compare(a: Path, b: Path, trees: dict[str, Path]) -> list[str]:
    ta, tb = str(trees["base"]), str(trees["head"])
    diffs = differences(normalise(json.loads((a / "results.json").read_text()), ta),
                        normalise(json.loads((b / "results.json").read_text()), tb), "results.json")
    la = (a / "samples.jsonl").read_text().splitlines()
    lb = (b / "samples.jsonl").read_text().splitlines()
    if len(la) != len(lb):
        diffs.append(f"samples.jsonl: {len(la)} vs {len(lb)} lines")
    for i, (x, y) in enumerate(zip(la, lb)):
        d = differences(normalise(json.loads(x), ta), normalise(json.loads(y), tb), f"samples.jsonl:{i + 1}")
        diffs.extend(d)
        if len(diffs) > 20:
            break
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("head", nargs="?", help="a git ref (default: the working tree)")
    ap.add_argument("--limit", type=int, default=12, help="items per task on the real data")
    a = ap.parse_args()
    from trustmh.testing.fake_server import FakeLLMServer

    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(reply=reply) as server:
        tmp = Path(tmp)
        trees = {}
        for name, ref in (("base", a.base), ("head", a.head)):
            if ref is None:
                trees[name] = ROOT
                continue
            if (Path(ref) / "src" / "trustmh").is_dir():  # a checkout as it is: no worktree made for it
                trees[name] = Path(ref).resolve()
                continue
            trees[name] = tmp / f"tree-{name}"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(trees[name]), ref],
                           check=True)
        url = server.openai_base_url
        real = ["--data-dir", str(SHARED / "data" / "upstream"), "--methods-dir", str(SHARED / "methods"),
                "--model", f"openai/tested-a@{url}", "--model", f"openai/tested-b@{url}",
                "--judge", f"openai/judge@{url}", "--limit", str(a.limit)]
        runs = {"sample suite": [],
                "real data, paper": [*real, "--protocol", "paper", "--proxy-judge", "openai/proxy",
                                     "--proxy-judge-base-url", url],
                "real data, trustmh": [*real, "--protocol", "trustmh"]}
        bad = 0
        try:
            for label, args in runs.items():
                outs = {}
                for name, tree in trees.items():
                    work = tmp / f"{name}-{label.replace(' ', '_').replace(',', '')}"
                    work.mkdir()
                    outs[name] = work / "run"
                    run(tree, outs[name], args)
                diffs = compare(outs["base"], outs["head"], trees)
                n = len((outs["head"] / "samples.jsonl").read_text().splitlines())
                print(f"{label}: {'IDENTICAL' if not diffs else 'DIFFERENT'} ({n} samples)")
                for d in diffs[:20]:
                    print("   ", d)
                bad += bool(diffs)
        finally:
            for name, ref in (("base", a.base), ("head", a.head)):
                if ref is not None and trees.get(name) == tmp / f"tree-{name}":
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees[name])])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
