"""The bench/ scripts are not run by the suite (they time things), so a refactoring can leave them broken
unnoticed: issue 33 moved the engine's names and three of them crashed. Two cheap checks, no timing:

* every name a script reaches in trustmh through a module object (`runner.make_model`, `from
  trustmh.engine import Limits`, `importlib.import_module("trustmh....")`), and in the helpers it borrows
  (bench/_common.py, tests/test_bootstrap.py), exists, and every keyword it passes to a trustmh callable
  (`RunSpec(personas=...)`) is one that callable takes; read from the source without running it;
* the scripts that patch the engine's internals (throughput.py and rate_limit.py swap the engine's model
  factory or limiter, rescore.py its model factory in a child) run end to end at a tiny size. A patch that
  no longer takes hold fails them: each child refuses any connection but loopback (a sitecustomize this
  test writes), so a model the patch should have replaced cannot reach out."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
LOCAL = (BENCH, ROOT / "tests")  # modules a script imports by file name: _common, test_bootstrap
SCRIPTS = sorted(BENCH.glob("*.py"))

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _local(name: str) -> Path | None:
    return next((d / f"{name}.py" for d in LOCAL if (d / f"{name}.py").is_file()), None)


def _top_level_names(path: Path) -> set[str]:
    """What `from <file> import X` and `<file>.X` may name: the file's top-level bindings."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            for field in ("body", "orelse", "finalbody", "handlers"):  # if / try / with at the top level
                inner = getattr(node, field, None)
                if isinstance(inner, list) and not isinstance(node, _SCOPES):
                    visit(inner)
    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return names


class _LocalModule:
    def __init__(self, path: Path):
        self.path, self.names = path, _top_level_names(path)


def _own_nodes(node: ast.AST):
    """The nodes of one scope: `node`'s descendants, not those of the functions and classes inside it."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, _SCOPES):
            yield from _own_nodes(child)


class _Checker:
    def __init__(self, path: Path):
        self.path, self.problems = path, []

    def problem(self, node: ast.AST, text: str) -> None:
        line = f"{self.path.name}:{getattr(node, 'lineno', '?')}: {text}"
        if line not in self.problems:  # a called chain is resolved as the call and as the chain
            self.problems.append(line)

    def imported(self, node: ast.AST, module: str, name: str | None = None):
        """The object `import module` / `from module import name` binds; None (a problem noted) if none,
        or if the module is neither trustmh's nor a local file (not checked)."""
        top = module.split(".")[0]
        if top != "trustmh":
            path = _local(top) if "." not in module else None
            if path is None:
                return None
            mod = _LocalModule(path)
            if name is None:
                return mod
            if name not in mod.names:
                self.problem(node, f"{path.name} has no {name}")
            return None
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            self.problem(node, f"import {module}: {e}")
            return None
        if name is None:
            return mod
        if hasattr(mod, name):
            return getattr(mod, name)  # as `from` does: the attribute first (trustmh.engine.collect: a function)
        try:
            return importlib.import_module(f"{module}.{name}")
        except ImportError:
            self.problem(node, f"{module} has no {name}")
            return None

    def bindings(self, scope: ast.AST, outer: dict) -> dict:
        env = dict(outer)
        for node in _own_nodes(scope):
            if isinstance(node, ast.Import):
                for a in node.names:
                    mod = self.imported(node, a.name)
                    if mod is None:
                        continue
                    if a.asname:
                        env[a.asname] = mod
                    else:  # `import trustmh.x.y` binds trustmh
                        env[a.name.split(".")[0]] = self.imported(node, a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    obj = self.imported(node, node.module, a.name)
                    if obj is not None:
                        env[a.asname or a.name] = obj
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                  and isinstance(node.value, ast.Call) and node.value.args
                  and isinstance(node.value.args[0], ast.Constant) and isinstance(node.value.args[0].value, str)
                  and ast.unparse(node.value.func) in ("importlib.import_module", "import_module")):
                mod = self.imported(node, node.value.args[0].value)
                if mod is not None:
                    env[node.targets[0].id] = mod
        return env

    def resolve(self, node: ast.expr, env: dict):
        """What a name or an attribute chain through modules names (None: not something this checks)."""
        if isinstance(node, ast.Name):
            return env.get(node.id)
        if not isinstance(node, ast.Attribute):
            return None
        base = self.resolve(node.value, env)
        if isinstance(base, _LocalModule):
            if node.attr not in base.names:
                self.problem(node, f"{base.path.name} has no {node.attr}")
            return None
        if not isinstance(base, types.ModuleType):
            return None
        if not hasattr(base, node.attr):  # read, or patched: a patch of a name the module lacks takes no hold
            self.problem(node, f"{base.__name__} has no {node.attr}")
            return None
        return getattr(base, node.attr)

    def check_call(self, node: ast.Call, env: dict) -> None:
        fn = self.resolve(node.func, env)
        if fn is None or not callable(fn) or not getattr(fn, "__module__", "").startswith("trustmh"):
            return
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return
        names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        for kw in node.keywords:
            if kw.arg is not None and kw.arg not in names:
                self.problem(node, f"{fn.__module__}.{fn.__qualname__} takes no {kw.arg}=")

    def check(self, scope: ast.AST, outer: dict) -> None:
        env = self.bindings(scope, outer)
        for node in _own_nodes(scope):
            if isinstance(node, _SCOPES):
                self.check(node, env)
            elif isinstance(node, ast.Call):
                self.check_call(node, env)
            elif isinstance(node, ast.Attribute) and not isinstance(getattr(node, "parent", None), ast.Attribute):
                self.resolve(node, env)


def bench_problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):  # an attribute chain is resolved once, from its outermost link
        for child in ast.iter_child_nodes(node):
            child.parent = node
    checker = _Checker(path)
    checker.check(tree, {})
    return checker.problems


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_names_what_trustmh_has(script):
    assert bench_problems(script) == []


def test_the_name_check_sees_a_moved_name(tmp_path):
    """The check itself: a script written against the engine before issue 33 is caught, line by line."""
    old = tmp_path / "old.py"
    old.write_text("import importlib\nfrom trustmh import engine as runner\nfrom trustmh.engine import RunSpec\n"
                   "def main():\n    from trustmh.runner import Limits\n    runner.make_model = None\n"
                   "    RunSpec(models=['m'], options={'turns': 3})\n"
                   "    importlib.import_module('trustmh.engine.collect').make_model\n"
                   "    mod = importlib.import_module('trustmh.engine.collect')\n    mod.no_such_name\n")
    problems = bench_problems(old)
    assert [p.split(": ", 1)[0] for p in problems] == ["old.py:5", "old.py:6", "old.py:7", "old.py:10"], problems
    assert "trustmh.engine has no make_model" in problems[1] and "takes no options=" in problems[2]


# --------------------------------------------------------------------------------------------------
# End to end, tiny, loopback only

_GUARD = '''"""Written by tests/test_bench_scripts.py: no connection but loopback from a bench script under test."""
import ipaddress
import socket

_NAMES = {"localhost", "localhost.localdomain"}


def _loopback(host):
    if isinstance(host, bytes):
        host = host.decode()
    if host is None or host in _NAMES:
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


_getaddrinfo = socket.getaddrinfo


def getaddrinfo(host, *args, **kw):
    if not _loopback(host):
        raise socket.gaierror(socket.EAI_NONAME, f"bench test: no lookup of {host!r} (loopback only)")
    return _getaddrinfo(host, *args, **kw)


def _guarded(method):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            raise ConnectionRefusedError(f"bench test: no connection to {address!r} (loopback only)")
        return method(self, address)
    return connect


socket.getaddrinfo = getaddrinfo
socket.socket.connect = _guarded(socket.socket.connect)
socket.socket.connect_ex = _guarded(socket.socket.connect_ex)
'''

RUNS = {
    # the runner row: the engine's model factory swapped for an in-process model; trustmh and lean: HTTP
    "throughput.py": (["--latency", "0.002", "--connections", "2", "--samples", "4", "--rows", "runner,trustmh,lean"],
                      [r"^runner +2 +4 .* -$", r"^trustmh +2 +4 ", r"^lean +2 +4 "]),
    # one row; the limits column shows the two limiters (model, judge) the swapped class recorded
    "rate_limit.py": (["--cases", "1000:40", "--latency", "0.05", "--connections", "2", "--rows", "adaptive"],
                      [r"^adaptive +\S+ +\d+ +0 +\d+\.\d/\d+\.\d "]),
    # the fill child patches the model factory (else it would ask OpenAI); the score child makes no call
    "rescore.py": (["--samples", "20", "--scale", "2", "--bootstrap", "10"],
                   [r"^synthetic +20 ", r"^synthetic +40 ", r"peak RSS at 2x samples"]),
}


def _guarded_env(guard_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith(("_API_KEY", "_BASE_URL")) and k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join([str(guard_dir), str(ROOT / "src")])  # this tree's trustmh
    return env


def test_bench_scripts_that_patch_the_engine_run_end_to_end(tmp_path):
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(_GUARD, encoding="utf-8")
    env = _guarded_env(guard)
    # The guard is in force in a child: an outside address is refused before any packet leaves.
    probe = subprocess.run([sys.executable, "-c", "import socket; socket.create_connection(('192.0.2.1', 9), 1)"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "loopback only" in probe.stderr, probe.stderr
    procs = {name: subprocess.Popen([sys.executable, str(BENCH / name), *args], env=env, cwd=tmp_path, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for name, (args, _) in RUNS.items()}  # side by side: each mostly waits on its loopback server
    failures = []
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            failures.append(f"{name}: timed out\n{err[-2000:]}")
            continue
        missing = [p for p in RUNS[name][1] if not re.search(p, out, re.M)]
        if proc.returncode != 0 or missing:
            failures.append(f"{name}: exit {proc.returncode}, lines missing {missing}\n{out[-1500:]}\n{err[-2500:]}")
    assert not failures, "\n\n".join(failures)
