"""data/extract.py reads each template once per process: the second ask walks no tree, a caller cannot
alter what the next one reads, and a failure is never remembered (a missing or altered file fails closed
every time)."""

import ast
import shutil

import pytest

from conftest import METHODS
from trustmh.data import extract
from trustmh.data.methods import MethodError
from trustmh.tasks.privacy.paper import TASK1_CODE

pytestmark = pytest.mark.needs_methods  # every test reads the authors' privacy code


def test_a_second_extraction_walks_no_tree(monkeypatch):
    first = extract.call_settings(TASK1_CODE, METHODS, "EvalAgent.load_model", ("temperature", "max_tokens"))
    walks = []
    real_walk = ast.walk
    monkeypatch.setattr(ast, "walk", lambda node: walks.append(node) or real_walk(node))
    again = extract.call_settings(TASK1_CODE, METHODS, "EvalAgent.load_model", ("temperature", "max_tokens"))
    assert again == first and "temperature" in again
    assert walks == []  # served from memory
    # another symbol of the same file is a new extraction (its tree walked once); forgotten first, since
    # an earlier test in this process may have asked for it already
    extract.message_roles.cache_clear()
    extract.message_contents.cache_clear()
    extract.message_roles(TASK1_CODE, METHODS, "APIAgent.generate")
    assert walks


def test_callers_get_their_own_copy():
    a = extract.call_settings(TASK1_CODE, METHODS, "EvalAgent.load_model", ("temperature", "max_tokens"))
    a["temperature"] = "altered"
    a["extra"] = 1
    b = extract.call_settings(TASK1_CODE, METHODS, "EvalAgent.load_model", ("temperature", "max_tokens"))
    assert b["temperature"] != "altered" and "extra" not in b
    roles = extract.message_roles(TASK1_CODE, METHODS, "APIAgent.generate")
    roles.append("intruder")
    assert "intruder" not in extract.message_roles(TASK1_CODE, METHODS, "APIAgent.generate")


def test_a_failure_is_not_remembered(tmp_path):
    root = tmp_path / "methods"
    shutil.copytree(METHODS, root)
    target = root / TASK1_CODE
    data = target.read_bytes()
    target.chmod(0o600)
    target.write_bytes(data[:-1] + (b" " if data[-1:] != b" " else b"\n"))  # same size, other sha256
    for _ in range(2):  # every ask fails, none is served from memory
        with pytest.raises(MethodError, match="sha256"):
            extract.call_settings(TASK1_CODE, root, "EvalAgent.load_model", ("temperature", "max_tokens"))
    with pytest.raises(MethodError, match="no function"):
        extract.call_settings(TASK1_CODE, METHODS, "NoSuchAgent.load", ("temperature",))
    with pytest.raises(MethodError, match="no function"):
        extract.call_settings(TASK1_CODE, METHODS, "NoSuchAgent.load", ("temperature",))
