"""hf/<file>.gguf: the header reader (checked against files the `gguf` package writes), the fingerprint and
identity of a GGUF file, and the one-line refusals (not a GGUF file, an architecture transformers cannot
read, a GGUF file as the refusal classifier). Loading a real GGUF model: tests/test_real_model.py."""

import struct
from pathlib import Path

import pytest

from conftest import Lazy
from trustmh.errors import UserError
from trustmh.models import hf_files

gguf, np = Lazy("gguf"), Lazy("numpy")


def write_gguf(path: Path, arch: str = "llama", file_type: int | None = 15, template: str | None = "{{ x }}") -> Path:
    """A GGUF file written by the gguf package (llama.cpp's own writer): header, a token list, two tensors."""
    w = gguf.GGUFWriter(str(path), arch)
    if file_type is not None:
        w.add_file_type(file_type)
    if template is not None:
        w.add_chat_template(template)
    w.add_token_list(["a", "bb", "ccc"])
    w.add_token_scores([0.1, 0.2, 0.3])
    w.add_tensor("blk.0.ffn_up.weight", np.zeros((4, 8), dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.zeros((4, 4), dtype=np.float16))
    w.add_tensor("blk.0.attn_k.weight", np.zeros((4, 4), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_type_names_are_llama_cpps():
    # By number, as the gguf package (llama.cpp's Python side) names them.
    for n, name in enumerate(hf_files.GGML_TYPES):
        if name != "-":
            assert gguf.GGMLQuantizationType(n).name == name
    for n, name in enumerate(hf_files.GGUF_FILE_TYPES):
        if name != "-":
            assert gguf.LlamaFileType(n).name.removeprefix("MOSTLY_").removeprefix("ALL_") == name


def test_header_reads_what_the_writer_wrote(tmp_path):
    h = hf_files.gguf_header(write_gguf(tmp_path / "m.gguf", file_type=15), "hf/m")
    assert h == {"version": 3, "architecture": "llama", "file_type": "Q4_K_M",
                 "tensor_types": {"F16": 2, "F32": 1}, "chat_template": True}
    h = hf_files.gguf_header(write_gguf(tmp_path / "n.gguf", "qwen2", file_type=None, template=None), "hf/n")
    assert (h["architecture"], h["file_type"], h["chat_template"]) == ("qwen2", None, False)


@pytest.mark.parametrize("damage, why", [
    (lambda b: b"GGML" + b[4:], "magic"),
    (lambda b: b[:4] + struct.pack("<I", 1) + b[8:], "format version 1"),
    (lambda b: b[:40], "ends early"),
    (lambda b: b[:8] + struct.pack("<Q", 1 << 40) + b[16:], "a count of"),
    (lambda b: b"", "magic"),
])
def test_a_damaged_or_foreign_file_is_one_clear_line(tmp_path, damage, why):
    path = tmp_path / "bad.gguf"
    path.write_bytes(damage(write_gguf(tmp_path / "good.gguf").read_bytes()))
    with pytest.raises(UserError, match=why) as e:
        hf_files.model_dir(str(path))
    assert "is not a readable GGUF file" in str(e.value) and "\n" not in str(e.value)


def test_fingerprint_and_identity_name_the_files_sha256(tmp_path):
    import hashlib
    path = write_gguf(tmp_path / "m.gguf")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert hf_files.model_dir(str(path)) == path.resolve()
    ident = hf_files.identity(path)
    assert ident["files"] == {"m.gguf": {"size": path.stat().st_size, "sha256": sha}}
    assert ident["gguf"] == {"file": "m.gguf", "sha256": sha, "version": 3, "architecture": "llama",
                             "file_type": "Q4_K_M", "tensor_types": {"F16": 2, "F32": 1}}
    assert ident["chat_template"] is True
    # The same bytes under another name are the same model; one byte changed is another.
    copy = tmp_path / "other" / "renamed.gguf"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    assert hf_files.fingerprint(copy).digest != hf_files.fingerprint(path).digest  # the name is hashed too
    changed = tmp_path / "m2.gguf"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    changed.write_bytes(bytes(data))
    assert hf_files.identity(changed)["gguf"]["sha256"] != sha


def test_missing_gguf_file_is_named_a_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        hf_files.model_dir(str(tmp_path / "absent.gguf"))


def test_an_architecture_transformers_cannot_read_is_one_line_before_loading(tmp_path, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from test_hf import cli_run, one_line_error
    path = write_gguf(tmp_path / "odd.gguf", arch="rwkv9")
    code, err = cli_run(capsys, f"hf/{path}", tmp_path / "run")
    one_line_error(code, err, "cannot read GGUF models of architecture 'rwkv9'", "llama")


def test_a_file_that_is_not_gguf_is_one_line_in_a_run(tmp_path, capsys):
    from test_hf import cli_run, one_line_error
    path = tmp_path / "notes.gguf"
    path.write_text("not a model\n")
    code, err = cli_run(capsys, f"hf/{path}", tmp_path / "run")
    one_line_error(code, err, "is not a readable GGUF file", "magic")


def test_a_gguf_file_is_not_a_refusal_classifier():
    from trustmh.judges.hf_classifier import parse_spec
    with pytest.raises(UserError, match="causal language model, not a sequence classifier"):
        parse_spec("hf/models/x.Q4_K_M.gguf")


def test_one_load_parses_the_file_once_and_puts_gguf_back(tmp_path):
    # transformers looks GGUFReader and get_tensor_name_map up on the gguf module at each call (config,
    # tokenizer, weights; once per module of the model): within a load both answer from one parse.
    from trustmh.models import hf
    path = str(write_gguf(tmp_path / "m.gguf"))
    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    arch = gguf.MODEL_ARCH.LLAMA
    with hf._gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(path) is first and len(first.tensors) == 3
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, names)
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)  # outside a load, as gguf has it
    with pytest.raises(RuntimeError), hf._gguf_parsed_once():
        raise RuntimeError("a load that fails")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, names)
