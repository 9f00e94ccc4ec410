"""No import cycle between trustmh's modules (issue 21), and no module importing another package's private
module (issue 33).

The graph is read from the source with `ast`, not from `sys.modules`: an edge is every `import` and
`from ... import` anywhere in a module, at its top, inside a function or method, under `try` or `if`
alike. Function-local imports count because they are still dependencies: one runs the first time its
function is called and needs the other module then as surely as a top-level import does. Leaving them
out would only hide a cycle (the reason most of them were written), not remove it. A package is a module
of its own (its `__init__.py`); `from pkg import name` is an edge to `pkg.name` when that is a module, else
to `pkg`. Importing a submodule is not counted as importing its parents: that would join every module to
`trustmh`. Imports by string (`importlib.import_module`) are not seen; trustmh uses them only to load
its task modules and plugins, which point downward."""

from __future__ import annotations

import ast
import functools
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # trustmh's is read by five tests (here and test_architecture_doc): parsed once a process
def import_graph(root: Path, package: str) -> dict[str, dict[str, str]]:
    """module -> {imported module: 'file:line' of the first import of it}, for modules under `package`
    (not to be changed: a later call with the same folder returns the same graph)."""
    files = {module_name(root, p): p for p in sorted((root / package).rglob("*.py"))}
    graph: dict[str, dict[str, str]] = {m: {} for m in files}
    for mod, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    here = mod.split(".") if is_package else mod.split(".")[:-1]
                    base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:  # `import trustmh.models.base as b`, a name in a module
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    graph[mod].setdefault(target, f"{path.relative_to(root)}:{node.lineno}")
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def describe(graph, component: list[str]) -> str:
    inside = set(component)
    edges = [f"  {a} -> {b} ({where})" for a in component for b, where in graph[a].items() if b in inside]
    return f"{len(component)} modules: " + ", ".join(component) + "\n" + "\n".join(edges)


def test_trustmh_has_no_import_cycle():
    graph = import_graph(SRC, "trustmh")
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # the walk really saw the package
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(describe(graph, c) for c in found)


def test_the_walk_sees_a_cycle_hidden_in_a_function(tmp_path):
    """The checker itself: a cycle closed only by a function-local relative import, and one through a
    package's __init__, are both found; a one-way import is not a cycle."""
    files = {
        "pkg/__init__.py": "from .low import helper\n",
        "pkg/low.py": "def helper():\n    from .high import thing  # dodges the cycle at import time only\n",
        "pkg/high.py": "from . import low\nthing = 1\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/a.py": "from .. import top\n",
        "pkg/top.py": "import pkg.sub.a\n",
        "pkg/leaf.py": "from pkg.sub import a\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.low"] == {"pkg.high": "pkg/low.py:2"} and graph["pkg.leaf"] == {"pkg.sub.a": "pkg/leaf.py:1"}
    assert sorted(cycles(graph)) == [["pkg.high", "pkg.low"], ["pkg.sub.a", "pkg.top"]]


def test_the_engine_reaches_models_only_through_their_interface():
    """The engine asks a model what it can do (`cacheable`, `answers_by_id`, ...) instead of importing a
    concrete backend (a replay file, an SDK) or a private module of `models/`. Allowed: the package's own
    interface, the Model base, and hf_files (a local model's file identity, which the engine records)."""
    graph = import_graph(SRC, "trustmh")
    allowed = {"trustmh.models", "trustmh.models.base", "trustmh.models.hf_files"}
    reached = {(mod, target, where) for mod, edges in graph.items() if mod.startswith("trustmh.engine")
               for target, where in edges.items() if target.startswith("trustmh.models")}
    assert {t for _, t, _ in reached} & {"trustmh.models"}  # the walk saw the engine's model imports
    assert not [r for r in reached if r[1] not in allowed], sorted(r for r in reached if r[1] not in allowed)


def private_imports(graph: dict[str, dict[str, str]]) -> list[str]:
    """'importer -> module (file:line)' for every import of a private module (a part of its dotted name
    starts with '_', `__init__` and `__main__` aside) from outside the package that holds it: such a module
    is its package's own business, and others go through the package's interface."""
    found = []
    for mod, edges in graph.items():
        for target, where in edges.items():
            parts = target.split(".")
            for i, part in enumerate(parts):
                if part.startswith("_") and part not in ("__init__", "__main__"):
                    owner = ".".join(parts[:i])
                    if mod != owner and not mod.startswith(owner + "."):
                        found.append(f"{mod} -> {target} ({where})")
                    break
    return found


def test_no_module_imports_a_private_module_of_another_package():
    graph = import_graph(SRC, "trustmh")
    private = [t for edges in graph.values() for t in edges if any(p.startswith("_") and p != "__init__"
                                                                  for p in t.split("."))]
    assert private  # the walk saw imports of private modules (models._http, cli._base) inside their packages
    found = private_imports(graph)
    assert not found, "private modules imported from another package:\n" + "\n".join(found)


def test_the_private_import_check_sees_one(tmp_path):
    """The checker itself: a sibling module or a subpackage may import a package's private module; a module of
    another package may not, whether by `from pkg import _mod` or by a relative import."""
    files = {
        "pkg/__init__.py": "", "pkg/top.py": "from .a import _hidden\n",
        "pkg/a/__init__.py": "from . import _hidden\n", "pkg/a/_hidden.py": "", "pkg/a/user.py": "from ._hidden import x\n",
        "pkg/a/sub/__init__.py": "", "pkg/a/sub/deep.py": "from .. import _hidden\n",
        "pkg/b/__init__.py": "", "pkg/b/other.py": "import pkg.a._hidden as h\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert sorted(private_imports(import_graph(tmp_path, "pkg"))) == [
        "pkg.b.other -> pkg.a._hidden (pkg/b/other.py:1)", "pkg.top -> pkg.a._hidden (pkg/top.py:1)"]
