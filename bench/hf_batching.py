"""hf/ batching: samples/s of the batched backend against batch size 1 and against a plain loop.

A small random Llama (built here, no download) answers three workloads:
  short  -- prompts of ~12 tokens (privacy/ethics-style questions)
  mixed  -- short and ~200-token prompts interleaved
  long   -- prompts of ~600 tokens (crisis.severity-style posts)
each in three ways:
  batched  -- HFModel as a run uses it: requests kept in flight like the runner (--inflight), batch size
              adapted by the backend
  bs1      -- HFModel with batch_size=1 (what --max-connections 1 used to be the only way to get)
  loop     -- no trustmh: tokenizer + model.generate, one prompt at a time, in the main thread
Every (workload, way) runs in a fresh process so that peak RSS is its own. Printed: samples/s, the ratios
batched/bs1 and batched/loop, and peak RSS. Greedy decoding, the same max_new_tokens everywhere.

    PYTHONPATH=src python bench/hf_batching.py            # a few minutes on 2 CPUs
    PYTHONPATH=src python bench/hf_batching.py --quick    # fewer samples, a smaller model
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VOCAB = 2000


def build_model(path: Path, hidden: int, layers: int) -> None:
    import tokenizers
    import torch
    import transformers

    words = ["[PAD]", "[UNK]", "<s>", "</s>", "<|user|>", "<|assistant|>"] + [f"w{i}" for i in range(VOCAB - 6)]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                bos_token="<s>", eos_token="</s>")
    fast.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=hidden * 3,
                                   num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=8,
                                   max_position_embeddings=2048, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)


def prompts(workload: str, n: int) -> list[str]:
    rng = random.Random(0)

    def text(k: int) -> str:
        return " ".join(f"w{rng.randrange(10, VOCAB - 6)}" for _ in range(k))

    if workload == "short":
        return [text(rng.randint(6, 14)) for _ in range(n)]
    if workload == "long":
        return [text(rng.randint(500, 700)) for _ in range(n)]
    return [text(rng.randint(6, 14)) if i % 2 else text(rng.randint(150, 250)) for i in range(n)]


def measure(path: str, workload: str, way: str, n: int, max_new: int, inflight: int) -> dict:
    """In a fresh process: run one (workload, way) and return samples/s and peak RSS."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from trustmh.models.hf import HFModel
    from trustmh.types import Request

    texts = prompts(workload, n)
    model = HFModel(f"hf/{path}", path, batch_size=1 if way == "bs1" else None)
    sizes: list[int] = []
    import torch
    tok, lm = model.tokenizer, model.model
    generated = 0

    def loop(batch: list[str]) -> int:
        out = 0
        for t in batch:
            ids = tok(model.render([{"role": "user", "content": t}]), return_tensors="pt", add_special_tokens=False)
            with torch.inference_mode():
                row = lm.generate(**ids, max_new_tokens=max_new, do_sample=False, temperature=None, top_p=None,
                                  top_k=None, pad_token_id=tok.pad_token_id)[0, ids["input_ids"].shape[1]:].tolist()
            out += next((i for i, x in enumerate(row) if x == tok.eos_token_id), len(row))
        return out

    loop(texts[:4])  # the first calls pay for one-off set-up in torch: not part of any way's rate
    if way == "loop":
        t0 = time.perf_counter()
        generated = loop(texts)
        elapsed = time.perf_counter() - t0
    else:
        async def run() -> float:
            gate = asyncio.Semaphore(inflight)  # the runner keeps --max-connections requests in flight

            async def one(t: str) -> int:
                async with gate:
                    r = await model.generate(Request([{"role": "user", "content": t}],
                                                     {"max_tokens": max_new, "temperature": 0.0}, "bench", t))
                    return r.completion_tokens

            nonlocal generated
            t0 = time.perf_counter()
            generated = sum(await asyncio.gather(*(one(t) for t in texts)))
            elapsed = time.perf_counter() - t0
            await model.aclose()
            return elapsed

        elapsed = asyncio.run(run())
        sizes = model.batch_sizes
    return {"samples_s": n / elapsed, "tokens": generated / n,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "batches": sizes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--inflight", type=int, default=32)
    ap.add_argument("--max-new", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads in every way (0: torch's default)")
    ap.add_argument("--n", type=int, nargs=3, metavar=("SHORT", "MIXED", "LONG"), help="samples per workload")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)  # before the model is built: HFModel never raises it
    if args.child:
        path, workload, way, n, max_new, inflight = args.child
        print(json.dumps(measure(path, workload, way, int(n), int(max_new), int(inflight))))
        return
    hidden, layers = (128, 2) if args.quick else (256, 4)
    sizes = {"short": 32, "mixed": 32, "long": 8} if args.quick else {"short": 128, "mixed": 96, "long": 24}
    if args.n:
        sizes = dict(zip(sizes, args.n))
    import torch
    import transformers
    print(f"model: random Llama, hidden {hidden}, {layers} layers, vocab {VOCAB}; max_new_tokens {args.max_new}; "
          f"in flight {args.inflight}; torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{args.threads or torch.get_num_threads()} threads")
    with tempfile.TemporaryDirectory() as tmp:
        build_model(Path(tmp), hidden, layers)
        print(f"best of {args.rounds} rounds, each (workload, way) in a fresh process")
        print(f"{'workload':8} {'n':>4} {'way':8} {'samples/s':>10} {'vs bs1':>7} {'vs loop':>8} {'peak MB':>8} "
              f"{'tok/reply':>9}  batches")
        for workload, n in sizes.items():
            got: dict[str, dict] = {}
            ways = ["loop", "bs1", "batched"]
            for r in range(args.rounds):  # alternate the order so that drifting load hits every way alike
                for way in ways if r % 2 == 0 else ways[::-1]:
                    out = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--child", tmp,
                                          workload, way, str(n), str(args.max_new), str(args.inflight)],
                                         capture_output=True, text=True)
                    if out.returncode:
                        sys.exit(f"{workload}/{way} failed:\n{out.stderr[-2000:]}")
                    m = json.loads(out.stdout.strip().splitlines()[-1])
                    if way not in got or m["samples_s"] > got[way]["samples_s"]:
                        got[way] = m
            for way in ways:
                rate, b = got[way]["samples_s"], got[way]["batches"]
                shown = "" if not b else " ".join(map(str, b[:14])) + (" ..." if len(b) > 14 else "")
                print(f"{workload:8} {n:>4} {way:8} {rate:>10.2f} {rate / got['bs1']['samples_s']:>7.2f} "
                      f"{rate / got['loop']['samples_s']:>8.2f} {got[way]['rss_mb']:>8.0f} "
                      f"{got[way]['tokens']:>9.1f}  {shown}", flush=True)

if __name__ == "__main__":
    main()
