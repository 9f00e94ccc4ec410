"""Hand-made corrupt data files, through the command line: each must end the run with `file:line: problem`
on stderr and exit code 2, never a traceback (test_parsers_property.py fuzzes the same readers)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trustmh.engine import RunSpec, data_source

SAMPLE = Path(data_source(RunSpec(models=["baseline/refuse"])).root)


def lines_of(text: str) -> list[str]:
    return text.split("\n")


def truncate_last_line(text: str) -> tuple[str, int]:
    ls = lines_of(text.rstrip("\n"))
    ls[-1] = ls[-1][: len(ls[-1]) // 2]
    return "\n".join(ls), len(ls)


def cut_inside_last_quoted_cell(text: str) -> tuple[str, int]:
    cut = text.rstrip("\n").rindex('"', 0, len(text.rstrip("\n")) - 1) + 5  # into the last row's open quote
    out = text[:cut]
    return out, out.count("\n") + 1


def replace_line(text: str, i: int, new: str) -> str:
    ls = lines_of(text)
    ls[i - 1] = new
    return "\n".join(ls)


def cp1252_on_line(path: Path, i: int) -> bytes:
    """Line i re-saved by a Windows editor: cp1252, in an otherwise UTF-8 file."""
    ls = path.read_bytes().split(b"\n")
    ls[i - 1] = "Café au lait – ".encode("cp1252") + ls[i - 1]
    return b"\n".join(ls)


def huge_cell_row(text: str) -> tuple[str, int]:
    ls = lines_of(text.rstrip("\n"))
    ls.insert(2, f'user-x,"[\'{"x" * 300_000}\']",Ideation')
    return "\n".join(ls), 3


def duplicate_first_row(text: str) -> tuple[str, int]:
    ls = lines_of(text.rstrip("\n"))
    return "\n".join([*ls, ls[1]]), len(ls) + 1


# name, task, file, corruption(path) -> (new content, line), expected problem
CASES = [
    ("truncated JSONL", "reliability.emotion_recognition", "emobench/EU.jsonl",
     lambda p: truncate_last_line(p.read_text()), "invalid JSON"),
    ("truncated CSV (quote left open)", "safety.jailbreak", "trustmh/JailbreakMH.csv",
     lambda p: cut_inside_last_quoted_cell(p.read_text(encoding="utf-8-sig")), "malformed CSV"),
    ("wrong encoding (UTF-16)", "privacy.awareness_tier1", "trustmh/privacy/tier_1.txt",
     lambda p: (p.read_text().encode("utf-16"), 1), "not valid utf-8 text"),
    ("wrong encoding (cp1252 on line 3)", "privacy.awareness_tier1", "trustmh/privacy/tier_1.txt",
     lambda p: (cp1252_on_line(p, 3), 3), "not valid utf-8 text"),
    ("missing column", "safety.jailbreak", "trustmh/JailbreakMH.csv",
     lambda p: (p.read_text(encoding="utf-8-sig").replace("Prompt (English)", "Prompt", 1), 1),
     "missing column(s) Prompt (English)"),
    ("empty file", "privacy.awareness_tier1", "trustmh/privacy/tier_1_labels.txt", lambda p: ("", 1),
     "file is empty"),
    ("only blank lines", "reliability.emotion_recognition", "emobench/EU.jsonl", lambda p: ("\n \n\n", 1),
     "file is empty"),
    ("huge line (a 300 kB CSV cell)", "crisis.severity", "c-ssrs/500_Reddit_users_posts_labels.csv",
     lambda p: huge_cell_row(p.read_text()), "field larger than field limit"),
    ("huge number in JSONL", "reliability.emotion_recognition", "emobench/EU.jsonl",
     lambda p: (replace_line(p.read_text(), 2, '{"qid": ' + "7" * 5000 + "}"), 2), "unreadable JSON"),
    ("JSONL line not an object", "reliability.emotion_recognition", "emobench/EU.jsonl",
     lambda p: (replace_line(p.read_text(), 3, '["qid", 1]'), 3), "expected a JSON object"),
    ("label not finite", "privacy.awareness_tier1", "trustmh/privacy/tier_1_labels.txt",
     lambda p: (replace_line(p.read_text(), 2, "nan"), 2), "expected a finite number"),
    ("row with extra cells", "safety.jailbreak", "trustmh/JailbreakMH.csv",
     lambda p: (replace_line(p.read_text(encoding="utf-8-sig"), 2, "1,a,b,c,d,e"), 2),
     "row has more cells than the header"),
    ("duplicate id", "crisis.severity", "c-ssrs/500_Reddit_users_posts_labels.csv",
     lambda p: duplicate_first_row(p.read_text()),
     "duplicate user 'user-0'"),
    ("a field of the wrong type (a number as a list)", "reliability.knowledge", "usmle-mental/USMLE-mental.jsonl",
     lambda p: (replace_line(p.read_text(), 2, json.dumps(dict(json.loads(lines_of(p.read_text())[1]),
                                                               meta_info2=5))), 2),
     "'meta_info2' must be a text or a list of texts"),
]


@pytest.mark.parametrize("name,task,rel,corrupt,problem", CASES, ids=[c[0] for c in CASES])
def test_corrupt_data_file_is_named_with_line_and_exit_2(name, task, rel, corrupt, problem, tmp_path, cli_here,
                                                          figures):
    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data)
    path = data / rel
    content, line = corrupt(path)
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    # the real entry point, in this process (a process per case would cost seconds each)
    code, _, err = cli_here("run", "--suite", "data", "--data-dir", data, "--tasks", task, "-m", "baseline/refuse",
                            "--out", tmp_path / "run", "--no-progress")
    assert code == 2 and "Traceback" not in err, err
    assert f"{path}:{line}: " in err and problem in err, err
    assert not (tmp_path / "run" / "results.json").exists()
    figures.update(case=name, message=err.strip().split(f"{path}:", 1)[1][:120])


def test_replay_file_errors_name_file_and_line(tmp_path, cli_here):
    rep = tmp_path / "replay.jsonl"
    good = json.dumps({"task": "privacy.awareness_tier1", "item_id": 0, "response": "4"}).encode()
    for body, line, problem in [
        (good + b"\n" + "{\"task\": \"caf\xe9\"}".encode("latin-1"), 2, "not valid UTF-8"),
        (good + b"\n" + b'{"task": "x", "item_id": ' + b"1" * 5000 + b', "response": "4"}', 2, "unreadable JSON"),
        (good + b"\n" + good[: len(good) // 2], 2, "invalid JSON"),
        (good + b"\n" + good, 2, "duplicate record"),
    ]:
        rep.write_bytes(body)
        code, _, err = cli_here("run", "-m", f"replay/{rep}", "--suite", "sample", "--tasks",
                                "privacy.awareness_tier1", "--out", tmp_path / "run", "--no-progress")
        assert code == 2 and f"{rep}:{line}: {problem}" in err, err


def test_one_case_end_to_end_in_a_real_process(tmp_path):
    """The in-process runs above stand for the real thing: the same case as a subprocess."""
    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data)
    path = data / "emobench/EU.jsonl"
    text, line = truncate_last_line(path.read_text())
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "trustmh.cli", "run", "--suite", "data", "--data-dir", str(data),
                           "--tasks", "reliability.emotion_recognition", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{path}:{line}: invalid JSON" in proc.stderr, proc.stderr
