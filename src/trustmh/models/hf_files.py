"""What an hf/ model is on disk: the folder (or GGUF file) a spec names, a check that it holds a model, and a
fingerprint of its content. No torch or transformers here, so that identifying a model (for cache keys, for results.json,
for scoring a finished run) costs a few stats, not a model load.

A model's identity is its files, not the path naming them: new weights copied into the same folder are a
different model, and the same files under another path are the same one. The fingerprint is a sha256 over
the names, sizes and sha256s of the files transformers reads (config, generation config, tokenizer, weights).
Hashing gigabytes of weights on every run would cost minutes, so file hashes are cached by (path, size,
mtime, inode) in the user's cache directory, never in the model folder (which may be read-only or shared).

GGUF. `hf/path/to/model.gguf` names one file holding config, tokenizer and quantized weights, as llama.cpp
users hold models. Its fingerprint is that file's; identity() adds what its header says (architecture,
quantization type), read here by a small parser of the header's key-value section, without the `gguf`
package, torch or transformers. transformers de-quantizes such a file when it loads it (models/hf.py)."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

# Called through this module's name, so that the tests can count which files are hashed.
from ..data.loaders import file_sha256 as _sha256
from ..errors import UserError

# The files that decide what a model replies; READMEs, licences, logs or a .git folder beside them do not.
MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.bin", "*.index.json", "*.pt",
               "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.*", "merges.txt", "*.model",
               "*.tiktoken", "chat_template.*")
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.index.json")
HUB_TIMEOUT_S = 5.0  # how long a hub that does not answer is waited for, per question
# huggingface_hub's rule for repo ids: [org/]name, letters, digits and -_. only.
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")


@dataclass(frozen=True)
class Fingerprint:
    digest: str  # sha256 hex over the sorted (name, size, sha256) of the model's files
    files: dict[str, tuple[int, str]]  # name -> (size, sha256)

    @property
    def short(self) -> str:
        return self.digest[:16]

    def changes(self, old: dict[str, tuple[int, str]]) -> list[str]:
        """Names of the files added, removed or changed since `old` (a previous `files`), for the message
        that explains why a run refuses to mix two models."""
        names = sorted(set(old) | set(self.files))
        return [n for n in names if tuple(old.get(n) or ()) != tuple(self.files.get(n) or ())]


def is_local(name: str) -> bool:
    """Whether an hf/ name means a folder: it exists, or it cannot be a hub id (absolute, ./, ~, a\\b,
    more than one slash). A folder wins over a hub id of the same spelling, as in transformers."""
    if Path(name).expanduser().exists():
        return True
    return name.startswith((".", "/", "~")) or os.sep in name.replace("/", "", 1) or not _REPO_ID.match(name)


def model_dir(name: str, *, download: bool = False) -> Path:
    """The absolute folder (or GGUF file) holding the model that `hf/<name>` names: a local folder or .gguf
    file, or the hub's cached snapshot of a repo id. Raises UserError with one line saying what is wrong.
    With `download`, a hub id not in the cache is fetched (unless HF_HUB_OFFLINE is set); without, it must
    be cached already."""
    if is_local(name):
        path = Path(name).expanduser().resolve()
        if not path.exists():
            raise UserError(f"hf/{name}: no such {'file' if is_gguf(path) else 'folder'} ({path})")
        if is_gguf(path):
            gguf_header(path, f"hf/{name}")  # not a GGUF file, or a truncated one: one line now
        else:
            check_model_dir(path, f"hf/{name}")
        return path
    return _hub_snapshot(name, download)


def check_model_dir(path: Path, spec: str) -> None:
    """Refuse a folder that is not a model before transformers tries it (it would blame a missing
    sentencepiece, or a repo id, rather than the folder)."""
    if not path.is_dir():
        raise UserError(f"{spec}: {path} is a file, not a model folder (a GGUF file must end in .gguf)")
    names = [p.name for p in path.iterdir() if p.is_file()]
    if "config.json" not in names:
        raise UserError(f"{spec}: {path} is not a model folder (no config.json; a saved model has config.json, "
                        f"tokenizer files and *.safetensors or *.bin weights)")
    if not any(fnmatch.fnmatch(n, pat) for n in names for pat in WEIGHT_FILES):
        raise UserError(f"{spec}: {path} has a config.json but no weights (*.safetensors or *.bin)")
    if not any(n.startswith("tokenizer") or n in ("vocab.json", "vocab.txt") or n.endswith((".model", ".tiktoken"))
               for n in names):
        raise UserError(f"{spec}: {path} has no tokenizer files (save the tokenizer into the same folder)")


# --- GGUF --------------------------------------------------------------------------------------------------

def is_gguf(path: Path) -> bool:
    return path.suffix.lower() == ".gguf"


# Names of llama.cpp's numbers, by position ("-": unused): tensor types (ggml_type), and the file type
# general.file_type records (llama_ftype: the quantization most weights have).
GGML_TYPES = ("F32 F16 Q4_0 Q4_1 - - Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ2_XXS IQ2_XS IQ3_XXS "
              "IQ1_S IQ4_NL IQ3_S IQ2_S IQ4_XS I8 I16 I32 I64 F64 IQ1_M BF16 - - - TQ1_0 TQ2_0 - - - MXFP4 NVFP4 "
              "Q1_0").split()
GGUF_FILE_TYPES = ("F32 F16 Q4_0 Q4_1 - - - Q8_0 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M "
                   "Q6_K IQ2_XXS IQ2_XS Q2_K_S IQ3_XS IQ3_XXS IQ1_S IQ4_NL IQ3_S IQ3_M IQ2_S IQ2_M IQ4_XS IQ1_M BF16 "
                   "- - - TQ1_0 TQ2_0 MXFP4_MOE NVFP4 Q1_0").split()
# GGUF value types with a fixed size: struct formats by type number (8 is a string, 9 an array).
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_MAX_COUNT = 1 << 24  # more keys, tensors or array items than any model has: a hostile or broken header
_GGUF_MAX_STRING = 1 << 26  # a chat template or a token is far shorter than 64 MB


def _name(names: list[str], n: int) -> str:
    return names[n] if 0 <= n < len(names) and names[n] != "-" else f"type {n}"


def gguf_header(path: Path, spec: str) -> dict:
    """What a GGUF file's header says about the model: format version, architecture, file type (its
    quantization), how many tensors of each type, and whether it carries a chat template. Reads the
    header only (a few MB of vocabulary at most), never the weights; UserError for a file that is not a
    GGUF file of version 2 or 3 (little-endian, as llama.cpp writes them) or whose header is cut short."""
    def fail(why: str) -> UserError:
        return UserError(f"{spec}: {path} is not a readable GGUF file ({why})")

    try:
        with open(path, "rb") as fh:
            def read(fmt: str):
                size = struct.calcsize("<" + fmt)
                raw = fh.read(size)
                if len(raw) != size:
                    raise fail("the header ends early")
                return struct.unpack("<" + fmt, raw)[0]

            def count() -> int:
                n = read("Q")
                if n > _GGUF_MAX_COUNT:
                    raise fail(f"a count of {n}")
                return n

            def string() -> str:
                n = read("Q")
                if n > _GGUF_MAX_STRING:
                    raise fail(f"a string of {n} bytes")
                raw = fh.read(n)
                if len(raw) != n:
                    raise fail("the header ends early")
                return raw.decode("utf-8", errors="replace")

            def value(kind: int):
                if kind in _GGUF_SCALARS:
                    return read(_GGUF_SCALARS[kind])
                if kind == 8:
                    return string()
                if kind != 9:
                    raise fail(f"unknown value type {kind}")
                item, n = read("I"), count()
                if item in _GGUF_SCALARS:  # skipped, not read: token scores and types are long arrays
                    fh.seek(n * struct.calcsize("<" + _GGUF_SCALARS[item]), os.SEEK_CUR)
                else:
                    for _ in range(n):
                        value(item)
                return None  # no array is needed here

            if fh.read(4) != b"GGUF":
                raise fail("it does not start with the GGUF magic bytes")
            version = read("I")
            if version not in (2, 3):
                raise fail(f"format version {version}; versions 2 and 3 are read")
            n_tensors, n_keys = count(), count()
            meta = {}
            for _ in range(n_keys):
                key = string()
                meta[key] = value(read("I"))
            types: dict[str, int] = {}
            for _ in range(n_tensors):
                string()
                fh.seek(8 * read("I"), os.SEEK_CUR)  # its dimensions
                kind = _name(GGML_TYPES, read("I"))
                types[kind] = types.get(kind, 0) + 1
                read("Q")  # its offset
    except OSError as e:
        raise UserError(f"{spec}: cannot read {path}: {e.strerror or e}") from None
    file_type = meta.get("general.file_type")
    return {"version": version, "architecture": str(meta.get("general.architecture") or ""),
            "file_type": _name(GGUF_FILE_TYPES, file_type) if isinstance(file_type, int) else None,
            "tensor_types": dict(sorted(types.items())), "chat_template": bool(meta.get("tokenizer.chat_template"))}


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _hub_snapshot(repo_id: str, download: bool) -> Path:
    import huggingface_hub  # comes with transformers; imported only for hub ids
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        # The cache first: a model already downloaded needs no network, and its snapshot is what the
        # fingerprint is taken of. A snapshot holding only some files (a config fetched on its own)
        # counts as not cached.
        cached = Path(huggingface_hub.snapshot_download(repo_id, local_files_only=True,
                                                        allow_patterns=list(MODEL_FILES)))
        check_model_dir(cached, f"hf/{repo_id}")
        return cached
    except (LocalEntryNotFoundError, UserError):
        pass
    except Exception as e:  # noqa: BLE001 - a malformed id and the like: one line, not a traceback
        raise UserError(f"hf/{repo_id}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    # A relative folder and a hub id are spelt alike (models/tiny): say that both were looked for.
    nowhere = f"hf/{repo_id}: no folder {repo_id} in {Path.cwd()}, and"
    if hub_offline():
        raise UserError(f"{nowhere} not in the local Hugging Face cache with HF_HUB_OFFLINE set; "
                        f"download it first or give the path of a local folder")
    if not download:
        raise UserError(f"{nowhere} not in the local Hugging Face cache")
    # One short question first: the download retries a hub that does not answer for minutes (5 tries per
    # file), which is how a machine without network looks.
    try:
        huggingface_hub.HfApi().repo_info(repo_id, timeout=HUB_TIMEOUT_S)
    except huggingface_hub.errors.RepositoryNotFoundError:
        raise UserError(f"{nowhere} no model of that name on the Hugging Face hub (a private or gated one "
                        f"needs HF_TOKEN)") from None
    except Exception as e:  # noqa: BLE001 - no network, a proxy, a timeout: one line saying so
        raise UserError(f"{nowhere} the Hugging Face hub did not answer ({type(e).__name__}); set "
                        f"HF_HUB_OFFLINE=1 to use the local cache only, or give a local folder") from None
    try:
        path = huggingface_hub.snapshot_download(repo_id, allow_patterns=list(MODEL_FILES),
                                                 etag_timeout=HUB_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - no network, no such repo, gated: say which, once
        msg = str(e).splitlines()[0] if str(e) else ""
        raise UserError(f"{nowhere} cannot download it from the Hugging Face hub ({type(e).__name__}: "
                        f"{msg[:200]}); set HF_HUB_OFFLINE=1 to use the local cache only, or give a local "
                        f"folder") from None
    check_model_dir(Path(path), f"hf/{repo_id}")  # a repo that is not a causal LM's files
    return Path(path)


# --- fingerprint ----------------------------------------------------------------------------------------

def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "trustmh" / "file-hashes.json"


def _load_cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # missing or torn: hashes are recomputed, never trusted from a bad file


def _save_cache(path: Path, cache: dict) -> None:
    from ..files import atomic_write  # at call time: the engine package imports the models
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # whole file or nothing, through the one writer: parallel runs (Ray workers) never see half of one
        atomic_write(path, json.dumps(cache))
    except (OSError, UserError):
        pass  # a read-only home (or something not a file at that name) only costs re-hashing next time


def model_files(folder: Path) -> list[Path]:
    if folder.is_file():
        return [folder]  # a GGUF file: config, tokenizer and weights in one
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in MODEL_FILES))


def fingerprint(folder: Path) -> Fingerprint:
    """The content identity of a model folder. A file whose size, mtime and inode are those of the cached
    entry is not read again; anything else (new weights, a `cp` over the old ones) is hashed afresh."""
    cache_path = _cache_file()
    cache = _load_cache(cache_path)
    files: dict[str, tuple[int, str]] = {}
    dirty = False
    for p in model_files(folder):
        st = p.stat()  # follows links: the hub cache's snapshot files are links into blobs/
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        key = str(p.resolve())
        entry = cache.get(key)
        if not (isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str)):
            entry = {"stamp": stamp, "sha256": _sha256(p)}
            cache[key] = entry
            dirty = True
        files[p.name] = (st.st_size, entry["sha256"])
    if dirty:
        # Entries of files that are gone (an old snapshot, a deleted checkpoint) are dropped as we go.
        _save_cache(cache_path, {k: v for k, v in cache.items() if os.path.exists(k)})
    blob = "".join(f"{n}\0{s}\0{h}\n" for n, (s, h) in sorted(files.items()))
    return Fingerprint(hashlib.sha256(blob.encode()).hexdigest(), files)


def has_chat_template(folder: Path) -> bool:
    """Whether the tokenizer saved in `folder` has a chat template (a chat_template.* file, or the key in
    tokenizer_config.json; for a GGUF file, the key in its header), read without transformers."""
    if folder.is_file():
        return gguf_header(folder, f"hf/{folder}")["chat_template"]
    if any(folder.glob("chat_template.*")):
        return True
    try:
        return bool(json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        return False


def identity(folder: Path) -> dict:
    """What results.json and the run's store should record about the model in `folder`: its fingerprint,
    files, whether it has a chat template, and the library versions it runs under; for a GGUF file, also
    its sha256 and what its header says (gguf_header)."""
    fp = fingerprint(folder)
    header = gguf_header(folder, f"hf/{folder}") if folder.is_file() else None
    out = {"fingerprint": fp.digest, "path": str(folder),
           "files": {n: {"size": size, "sha256": h} for n, (size, h) in fp.files.items()},
           "chat_template": header.pop("chat_template") if header else has_chat_template(folder),
           "versions": library_versions()}
    if header:
        out["gguf"] = {"file": folder.name, "sha256": fp.files[folder.name][1], **header}
    return out


def identity_notes(spec: str, ident: dict) -> list[str]:
    """Lines for results.json's notes about an hf/ model's identity() that a reader must know."""
    if ident.get("chat_template", True):
        return []
    return [f"model {spec}: its tokenizer has no chat template, so prompts were sent as a plain "
            f"'role: content' transcript ending in 'assistant:'; an instruction-tuned model may answer "
            f"differently than through its own template"]


def check_unchanged(spec: str, recorded: dict | None, current: dict) -> None:
    """Refuse to add replies of a model whose files changed to a run made with the old ones. `recorded`
    and `current` are identity() dicts (None: nothing recorded yet, a new run)."""
    if not recorded or recorded.get("fingerprint") == current["fingerprint"]:
        return
    old = {n: (f["size"], f["sha256"]) for n, f in (recorded.get("files") or {}).items()}
    new = {n: (f["size"], f["sha256"]) for n, f in current["files"].items()}
    changed = Fingerprint(current["fingerprint"], new).changes(old)
    raise UserError(f"{spec} is not the model this run was made with: {', '.join(changed) or 'its files'} changed "
                    f"(fingerprint {recorded['fingerprint'][:12]} then, {current['fingerprint'][:12]} now); "
                    f"use another --out, or --force to start a new run here")


def library_versions() -> dict[str, str]:
    """torch and transformers versions as installed (without importing them): results.json records them,
    because the same weights can reply differently under another version."""
    from importlib import metadata
    out = {}
    for pkg in ("torch", "transformers", "tokenizers", "huggingface_hub", "gguf"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out
