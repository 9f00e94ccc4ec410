import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = ROOT.parent / "shared" / "data" / "upstream"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    # Tests never read a real key or a user's data dir.
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TRUSTMH_DATA_DIR", "TRUSTMH_DATA_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def upstream() -> Path:
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream data not found at {UPSTREAM}")
    return UPSTREAM


def write_replay(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def run_spec(**kw):
    from trustmh.runner import RunSpec
    kw.setdefault("n_boot", 200)
    return RunSpec(**kw)


def run_quiet(spec, out: Path, **kw):
    from trustmh.runner import run
    return run(spec, out, progress=False, **kw)
