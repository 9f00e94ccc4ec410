"""A task's scoring version: a hash of every source file whose code scores and aggregates it, which
results.json records per task and `trustmh compare` checks before it re-aggregates two runs. The files are
found by reading the task modules' imports with `ast` (nothing is imported or run to find them)."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import sys
from pathlib import Path

from ..errors import UserError
from .base import Method, Task


def scoring_version(task: Task) -> str:
    """A hash of every file whose code scores and aggregates a task (`scoring_files`): `trustmh compare`
    re-aggregates from samples and warns when this differs."""
    h = hashlib.sha256()
    for path in scoring_files(task):
        h.update(path.name.encode() + b"\0")
        try:
            h.update(source_bytes(path))
        except OSError:
            h.update(b"(unreadable)")
    return h.hexdigest()[:12]


def source_bytes(path: Path) -> bytes:
    return path.read_bytes()


def scoring_files(task: Task) -> list[Path]:
    """The source files a task's scoring runs, by this rule: the modules that define the classes in the
    MROs of the task and of its methods under both protocols (the plain `Method` for a task without
    `methods`), the same for the task it is built on (`task.base`: robustness), every file of the pillar
    package a task is declared in, and then every module of `trustmh.tasks` those import, at the top or
    inside a function (read with `ast`, as tests/test_import_cycles.py reads them), and so on. The package
    `trustmh.tasks` itself (it only imports the pillars to register them) is left out: otherwise every
    pillar's edit would change every task's version. Code outside `trustmh.tasks` (metrics, parsers) is
    versioned by trustmh's own version, which results.json records."""
    return _scoring_files(*_task_classes(task))


def _task_classes(task: Task) -> tuple[type, ...]:
    classes: list[type] = []
    while isinstance(task, Task) and type(task) not in classes:
        classes += [type(task), *(task.methods.values() or [Method])]
        try:
            task = getattr(task, "base", None)  # the task a robustness task is built on
        except UserError:  # not installed: its run fails on that, not here
            task = None
    return tuple(dict.fromkeys(classes))


@functools.lru_cache(maxsize=None)
def _scoring_files(*classes: type) -> list[Path]:
    modules = {k.__module__ for cls in classes for k in cls.__mro__ if k is not object}
    own = classes[0].__module__
    if own.startswith(_TASKS + ".") and own.count(".") >= 2:  # declared in a pillar package: all its files
        package = ".".join(own.split(".")[:3])
        folder = _module_file(package).parent
        modules |= {f"{package}.{p.stem}" if p.stem != "__init__" else package for p in folder.glob("*.py")}
    todo, seen = sorted(modules), set()
    while todo:
        module = todo.pop()
        if module in seen or module == _TASKS:
            continue
        seen.add(module)
        todo += [m for m in _imports_within_tasks(module) if m not in seen]
    return [f for m in sorted(seen) if (f := _module_file(m)) is not None]


_TASKS = "trustmh.tasks"


def _module_file(module: str) -> Path | None:
    found = sys.modules.get(module)
    origin = getattr(found, "__file__", None)
    if origin is None:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


@functools.lru_cache(maxsize=None)
def _imports_within_tasks(module: str) -> tuple[str, ...]:
    """The modules of `trustmh.tasks` that `module` imports (a name imported from a module is that module)."""
    path = _module_file(module)
    if path is None or not module.startswith(_TASKS):
        return ()
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in _statements(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
                else node.module or ""
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        found += [t for t in targets if t.startswith(_TASKS) and _is_module(t)]
    return tuple(dict.fromkeys(found))


def _statements(node: ast.AST):
    """Every statement under `node`, nested ones included (function and class bodies, branches, handlers).
    An import is a statement, so this finds what `ast.walk` would while skipping the expressions, which
    are most of a module's nodes: every run computes the versions of all its tasks on start."""
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, field, ()):
            if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                yield child
                yield from _statements(child)


def _is_module(name: str) -> bool:
    try:
        return name in sys.modules or importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
