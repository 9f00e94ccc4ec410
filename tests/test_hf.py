"""hf/ models: a tiny randomly initialised Llama built here (no download), through the real backend."""

import asyncio
import json

import pytest

from conftest import Lazy, run_here, run_quiet, run_spec
from trustmh.types import Request
from trustmh.errors import UserError

torch, transformers, tokenizers = Lazy("torch"), Lazy("transformers"), Lazy("tokenizers")

WORDS = ["[PAD]", "[UNK]", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"] + [
    w for w in "answer one two three four yes no I feel sad today help please rate the reply from to".split()]
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(autouse=True)
def _own_weights():
    """Models of the same files share one load in a process (hf._loaded); tests here patch and hook the
    loaded model, so each test loads its own, as separate runs would."""
    from trustmh.models import hf
    hf._loaded.clear()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def build_tiny_model(path):
    """A one-layer Llama with a 26-word vocabulary and a chat template, saved to `path` (also used by test_ray)."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                bos_token="<s>", eos_token="</s>")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                                   pad_token_id=0, bos_token_id=2, eos_token_id=3)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def make(path, **kw):
    from trustmh.models import make_model
    return make_model(f"hf/{path}", **kw)


def req(text, max_tokens=12, **params):
    return Request([{"role": "user", "content": text}], {"max_tokens": max_tokens, "temperature": 0.0, **params},
                   "t", text)


PROMPTS = ["I feel sad today", "help please", "rate the reply", "I feel", "one two three four", "yes no yes",
           "please help I feel sad today", "no"]


def test_chat_template_is_applied(tiny_model):
    model = make(tiny_model)
    assert model.render([{"role": "user", "content": "help"}]) == "<|user|> help </s> <|assistant|>"
    assert model.device == "cpu"


def test_batched_greedy_equals_one_at_a_time_and_batches_form(tiny_model, monkeypatch):
    monkeypatch.setenv("TRUSTMH_HF_DEVICE", "cpu")

    async def together():
        model = make(tiny_model)
        try:
            return await asyncio.gather(*(model.generate(req(p)) for p in PROMPTS)), model.batch_sizes
        finally:
            await model.aclose()

    async def alone():
        model = make(tiny_model)
        try:
            return [await model.generate(req(p)) for p in PROMPTS], model.batch_sizes
        finally:
            await model.aclose()

    batched, sizes = asyncio.run(together())
    single, single_sizes = asyncio.run(alone())
    assert sum(sizes) == len(PROMPTS) and max(sizes) > 1 and single_sizes == [1] * len(PROMPTS)
    assert [r.text for r in batched] == [r.text for r in single]
    assert all(r.text for r in batched)  # a random model still says something
    assert [r.prompt_tokens for r in batched] == [r.prompt_tokens for r in single]


def test_each_reply_is_cut_at_its_own_max_tokens(tiny_model):
    async def main():
        model = make(tiny_model)
        try:
            return await asyncio.gather(model.generate(req("help please", 3)), model.generate(req("help please", 20)))
        finally:
            await model.aclose()

    short, long = asyncio.run(main())
    assert short.completion_tokens <= 3
    if short.finish_reason == "length":
        assert long.text.startswith(short.text)  # greedy: the short reply is a prefix of the long one


def test_hf_model_in_a_run_is_stored_and_not_asked_again(tiny_model, tmp_path):
    spec = run_spec(models=[f"hf/{tiny_model}"], tasks="privacy.awareness_tier1", limit=3)
    _, res, calls = run_quiet(spec, tmp_path / "run")
    t = res.models[f"hf/{tiny_model}"].tasks["privacy.awareness_tier1"]
    assert t.n_samples == 3 and t.n_errors == 0 and calls[f"hf/{tiny_model}"] == 3
    _, _, again = run_quiet(spec, tmp_path / "run")
    assert again[f"hf/{tiny_model}"] == 0
    first = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert first["response"] is not None and first["tokens"]["prompt"] > 0


def test_missing_model_is_a_user_error(tmp_path):
    from trustmh.errors import UserError
    with pytest.raises(UserError, match="no such folder"):
        make(tmp_path / "nothing-here")


# --- identity: the model is its files ---------------------------------------------------------------------

def copy_model(src, dst, reseed=None):
    """A copy of the tiny model; with `reseed`, new random weights saved over the copy's."""
    import shutil
    shutil.copytree(src, dst)
    if reseed is not None:
        torch.manual_seed(reseed)
        cfg = transformers.AutoConfig.from_pretrained(dst)
        transformers.LlamaForCausalLM(cfg).save_pretrained(dst)
    return dst


def test_fingerprint_follows_content_not_path_and_is_cached(tiny_model, tmp_path, monkeypatch):
    from trustmh.models import ModelRef, hf_files
    same = copy_model(tiny_model, tmp_path / "same")
    assert ModelRef(f"hf/{same}").endpoint == ModelRef(f"hf/{tiny_model}").endpoint
    hashed = []
    real = hf_files._sha256
    monkeypatch.setattr(hf_files, "_sha256", lambda p: hashed.append(p.name) or real(p))
    fp = hf_files.fingerprint(same)
    assert hashed == []  # every file was hashed above: the cache answers by size, mtime and inode
    assert "model.safetensors" in fp.files and "tokenizer.json" in fp.files and "config.json" in fp.files
    copy_model(tiny_model, tmp_path / "new", reseed=1)
    (tmp_path / "new" / "model.safetensors").replace(same / "model.safetensors")  # new weights, same folder
    new = hf_files.fingerprint(same)
    assert hashed == ["model.safetensors"]  # only the file that changed is read again
    assert new.digest != fp.digest and new.changes(fp.files) == ["model.safetensors"]
    assert not any((tmp_path / "same").glob("*hash*"))  # nothing written into the model folder


def test_new_weights_in_the_same_folder_are_a_new_model(tiny_model, tmp_path):
    folder = copy_model(tiny_model, tmp_path / "m")
    spec = run_spec(models=[f"hf/{folder}"], tasks="privacy.awareness_tier1", limit=2)
    _, _, calls = run_quiet(spec, tmp_path / "run")
    before = make(folder)
    assert calls[f"hf/{folder}"] == 2
    copy_model(tiny_model, tmp_path / "m2", reseed=7)
    for f in (tmp_path / "m2").iterdir():
        f.replace(folder / f.name)
    after = make(folder)
    assert after.endpoint != before.endpoint and after.endpoint.startswith("hf@")
    # The same --out refuses to mix the new weights' replies with the old ones, naming what changed...
    with pytest.raises(UserError, match=r"model.safetensors changed .*--force"):
        run_quiet(spec, tmp_path / "run")
    # ...and --force starts a new run there: the old replies are not served for the new weights.
    _, res, again = run_quiet(spec, tmp_path / "run", force=True)
    assert again[f"hf/{folder}"] == 2
    ident = res.models[f"hf/{folder}"].identity
    assert ident["fingerprint"] == after.endpoint.removeprefix("hf@") and "torch" in res.versions


def test_rescoring_reads_the_recorded_fingerprint_without_the_model_folder(tiny_model, tmp_path):
    import shutil
    folder = copy_model(tiny_model, tmp_path / "m")
    spec = run_spec(models=[f"hf/{folder}"], tasks="privacy.awareness_tier1", limit=2)
    _, first, _ = run_quiet(spec, tmp_path / "run")
    shutil.rmtree(folder)  # the model is gone; its replies are in the store under its fingerprint
    _, again, calls = run_quiet(spec, tmp_path / "run", generate=False)
    a, b = (r.models[f"hf/{folder}"].tasks["privacy.awareness_tier1"] for r in (first, again))
    assert calls[f"hf/{folder}"] == 0 and b.n_errors == 0 and b.n_samples == a.n_samples == 2
    assert b.value == a.value


def test_identity_records_fingerprint_and_versions(tiny_model):
    model = make(tiny_model)
    ident = model.identity()
    assert model.endpoint == f"hf@{ident['fingerprint']}"
    assert ident["versions"]["torch"] == torch.__version__
    assert ident["versions"]["transformers"] == transformers.__version__
    assert ident["chat_template"] is True and model.chat_template_missing is False


# --- batching ---------------------------------------------------------------------------------------------

def test_padding_bound_of_a_batch():
    from trustmh.models import hf

    def fits_padding(lengths):
        return hf.fits_padding(max(lengths), sum(lengths), len(lengths))

    assert fits_padding([5, 30, 12])  # all short: padding them costs less than a batch of their own
    assert fits_padding([100, 100, 100, 200])  # 800 positions for 500 prompt tokens
    assert not fits_padding([40, 40, 40, 200])  # 800 positions for 320 prompt tokens
    assert fits_padding([200, 100, 40]) and not fits_padding([200, 100, 10, 10])  # 600 for 340; 800 for 320


def test_prompts_are_batched_by_length(tiny_model):
    short = ["help", "I feel sad", "yes no"]
    long = [" ".join(["one two three four"] * k) for k in (14, 15, 16)]  # 59-67 tokens with the template

    async def main():
        model = make(tiny_model, batch_size=16)  # a fixed size: this test is about what shares a batch
        try:
            replies = await asyncio.gather(*(model.generate(req(p, 4)) for p in short + long + short))
            return model, replies
        finally:
            await model.aclose()

    model, replies = asyncio.run(main())
    assert all(r.text is not None for r in replies) and sum(model.batch_sizes) == 9
    assert len(model.batch_sizes) == 2  # short with short, long with long; the later short ones join the first
    assert model.batch_sizes == [6, 3]
    (lo_short, hi_short), (lo_long, _) = model.batch_widths
    assert hi_short <= 32 < lo_long  # no short prompt padded to a long one's length


def test_cpu_out_of_memory_halves_the_batch_and_completes(tiny_model):
    model = make(tiny_model, batch_size=8)
    real = model.model.generate

    def tight(**kw):  # a machine that holds 2 rows at a time
        if kw["input_ids"].shape[0] > 2:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                               "you tried to allocate 1073741824 bytes")
        return real(**kw)

    model.model.generate = tight

    async def main():
        try:
            return await asyncio.gather(*(model.generate(req(p)) for p in PROMPTS))
        finally:
            await model.aclose()

    replies = asyncio.run(main())
    assert all(r.text is not None for r in replies)
    assert model.batch_sizes[:3] == [8, 4, 2] and sum(model.batch_sizes[2:]) == len(PROMPTS)
    assert model.max_batch == 2


def test_one_request_too_large_fails_typed_not_the_run(tiny_model):
    from trustmh.types import ModelError
    model = make(tiny_model)
    model.model.generate = lambda **kw: (_ for _ in ()).throw(MemoryError())

    async def main():
        try:
            return await asyncio.gather(model.generate(req("help")), return_exceptions=True)
        finally:
            await model.aclose()

    (err,) = asyncio.run(main())
    assert isinstance(err, ModelError) and err.kind == "other" and "out of memory" in str(err)


def test_a_closed_model_stops_after_the_current_step(tiny_model):
    model = make(tiny_model)
    job = type("J", (), {})()
    job.ids, job.max_new_tokens, job.sampling, job.seed = model.tokenizer("help please")["input_ids"], 50, (0.0, 1.0), 0
    steps = []
    model.model.register_forward_hook(lambda *a: steps.append(1))
    model._generate_batch([job])
    n_full, steps[:] = len(steps), []
    model._stop.set()
    model._generate_batch([job])
    assert len(steps) == 1 < n_full  # one decoding step, then the stop flag ends the batch


def test_batch_size_follows_measured_throughput():
    from trustmh.models.hf import _Sizer
    rates = {1: 100, 2: 180, 4: 300, 8: 250, 16: 200, 32: 150}  # peaks at 4
    sizer = _Sizer(32, fixed=False)
    seen = []
    for _ in range(20):
        n = sizer.size(0)
        seen.append(n)
        sizer.record(0, n, rates[n])
    assert seen[:6] == [32, 16, 8, 4, 2, 4]  # starts at all that waits, halves while it pays, back to the best
    assert seen.count(4) >= 13 and set(seen[6:]) <= {2, 4, 8}  # settled, with an occasional probe
    long = _Sizer(32, fixed=False)  # long prompts on a CPU: batch size 1 is fastest
    for _ in range(12):
        n = long.size(3)
        long.record(3, n, 100 / n ** 0.2)
    assert long.size(3) == 1 and long.size(0) == 1  # buckets are measured separately
    short = _Sizer(32, fixed=False)
    short.record(0, 16, 500.0)
    assert short.size(2) == 8  # a new bucket of longer prompts starts at half the shorter ones' best
    fixed = _Sizer(5, fixed=True)
    fixed.record(0, 5, 1.0)
    assert fixed.size(0) == 5


# --- clear errors -----------------------------------------------------------------------------------------

def cli_run(capsys, model_spec, out, *extra):
    """`trustmh run` of one sample item in this process (conftest's run_here): (exit code, stderr)."""
    code, _, err = run_here(capsys, "run", "-m", model_spec, "-t", "privacy.awareness_tier1", "--limit", "1",
                            "--out", out, "--no-progress", "--suite", "sample", *extra)
    return code, err


def one_line_error(code, err, *needles):
    assert code == 2 and "Traceback" not in err
    text = " ".join(err.split())  # rich wraps long lines to the terminal's width
    assert text.startswith("error:") and all(n in text for n in needles), text


def test_nonexistent_path_is_one_clear_line(tmp_path, capsys):
    code, err = cli_run(capsys, f"hf/{tmp_path / 'nothing-here'}", tmp_path / "run")
    one_line_error(code, err, "no such folder")


def test_a_folder_that_is_not_a_model_is_named_as_such(tiny_model, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello")
    code, err = cli_run(capsys, f"hf/{empty}", tmp_path / "run")
    one_line_error(code, err, "is not a model folder", "config.json")
    assert "sentencepiece" not in err
    no_weights = copy_model(tiny_model, tmp_path / "no-weights")
    (no_weights / "model.safetensors").unlink()
    code, err = cli_run(capsys, f"hf/{no_weights}", tmp_path / "run2")
    one_line_error(code, err, "no weights")


def test_offline_hub_id_fails_at_once(tmp_path, capsys, monkeypatch):
    import time
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.monotonic()
    code, err = cli_run(capsys, "hf/some-org/some-model-not-cached", tmp_path / "run")
    one_line_error(code, err, "HF_HUB_OFFLINE", "not in the local Hugging Face cache", "no folder")
    assert time.monotonic() - t0 < 10


def test_missing_chat_template_warns_once_and_is_recorded(tiny_model, tmp_path, capsys):
    plain = copy_model(tiny_model, tmp_path / "plain")
    for f in plain.glob("chat_template*"):
        f.unlink()
    cfg = json.loads((plain / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(cfg))
    first, second = make(plain), make(plain)
    err = capsys.readouterr().err
    assert err.count("has no chat template") == 1
    assert first.chat_template_missing and second.identity()["chat_template"] is False
    assert first.render([{"role": "user", "content": "help"}]) == "user: help\nassistant:"
    from trustmh.models import hf_files, model_identity
    (note,) = hf_files.identity_notes(f"hf/{plain}", model_identity(f"hf/{plain}"))
    assert "no chat template" in note and not hf_files.identity_notes("x", model_identity(f"hf/{tiny_model}"))
    assert make(tiny_model).chat_template_missing is False


def test_batch_size_below_one_is_refused(tiny_model):
    from trustmh.errors import UserError
    with pytest.raises(UserError, match="--batch-size must be at least 1"):
        make(tiny_model, batch_size=0)


def test_a_changed_model_is_refused_with_the_files_that_changed(tiny_model, tmp_path):
    from trustmh.errors import UserError
    from trustmh.models import hf_files, model_identity
    folder = copy_model(tiny_model, tmp_path / "m")
    recorded = model_identity(f"hf/{folder}")
    assert recorded["chat_template"] is True and recorded["versions"]["transformers"] == transformers.__version__
    hf_files.check_unchanged(f"hf/{folder}", recorded, model_identity(f"hf/{folder}"))  # same files: fine
    hf_files.check_unchanged(f"hf/{folder}", None, recorded)  # nothing recorded: a new run
    copy_model(tiny_model, tmp_path / "new", reseed=3)
    (tmp_path / "new" / "model.safetensors").replace(folder / "model.safetensors")
    with pytest.raises(UserError, match=r"not the model this run was made with: model.safetensors changed.*--force"):
        hf_files.check_unchanged(f"hf/{folder}", recorded, model_identity(f"hf/{folder}"))
    assert model_identity("openai/gpt-4o-mini") is None


def test_cancelling_a_run_stops_generation_after_the_current_step(tiny_model):
    # What asyncio.run does on Ctrl-C: cancel the main task; the runner then closes the model.
    model = make(tiny_model)
    model.model.generation_config.eos_token_id = None  # nothing ends the reply early but the stop flag
    steps = []
    model.model.register_forward_hook(lambda *a: steps.append(1))

    async def main():
        task = asyncio.ensure_future(model.generate(req("help please", 200)))
        while len(steps) < 3:
            await asyncio.sleep(0.001)
        task.cancel()
        await model.aclose()
        return task

    task = asyncio.run(main())  # returns once the worker thread has returned
    assert task.cancelled() and 3 <= len(steps) < 50


def test_a_hub_that_does_not_answer_fails_within_seconds(tmp_path, capsys, monkeypatch):
    import socket
    import time
    import huggingface_hub
    silent = socket.socket()  # accepts connections and never replies: a network that drops packets
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    from trustmh.models import hf_files
    monkeypatch.setattr(hf_files, "HUB_TIMEOUT_S", 0.5)  # the same path as the real 5 s, without the wait
    t0 = time.monotonic()
    try:
        code, err = cli_run(capsys, "hf/some-org/some-model-not-cached", tmp_path / "run")
    finally:
        silent.close()
    one_line_error(code, err, "the Hugging Face hub did not answer", "HF_HUB_OFFLINE=1")
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_stops_at_the_current_step_exits_130_and_the_run_resumes(tiny_model, tmp_path, capsys, monkeypatch,
                                                                        presses, request):
    import asyncio
    import os
    import signal
    import threading
    import time
    from trustmh.models import hf
    # Ctrl-C as a terminal delivers it: a suite started in the background (`cmd &` in a script) inherits SIGINT
    # ignored, which Python keeps, and the presses below would then be lost.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    steps = []
    built = hf.HFModel.__init__

    def slow_init(self, *a, **kw):  # every decoding step takes 20 ms, and no reply ends before max_tokens
        built(self, *a, **kw)
        self.model.generation_config.eos_token_id = None
        self.model.register_forward_hook(lambda *_: steps.append(time.sleep(0.02)))

    monkeypatch.setattr(hf.HFModel, "__init__", slow_init)
    all_pressed = threading.Event()
    closed = hf.HFModel.aclose

    async def close_after_the_presses(self):  # a loaded machine must not let the run end between two presses:
        for _ in range(1000):                 # a press after cli_run returns would interrupt the test itself
            if all_pressed.is_set():
                break
            await asyncio.sleep(0.005)
        await closed(self)

    monkeypatch.setattr(hf.HFModel, "aclose", close_after_the_presses)

    def press():  # a second press lands 5 ms after the first, while the run is still closing its model
        while not steps:
            time.sleep(0.005)
        for _ in range(presses):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.005)
        all_pressed.set()

    presser = threading.Thread(target=press, daemon=True)
    presser.start()
    t0 = time.monotonic()
    code, err = cli_run(capsys, f"hf/{tiny_model}", tmp_path / "run", "--limit", "3", "--max-tokens", "200")
    elapsed, n_steps = time.monotonic() - t0, len(steps)
    presser.join()
    assert code == 130 and "Traceback" not in err and "interrupted" in err
    assert n_steps < 50 and elapsed < 60  # a whole batch would be 200 steps of 20 ms
    monkeypatch.setattr(hf.HFModel, "__init__", built)
    monkeypatch.setattr(hf.HFModel, "aclose", closed)
    # the store is intact: the same command resumes the run
    code, err = cli_run(capsys, f"hf/{tiny_model}", tmp_path / "run", "--limit", "3", "--max-tokens", "200")
    assert code == 0, err


def test_a_cached_hub_id_loads_offline_and_is_the_same_model_as_its_files(tiny_model, tmp_path, monkeypatch, capsys):
    import shutil
    import huggingface_hub
    from trustmh.models import ModelRef
    cache = tmp_path / "hub"
    snap = cache / "models--some-org--tiny" / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_model, snap)
    (cache / "models--some-org--tiny" / "refs").mkdir()
    (cache / "models--some-org--tiny" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = make("some-org/tiny")
    assert model.path == snap.resolve() and model.endpoint == ModelRef(f"hf/{tiny_model}").endpoint
    for f in snap.iterdir():  # a snapshot with only a config, as AutoConfig alone leaves: not a cached model
        if f.name != "config.json":
            f.unlink()
    code, err = cli_run(capsys, "hf/some-org/tiny", tmp_path / "run")
    one_line_error(code, err, "not in the local Hugging Face cache")


def test_torch_threads_follow_the_cpu_quota(tmp_path):
    import os
    from trustmh.models.hf import cpu_budget
    cores = len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    quota.write_text("50000 100000\n")  # docker --cpus 0.5
    assert cpu_budget(str(quota)) == 1
    quota.write_text("max 100000\n")
    assert cpu_budget(str(quota)) == cores
    assert cpu_budget(str(tmp_path / "absent")) == cores


def test_models_of_the_same_files_share_one_load_freed_with_the_last(tiny_model, tmp_path):
    import gc
    from trustmh.models import hf
    a, b = make(tiny_model), make(tiny_model)  # a model that is also its own judge
    assert a.model is b.model and a.tokenizer is b.tokenizer
    other = make(copy_model(tiny_model, tmp_path / "other", reseed=1))
    assert other.model is not a.model  # other weights: loaded apart
    key = (a.fingerprint.digest, a.device)
    del a, b
    gc.collect()
    assert key not in hf._loaded
