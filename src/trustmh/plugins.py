"""Tasks and model providers from outside this package: installed packages that declare entry points
(groups `trustmh.tasks` and `trustmh.models`), and Python files named with `--include`.

Loading a plugin is importing it: its `@register` tasks and `@register_model` providers register
themselves, as the built-in ones do. Entry points are read only when a task list or an unknown provider
is first needed, so `import trustmh` stays light. A run records where each of its non-built-in tasks came
from (`task_origins`); that record is data like the rest of a run folder (which may come from anyone): it is
only ever quoted in an error message, never imported. Only what the user names is imported: --include, and
the installed entry points.

A plugin's import runs someone else's code: whatever it raises, SystemExit and KeyboardInterrupt
included, is a one-line plugin error (exit 2), never a command that ends with 0 having run nothing."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from .errors import UserError

TASK_GROUP = "trustmh.tasks"
MODEL_GROUP = "trustmh.models"


def entry_points(group: str) -> list[metadata.EntryPoint]:
    # A distribution seen twice on sys.path (an editable install and a copy) is one plugin; two packages
    # that happen to use one entry-point name for their tasks are two.
    return list({(ep.name, ep.value): ep for ep in metadata.entry_points(group=group)}.values())


def _load(ep: metadata.EntryPoint) -> Any:
    try:
        return ep.load()
    except BaseException as e:  # noqa: BLE001 - even sys.exit(0) in someone else's import is a failure
        raise UserError(f"plugin '{ep.name}' ({ep.group} = {ep.value}) failed to load: {_failure(e)}") from None


def _failure(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r}) while being imported"
    if isinstance(e, KeyboardInterrupt):
        return "interrupted while being imported"
    return f"{type(e).__name__}: {e}"


@functools.lru_cache(maxsize=None)
def load_task_plugins() -> None:
    """Import every installed `trustmh.tasks` entry point once (its module registers its tasks)."""
    for ep in entry_points(TASK_GROUP):
        _load(ep)


_INCLUDED: dict[Path, str] = {}  # resolved path -> module name, so that a file is imported once
_MODULES: list[str] = []  # modules included by name


def include(path: str | Path) -> str:
    """Import a Python file by path (`--include FILE`) under a name of its own, never as __main__: a
    script's `if __name__ == "__main__":` block does not run again. A dotted name that is not a file
    (`--include my_package.tasks`) is imported as a module. Returns the module name."""
    p = Path(path).expanduser()
    if not p.is_file() and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", str(path)) and p.suffix != ".py":
        try:
            importlib.import_module(str(path))
        except BaseException as e:  # noqa: BLE001 - as for a file: one line
            raise UserError(f"--include {path} failed: {_failure(e)}") from None
        _MODULES.append(str(path))
        return str(path)
    if not p.is_file():
        raise UserError(f"--include {path}: no such file")
    p = p.resolve()
    if p in _INCLUDED:
        return _INCLUDED[p]
    name = f"trustmh_include_{p.stem}_{hashlib.sha256(str(p).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise UserError(f"--include {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - a broken file is the user's to fix: one line, no traceback
        del sys.modules[name]
        raise UserError(f"--include {path} failed: {_failure(e)}") from None
    _INCLUDED[p] = name
    return name


def included() -> list[str]:
    """The files and modules included in this process (what a Ray worker must import too)."""
    return [str(p) for p in _INCLUDED] + list(dict.fromkeys(_MODULES))


def load(includes: list[Path] | list[str] | tuple[Path, ...] = ()) -> None:
    """What every command that reads task ids does first: installed task plugins, then --include files."""
    load_task_plugins()
    for path in includes:
        include(path)


def task_origin(task_cls: type) -> dict[str, str] | None:
    """Where a task not built into trustmh was defined: its module and, when that is a file loaded by
    path (a script, an --include), the file. None for built-in tasks."""
    module = task_cls.__module__
    if module.startswith("trustmh."):
        return None
    origin = {"module": module}
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    if file and (module == "__main__" or module in _INCLUDED.values()):
        origin["file"] = str(Path(file).resolve())
    return origin


def restore(origins: dict[str, dict[str, str]], registry: Mapping[str, type]) -> None:
    """Before re-scoring: every task the run recorded must be in `registry` by now (the engine passes the
    task registry), from an installed plugin or what the user passed with --include. The recorded origin
    is never imported (a run folder is data: a received run, or a CI artifact, must not be able to name
    code to run); it only says what to pass."""
    load_task_plugins()
    for task_id, origin in sorted(origins.items()):
        if task_id in registry:
            continue
        origin = origin if isinstance(origin, dict) else {}
        module, file = str(origin.get("module", "?")), origin.get("file")
        if isinstance(file, str) and file:
            where = f"pass --include {file} (or the file that defines it now)"
        elif module not in ("?", "__main__"):
            where = f"pass --include {module}, or install the package that provides it"
        else:
            where = "pass --include with the file that defines it"
        raise UserError(f"this run has task {task_id!r}, defined in {file or module}, which is not loaded; "
                        f"{where}. A run's recorded origins are never imported by themselves")
