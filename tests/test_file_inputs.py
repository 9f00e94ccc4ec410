"""Every file a user hands trustmh as data goes through one reader (issue 38, M6 and L3): --prices, --models,
gate configs and validate-judge ratings files are read only when they are regular files, at most their size
cap, UTF-8; TOML nesting and dotted keys are capped, so parsing is bounded. Before: --prices and --models
read FIFOs (a hang) and /dev/zero (a MemoryError traceback), `x = [[[…` gave a RecursionError traceback,
and a dotted header `[models.a.a…]` took 6.5 s at 80 kB."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from test_cli import assert_user_error
from trustmh.errors import UserError


def _prices(path):
    from trustmh.engine._prices import load_prices
    return load_prices(path)


def _models(path):
    from trustmh.cli.models_file import read_models_file
    return read_models_file(path)


def _gate(path):
    from trustmh.analysis.gate import load_config
    return load_config(path)


def _ratings(path):
    from trustmh.validation.human_ratings import pick_rubric, read_rated_set
    return read_rated_set(path, pick_rubric("reliability.support"), (0, 5))


READERS = {"prices": _prices, "models": _models, "gate": _gate, "ratings": _ratings}
TOML = ("prices", "models", "gate")


@pytest.fixture
def specials(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    return {"a FIFO": fifo, "a device": Path("/dev/zero"), "a folder": folder}


@pytest.mark.parametrize("reader", READERS)
def test_only_regular_files_of_a_bounded_size_in_utf8_are_read(reader, specials, tmp_path):
    read = READERS[reader]
    for what, path in specials.items():
        with pytest.raises(UserError, match="must be a regular file"):
            read(path)
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (70 << 20))
    with pytest.raises(UserError, match="larger than"):
        read(big)
    latin = tmp_path / "latin.toml"
    latin.write_bytes("# caf\xe9\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"not valid UTF-8 text \(byte 5\)"):
        read(latin)


@pytest.mark.parametrize("reader", TOML)
@pytest.mark.parametrize("bomb,needle", [
    ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested"),
    ("x = " + "[" * 200 + "]" * 200 + "\n", "nested more than"),
    ("x = " + "{a = " * 200 + "1" + "}" * 200 + "\n", "nested more than"),
    ("[models" + ".a" * 20_000 + "]\n", "dotted key of more than"),
    ("a" + ".a" * 20_000 + " = 1\n", "dotted key of more than"),
], ids=["deep-100000", "deep-200", "inline-tables-200", "dotted-header-80kB", "dotted-key-80kB"])
def test_toml_bombs_are_one_line_errors(reader, bomb, needle, tmp_path):
    f = tmp_path / "bomb.toml"
    f.write_text(bomb)
    with pytest.raises(UserError, match=needle):
        READERS[reader](f)


def test_the_cli_reads_prices_and_models_from_fifos_and_devices_as_one_line(cli, specials, tmp_path):
    """Through the real CLI: no hang, no traceback."""
    for path in (specials["a FIFO"], specials["a device"]):
        proc = cli("run", "--suite", "sample", "--tasks", "ethics", "--dry-run", "--prices", path, cwd=tmp_path,
                   timeout=60)
        assert_user_error(proc, "must be a regular file")
        proc = cli("run", "--models", path, "--suite", "sample", "--tasks", "ethics", "--dry-run", cwd=tmp_path,
                   timeout=60)
        assert_user_error(proc, "must be a regular file")
    bomb = tmp_path / "bomb.toml"
    bomb.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert_user_error(cli("run", "--suite", "sample", "--dry-run", "--prices", bomb, cwd=tmp_path), "nested")
