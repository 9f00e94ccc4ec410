"""Local Hugging Face causal LMs: `hf/<hub id or local path>` (the `hf` extra: transformers + torch).

Identity. The model is its files (see hf_files.py): `endpoint` is `hf@<fingerprint>`, so replies stored
for old weights are never served for new ones, and `identity()` gives what results.json should record
(fingerprint, files, torch and transformers versions, whether a chat template was used).

Batching. Every generate() call is tokenised and joins a queue; one loop takes a batch from it and runs
`model.generate` in a worker thread, so the event loop keeps taking requests while the model runs.
  * A batch holds the oldest waiting request and the others of its sampling setting nearest its length,
    padded to the longest of them, with at most as many padding tokens as prompt tokens (fits_padding):
    long and short prompts do not share a batch, and nearly alike ones are not split, because every
    extra batch costs a whole pass over the replies' decoding steps.
  * Each row stops at its own end: its eos or its own max_tokens (a per-row stopping criterion), and the
    batch ends when every row has.
  * The batch size follows measured throughput (prompt plus generated tokens per second), separately
    for each length bucket (up to 32 tokens, then edges growing by 1.5x): it starts at all that waits
    and moves (half or double) while throughput grows (_Sizer), so it does not settle where batching is
    slower than batch size 1. `batch_size` fixes it instead (--batch-size). Batches form from the
    requests in flight (--max-connections, 32 by default): more in flight, larger batches.
  * Out of memory (CUDA, MPS or CPU) halves the batch and retries it; a single request that does not fit
    fails with a typed error.
  * aclose() (Ctrl-C, the end of the run) stops a batch in progress after the current decoding step.

Context. A prompt that fills the model's positions (its config's max_position_embeddings, else the
tokenizer's model_max_length) fails with error kind `context_length` before anything is generated, as an
OpenAI-compatible server refuses it; it is never cut to fit. A prompt that fits has its reply end where
the positions do (finish_reason "length"), not past them.

The prompt is the tokenizer's chat template (add_generation_prompt). A tokenizer without one gets a plain
"role: content" transcript, with a warning and `chat_template_missing` set for results.json. Decoding is
greedy unless the request sets a temperature above 0. Device: cuda, else mps, else cpu;
TRUSTMH_HF_DEVICE overrides it.

torch and transformers are imported when such a model is built, never by `import trustmh`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import math
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from ..types import ModelError, Request, Response
from . import hf_files
from .base import Model

DEFAULT_MAX_BATCH = 32
_warned: set[str] = set()  # models already warned about (once per process, not once per shard or rerun)


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


def cpu_budget(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota (docker --cpus)."""
    n = len(os.sched_getaffinity(0))
    try:
        with open(cpu_max, encoding="ascii") as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max":
            n = min(n, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota here
    return max(1, n)


def context_limit(config: Any, tokenizer: Any) -> int | None:
    """The most tokens (prompt and reply) the model takes: its config's position count under the names
    architectures use, else the tokenizer's model_max_length when that is a real number (transformers puts
    a huge placeholder there when it does not know); None when neither says."""
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    return value if isinstance(value, int) and 0 < value < 10**7 else None


def bucket(n_tokens: int) -> int:
    """Length bucket of a prompt: 0 for up to 32 tokens (padding that little costs less than splitting
    short prompts into batches of their own), then one per 1.5x (32-48, 48-72, ...)."""
    return 0 if n_tokens <= 32 else 1 + int(math.log(n_tokens / 32, 1.5) - 1e-9)


def fits_padding(longest: int, total: int, rows: int) -> bool:
    """Whether `rows` prompts of `total` tokens, the longest `longest`, may share a batch: padded to the
    longest, at most as many padding tokens as prompt tokens (or all of them short). A decoding step of 8
    rows costs far less than 8 steps of one (bench/README.md, hf_real_model.py), so splitting a batch by
    length costs whole extra passes over the replies' steps; padding costs only prompt positions, and only
    this much of it."""
    return longest <= 32 or longest * rows <= 2 * total


def is_out_of_memory(e: BaseException) -> bool:
    """CUDA raises torch.OutOfMemoryError; the CPU allocator a RuntimeError (or MemoryError) that says so."""
    if isinstance(e, MemoryError):
        return True
    if not isinstance(e, RuntimeError):
        return False
    if type(e).__name__ == "OutOfMemoryError":
        return True
    text = str(e).lower()
    return "out of memory" in text or "can't allocate memory" in text or "not enough memory" in text


@dataclass
class _Job:
    ids: list[int]
    max_new_tokens: int
    sampling: tuple[float, float]  # (temperature, top_p); 0 temperature = greedy
    seed: int
    future: asyncio.Future = field(repr=False)


class _Sizer:
    """Batch size per length bucket from measured throughput. The first bucket starts at the cap (all that
    waits: on a real model, CPU included, one batch of 8 replies is about 3x faster than 8 one at a time,
    so a cautious start at 1 cost most of the speed of a short run); a new one starts from the best size
    of the nearest bucket measured (halved when that bucket's prompts are shorter: a longer row costs
    more). From there the size moves to an untried neighbour of the best (double, then half) while that is
    faster, so a bucket where batching does not pay gets down to 1 after a few batches. Settled, it tries a
    neighbour every PROBE_EVERY batches, because first measurements are noisy and the machine's load
    changes."""

    PROBE_EVERY = 8

    def __init__(self, cap: int, fixed: bool):
        self.cap, self.fixed = cap, fixed
        self.rate: dict[int, dict[int, float]] = {}  # bucket -> batch size -> tokens/s (moving average)
        self.runs: dict[int, int] = {}  # bucket -> batches taken at its best size

    def best(self, b: int) -> int | None:
        seen = {n: r for n, r in self.rate.get(b, {}).items() if n <= self.cap}
        return max(seen, key=seen.get) if seen else None

    def size(self, b: int) -> int:
        """The size for the next batch of bucket `b` (called once per batch taken)."""
        if self.fixed:
            return self.cap
        best = self.best(b)
        if best is None:
            near = sorted((abs(o - b), o > b, o) for o in self.rate if self.best(o) is not None)
            if not near:
                return self.cap  # all that waits, as a plain batched generate would take it
            other = near[0][2]
            return max(1, self.best(other) // (2 if other < b else 1))
        for n in (best * 2, best // 2):
            if 1 <= n <= self.cap and n not in self.rate[b]:
                return n  # an untried neighbour of the best
        self.runs[b] = self.runs.get(b, 0) + 1
        if self.runs[b] % self.PROBE_EVERY == 0:
            probe = best * 2 if (self.runs[b] // self.PROBE_EVERY) % 2 else best // 2
            if 1 <= probe <= self.cap:
                return probe
        return best

    def record(self, b: int, n: int, tokens_per_s: float) -> None:
        n = 1 << (n.bit_length() - 1)  # a short queue gives odd sizes; file them under a power of two
        rates = self.rate.setdefault(b, {})
        rates[n] = tokens_per_s if n not in rates else 0.7 * rates[n] + 0.3 * tokens_per_s


class HFModel(Model):
    cacheable = True  # local generation is slow: store replies like an API's
    remote = True  # the runner's in-flight bound is what lets requests gather into batches

    def __init__(self, spec: str, name: str, *, batch_size: int | None = None, max_batch: int = DEFAULT_MAX_BATCH):
        super().__init__(spec)
        if batch_size is not None and batch_size < 1:
            raise UserError(f"--batch-size must be at least 1, not {batch_size}")
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            raise UserError(f"{spec} needs {' and '.join(missing)}: pip install 'trustmh[hf]'")
        self.path = hf_files.model_dir(name, download=True)  # one clear line for a bad path or hub id
        self.fingerprint = hf_files.fingerprint(self.path)
        import torch
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        self.torch = torch
        self.device = pick_device(torch)
        if self.device == "cpu" and not os.environ.get("OMP_NUM_THREADS"):
            # One intra-op thread per core this process may use: torch counts the host's cores, which in a
            # container or under taskset oversubscribes and runs slower than fewer threads.
            torch.set_num_threads(min(torch.get_num_threads(), cpu_budget()))
        weights = _loaded.get((self.fingerprint.digest, self.device)) or _load(spec, self.path, self.device)
        _loaded[(self.fingerprint.digest, self.device)] = weights
        self._weights = weights  # held while this model lives; the table above holds it only weakly
        self.tokenizer, self.model = weights.tokenizer, weights.model
        self.chat_template_missing = not getattr(self.tokenizer, "chat_template", None)
        self.context_limit = context_limit(self.model.config, self.tokenizer)
        if self.chat_template_missing and self.fingerprint.digest not in _warned:
            _warned.add(self.fingerprint.digest)
            print(f"warning: {spec} has no chat template; prompts are sent as a plain 'role: content' transcript "
                  f"(recorded in results.json)", file=sys.stderr)
        self._sizer = _Sizer(batch_size or max_batch, fixed=batch_size is not None)
        self.batch_sizes: list[int] = []  # what each model.generate call got (for tests and benchmarks)
        self.batch_widths: list[tuple[int, int]] = []  # (shortest, longest) prompt of each call, in tokens
        self._stop = threading.Event()  # set by aclose(): a batch in progress ends after its current step
        self._queue: list[_Job] = []
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None

    # --- identity ---------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return hf_endpoint(self.fingerprint)

    @property
    def max_batch(self) -> int:
        return self._sizer.cap

    def identity(self) -> dict[str, Any]:
        """hf_files.identity() of the loaded model, with the device and dtype it runs in."""
        return {**hf_files.identity(self.path), "chat_template": not self.chat_template_missing,
                "device": self.device, "dtype": str(self.model.dtype).removeprefix("torch.")}

    # --- prompting --------------------------------------------------------------------------------
    def render(self, messages: list[dict[str, str]]) -> str:
        if not self.chat_template_missing:
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"

    async def generate(self, request: Request) -> Response:
        p = request.params
        temperature = float(p.get("temperature") or 0.0)
        ids = self.tokenizer(self.render(request.messages), add_special_tokens=False)["input_ids"]
        max_new = int(p.get("max_tokens") or 256)
        if self.context_limit is not None:
            if len(ids) >= self.context_limit:
                raise ModelError("context_length", f"prompt of {len(ids)} tokens does not fit the model's "
                                                   f"{self.context_limit} positions")
            max_new = min(max_new, self.context_limit - len(ids))
        job = _Job(ids, max_new,
                   (temperature, float(p.get("top_p") or 1.0) if temperature > 0 else 1.0),
                   int(p.get("seed") or 0), asyncio.get_running_loop().create_future())
        self._queue.append(job)
        if self._worker is None:
            self._wakeup = asyncio.Event()
            self._worker = asyncio.create_task(self._serve())
        self._wakeup.set()
        return await job.future

    # --- batching ---------------------------------------------------------------------------------
    def _take(self) -> list[_Job]:
        """The next batch: the oldest request, and the waiting requests of its sampling setting nearest its
        length, as many as the size allows while padding stays within bounds (fits_padding)."""
        first = self._queue[0]
        size = self._sizer.size(bucket(len(first.ids)))
        near = sorted((j for j in self._queue if j.sampling == first.sampling),
                      key=lambda j: abs(len(j.ids) - len(first.ids)))  # stable: the oldest first among equals
        batch: list[_Job] = []
        longest = total = 0
        for job in near:
            if len(batch) == size:
                break
            n = len(job.ids)
            if fits_padding(max(longest, n), total + n, len(batch) + 1):
                batch.append(job)
                longest, total = max(longest, n), total + n
        taken = set(map(id, batch))
        self._queue = [j for j in self._queue if id(j) not in taken]
        return [j for j in batch if not j.future.done()]  # a caller that gave up

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                batch = self._take()
                if not batch:
                    continue
                t0 = time.perf_counter()
                try:
                    outs = await loop.run_in_executor(None, self._generate_batch, batch)
                except asyncio.CancelledError:
                    self._stop.set()  # the thread cannot be cancelled: make it return after this step
                    raise
                except Exception as e:  # noqa: BLE001 - one bad batch fails its requests, not the run
                    if is_out_of_memory(e):
                        self._out_of_memory(batch)
                    else:
                        self._fail(batch, ModelError("other", f"generation failed: {type(e).__name__}: {e}"))
                    continue
                if self._stop.is_set():
                    self._fail(batch, ModelError("other", "model closed during generation"))
                    continue
                latency = time.perf_counter() - t0
                tokens = sum(o[2] + o[3] for o in outs)
                self._sizer.record(bucket(len(batch[0].ids)), len(batch), tokens / max(latency, 1e-9))
                for job, (text, finish, n_prompt, n_out) in zip(batch, outs):
                    if not job.future.done():
                        job.future.set_result(Response(text, finish, n_prompt, n_out, latency))

    def _out_of_memory(self, batch: list[_Job]) -> None:
        if self.device == "cuda":
            self.torch.cuda.empty_cache()
        if len(batch) == 1:
            self._fail(batch, ModelError("other", f"out of memory for a single request of {len(batch[0].ids)} "
                                                  f"prompt tokens on {self.device}"))
            return
        self._sizer.cap = max(1, len(batch) // 2)  # for every bucket: longer prompts need more, not less
        self._queue = batch + self._queue  # retried first, in smaller batches

    @staticmethod
    def _fail(batch: list[_Job], err: ModelError) -> None:
        for job in batch:
            if not job.future.done():
                job.future.set_exception(err)

    def _generate_batch(self, batch: list[_Job]) -> list[tuple[str, str, int, int]]:
        torch, tok = self.torch, self.tokenizer
        self.batch_sizes.append(len(batch))
        self.batch_widths.append((min(len(j.ids) for j in batch), max(len(j.ids) for j in batch)))
        enc = tok.pad({"input_ids": [j.ids for j in batch]}, return_tensors="pt")
        enc = {k: v.to(self.device) for k, v in enc.items()}
        width = enc["input_ids"].shape[1]
        limits = torch.tensor([j.max_new_tokens for j in batch], device=self.device)
        stop = self._stop
        from transformers import StoppingCriteria, StoppingCriteriaList

        class _RowLimits(StoppingCriteria):
            # Each row ends at its own max_tokens (generate's max_new_tokens is the batch's largest);
            # every row ends at once when the model is closed.
            def __call__(self, input_ids, scores, **kwargs):
                done = (input_ids.shape[1] - width) >= limits
                return done | stop.is_set()

        temperature, top_p = batch[0].sampling
        kwargs: dict[str, Any] = {"max_new_tokens": int(limits.max()), "pad_token_id": tok.pad_token_id,
                                  "stopping_criteria": StoppingCriteriaList([_RowLimits()])}
        if temperature > 0:
            torch.manual_seed(batch[0].seed)  # seeded, but a sampled reply still depends on its batch
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            out = self.model.generate(**enc, **kwargs)
        eos = set(_as_list(self.model.generation_config.eos_token_id) or _as_list(tok.eos_token_id))
        results = []
        for row, job in zip(out, batch):
            new = row[width:].tolist()
            cut = next((i for i, t in enumerate(new) if t in eos), None)
            if cut is not None and cut < job.max_new_tokens:
                new, finish = new[:cut], "stop"
            else:
                new, finish = new[: job.max_new_tokens], "length"
            results.append((tok.decode(new, skip_special_tokens=True), finish, len(job.ids), len(new)))
        return results

    async def aclose(self) -> None:
        self._stop.set()
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        self._fail(self._queue, ModelError("other", "model closed"))
        self._queue = []


class _Weights:
    """A loaded tokenizer and model. Every HFModel of the same files on the same device in this process
    shares one (a model that is also its own judge or simulated person is loaded once), and it is freed
    when the last of them is."""

    def __init__(self, tokenizer: Any, model: Any):
        self.tokenizer, self.model = tokenizer, model


_loaded: weakref.WeakValueDictionary[tuple[str, str], _Weights] = weakref.WeakValueDictionary()


def _load(spec: str, path, device: str) -> _Weights:
    import torch
    import transformers

    # A GGUF file is read from its folder by name (gguf_file=); transformers de-quantizes its weights.
    where = {"pretrained_model_name_or_path": path, "local_files_only": True}
    if path.is_file():
        where.update(pretrained_model_name_or_path=path.parent, gguf_file=path.name)
        check_gguf_readable(spec, path)
    try:
        with _gguf_parsed_once() if path.is_file() else contextlib.nullcontext():
            tokenizer = transformers.AutoTokenizer.from_pretrained(**where)
            dtype = torch.float32 if device == "cpu" else "auto"
            model = transformers.AutoModelForCausalLM.from_pretrained(**where, dtype=dtype).to(device)
    except Exception as e:  # noqa: BLE001 - any load failure is the folder's problem: one line, no traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UserError(f"{spec}: cannot load the model in {path}: {type(e).__name__}: {first[:300]}") from None
    model.eval()
    # Decoder-only models continue from the right: pad on the left.
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return _Weights(tokenizer, model)


_GGUF_PATCH = threading.Lock()


@contextlib.contextmanager
def _gguf_parsed_once():
    """Within one load, hand transformers one parse of the file and one tensor-name table.

    transformers reads a GGUF file's header three times (config, tokenizer, weights: ~8 s of CPU each for
    SmolLM2's 49k-token vocabulary, gguf's reader slicing a memmap per string) and builds llama.cpp's
    tensor-name table once per module of the model (~400 times, ~9 s). Both are the same every time within
    a load: it looks them up from the `gguf` module at each call, so they are memoized there for the
    load's duration (one load at a time) and put back after, whatever happens (tests/test_hf_gguf.py).
    On SmolLM2-135M (Q4_1) a load took 10.7 s of CPU against 19.8 s, with equal weights, vocabulary,
    config and greedy text (compared once by hand, both loads in one process)."""
    import gguf
    with _GGUF_PATCH:
        reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
        gguf.GGUFReader = functools.lru_cache(maxsize=1)(reader)
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(names)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, names


def check_gguf_readable(spec: str, path) -> None:
    """Refuse, in one line and before the minutes a load takes, a GGUF file that this transformers cannot
    read: its packages missing, or an architecture it has no mapping for. Also silences the progress bar
    transformers draws (with tqdm, ignoring its own setting) while de-quantizing."""
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"{spec}: reading a GGUF file needs {' and '.join(missing)}: pip install 'trustmh[hf]'")
    from importlib.metadata import version

    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    arch = hf_files.gguf_header(path, spec)["architecture"]
    known = getattr(gguf_utils, "GGUF_SUPPORTED_ARCHITECTURES", None)
    # transformers maps llama.cpp's spellings onto its own (qwen2moe -> qwen2_moe, gpt-oss -> gpt_oss).
    squash = lambda name: name.replace("_", "").replace("-", "")  # noqa: E731
    if known is not None and squash(arch) not in map(squash, known):
        raise UserError(f"{spec}: transformers {version('transformers')} cannot read GGUF models of architecture "
                        f"'{arch or 'unnamed'}' (it reads {', '.join(sorted(known))}); convert the model to a "
                        f"transformers folder, or serve the file with llama.cpp and use --base-url")
    if not isinstance(getattr(gguf_utils, "tqdm", None), functools.partial):
        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)


def hf_endpoint(fp: hf_files.Fingerprint | str) -> str:
    """The cache-key identity of an hf/ model: its content, whatever path or hub id named it."""
    return f"hf@{fp.digest if isinstance(fp, hf_files.Fingerprint) else fp}"


def _as_list(x: Any) -> list[int]:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [int(x)]
