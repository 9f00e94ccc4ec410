"""Local Hugging Face causal LMs: `hf/<hub id or local path>` (the `hf` extra: transformers + torch).

Requests are batched: every generate() call joins a queue, and one loop takes whatever is waiting
(up to the batch cap) as one `model.generate` call in a worker thread, so the event loop keeps taking
requests while the model runs. The batch size therefore follows the load: the runner keeps up to
--max-connections requests in flight, and that many can share a batch. On out-of-memory the cap is
halved and the batch retried, down to one request.

The prompt is the tokenizer's chat template (add_generation_prompt); a tokenizer without one gets a
plain "role: content" transcript. Decoding is greedy unless the request sets a temperature above 0.
Requests that differ only in max_tokens share a batch: it runs to the largest, and each reply is cut
at its own limit (for greedy decoding that equals generating with that limit). Device: cuda, else
mps, else cpu; TRUSTMH_HF_DEVICE overrides it.

torch and transformers are imported when such a model is built, never by `import trustmh`."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from ..types import ModelError, Request, Response
from .base import Model


def pick_device(torch: Any) -> str:
    forced = os.environ.get("TRUSTMH_HF_DEVICE")
    if forced:
        return forced
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


@dataclass
class _Job:
    prompt: str
    max_new_tokens: int
    sampling: tuple[float, float]  # (temperature, top_p); 0 temperature = greedy
    seed: int
    future: asyncio.Future = field(repr=False)


class HFModel(Model):
    cacheable = True  # local generation is slow: store replies like an API's
    remote = True  # the runner's in-flight bound is what lets requests gather into batches

    def __init__(self, spec: str, name: str, *, max_batch: int = 64):
        super().__init__(spec)
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            raise UserError(f"{spec} needs {' and '.join(missing)}: pip install 'trustmh[hf]'")
        import torch
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        self.torch = torch
        self.device = pick_device(torch)
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(name)
            dtype = torch.float32 if self.device == "cpu" else "auto"
            self.model = transformers.AutoModelForCausalLM.from_pretrained(name, dtype=dtype).to(self.device)
        except (OSError, ValueError) as e:
            raise UserError(f"{spec}: cannot load '{name}': {e}") from None
        self.model.eval()
        # Decoder-only models continue from the right: pad on the left.
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.max_batch = max_batch
        self.batch_sizes: list[int] = []  # what each model.generate call got (for tests and benchmarks)
        self._queue: list[_Job] = []
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None

    # --- prompting --------------------------------------------------------------------------------
    def render(self, messages: list[dict[str, str]]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"

    async def generate(self, request: Request) -> Response:
        p = request.params
        temperature = float(p.get("temperature") or 0.0)
        job = _Job(self.render(request.messages), int(p.get("max_tokens") or 256),
                   (temperature, float(p.get("top_p") or 1.0) if temperature > 0 else 1.0),
                   int(p.get("seed") or 0), asyncio.get_running_loop().create_future())
        self._queue.append(job)
        if self._worker is None:
            self._wakeup = asyncio.Event()
            self._worker = asyncio.create_task(self._serve())
        self._wakeup.set()
        return await job.future

    # --- batching ---------------------------------------------------------------------------------
    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                # One sampling setting per batch; the oldest request decides which.
                sampling = self._queue[0].sampling
                batch = [j for j in self._queue if j.sampling == sampling][: self.max_batch]
                taken = set(map(id, batch))
                self._queue = [j for j in self._queue if id(j) not in taken]
                batch = [j for j in batch if not j.future.done()]  # a caller that gave up
                if not batch:
                    continue
                t0 = time.perf_counter()
                try:
                    outs = await loop.run_in_executor(None, self._generate_batch, batch)
                except self.torch.cuda.OutOfMemoryError:
                    if len(batch) == 1:
                        self._fail(batch, ModelError("other", "out of memory for a single request"))
                        continue
                    self.max_batch = max(1, len(batch) // 2)
                    self._queue = batch + self._queue  # retry them first, in smaller batches
                    if self.device == "cuda":
                        self.torch.cuda.empty_cache()
                    continue
                except Exception as e:  # noqa: BLE001 - one bad batch fails its requests, not the run
                    self._fail(batch, ModelError("other", f"generation failed: {type(e).__name__}: {e}"))
                    continue
                latency = time.perf_counter() - t0
                for job, (text, finish, n_prompt, n_out) in zip(batch, outs):
                    if not job.future.done():
                        job.future.set_result(Response(text, finish, n_prompt, n_out, latency))

    @staticmethod
    def _fail(batch: list[_Job], err: ModelError) -> None:
        for job in batch:
            if not job.future.done():
                job.future.set_exception(err)

    def _generate_batch(self, batch: list[_Job]) -> list[tuple[str, str, int, int]]:
        torch, tok = self.torch, self.tokenizer
        self.batch_sizes.append(len(batch))
        enc = tok([j.prompt for j in batch], return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        longest = max(j.max_new_tokens for j in batch)
        temperature, top_p = batch[0].sampling
        kwargs: dict[str, Any] = {"max_new_tokens": longest, "pad_token_id": tok.pad_token_id}
        if temperature > 0:
            torch.manual_seed(batch[0].seed)  # seeded, but a sampled reply still depends on its batch
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            out = self.model.generate(**enc, **kwargs)
        width = enc["input_ids"].shape[1]
        eos = set(_as_list(self.model.generation_config.eos_token_id) or _as_list(tok.eos_token_id))
        results = []
        for row, job, mask in zip(out, batch, enc["attention_mask"]):
            new = row[width:].tolist()
            cut = next((i for i, t in enumerate(new) if t in eos), None)
            if cut is not None and cut < job.max_new_tokens:
                new, finish = new[:cut], "stop"
            else:
                new, finish = new[: job.max_new_tokens], "length"
            results.append((tok.decode(new, skip_special_tokens=True), finish, int(mask.sum()), len(new)))
        return results

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        self._fail(self._queue, ModelError("other", "model closed"))
        self._queue = []


def _as_list(x: Any) -> list[int]:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [int(x)]
