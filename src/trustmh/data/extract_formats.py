"""Templates read out of the method files that are not Python modules (PAPER_PROTOCOL.md §0): Jupyter
notebooks (K7: the code cell that defines a function, then the Python kinds of extract.py inside it) and
YAML (K8). As in extract.py, nothing is executed: `json.loads`, `ast.parse` and `yaml.safe_load` only."""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path
from typing import Any

from .extract import Template, _function, _is_stringish, _source, once, segments
from .methods import MethodError, read


@functools.lru_cache(maxsize=64)  # parsed once per function, not once per item (as extract._module)
def notebook_function(local: str, root: Path, func: str) -> ast.Module:
    """K7: the code cell of a notebook that defines `func`, parsed."""
    nb = json.loads(read(local, root))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = "".join(cell.get("source", []))
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        if any(isinstance(n, ast.FunctionDef) and n.name == func for n in tree.body):
            return tree
    raise MethodError(f"{local}: no code cell defines '{func}'")


@once
def yaml_value(local: str, root: Path, *keys: str) -> str:
    """K8: `yaml.safe_load(file)[k1][k2]...`, a string (EmoBench keeps its prompts in YAML block scalars,
    which only a real YAML parser folds correctly)."""
    where = f"{local}#{'.'.join(keys)}"
    node: Any = _yaml_document(local, str(root))
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            raise MethodError(f"{where}: no key '{k}'")
        node = node[k]
    if not isinstance(node, str):
        raise MethodError(f"{where}: not a text")
    return node


@functools.lru_cache(maxsize=16)  # read once, not once per item (as extract._module)
def _yaml_document(local: str, root: str) -> Any:
    import yaml
    try:
        return yaml.safe_load(read(local, Path(root)))
    except yaml.YAMLError as e:
        raise MethodError(f"method file {local}: not parsable YAML ({e})") from None


def _notebook_fn(local: str, root: Path, func: str) -> ast.FunctionDef:
    return _function(notebook_function(local, root, func), func, f"{local}#{func}")


@once
def notebook_local_string(local: str, root: Path, func: str, var: str) -> Template:
    """K7 then K2: the (first) string assignment to VAR inside a function defined in a notebook cell."""
    fn = _notebook_fn(local, root, func)
    values = [n.value for n in ast.walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1
              and isinstance(n.targets[0], ast.Name) and n.targets[0].id == var]
    if not values or not _is_stringish(values[0]):
        raise MethodError(f"{local}#{func}.{var}: no string assignment")
    src, sha = _source(local, f"{func}.{var}")
    return Template(src, sha, segments=tuple(segments(values[0], fn)))


@once
def notebook_call_keywords(local: str, root: Path, func: str, callee: str) -> dict[str, Any]:
    """K7 then K9: keyword arguments of the first `*.callee(...)` call in a notebook function (a constant's
    value, or the source of any other expression)."""
    fn = _notebook_fn(local, root, func)
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == callee:
            return {k.arg: k.value.value if isinstance(k.value, ast.Constant) else ast.unparse(k.value)
                    for k in n.keywords if k.arg}
    raise MethodError(f"{local}#{func}: no call to {callee}")


@once
def notebook_message_roles(local: str, root: Path, func: str) -> list[tuple[str, str]]:
    """K7 then K9: (role, content source) of each `{"role": <constant>, "content": ...}` literal in a
    notebook function, in source order."""
    fn = _notebook_fn(local, root, func)
    out = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Dict):
            entries = {k.value: v for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant)}
            if isinstance(entries.get("role"), ast.Constant) and "content" in entries:
                out.append((n.lineno, n.col_offset, entries["role"].value, ast.unparse(entries["content"])))
    if not out:
        raise MethodError(f"{local}#{func}: no message literal")
    return [(r, c) for *_, r, c in sorted(out)]
