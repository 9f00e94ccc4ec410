"""Templates read out of the authors' method files without running them (PAPER_PROTOCOL.md §0).

Only `ast.parse`, `ast.literal_eval`, `json.loads` and `yaml.safe_load` touch the files: several of them
build API clients or read keys when imported. Each file's sha256 is checked first (data/methods.py); a
symbol that is missing or not a literal stops with the file and symbol named, and there is no fall-back
text. The text is kept exactly as the interpreter would see it (CRLF folded by `ast.parse`, indentation
and trailing spaces kept: no dedent).

Two shapes of template come out:
* f-strings become *segments*, literal text and fields (each field the source of its expression), and
  render by concatenation: their literal JSON braces never meet `str.format`;
* `str.format` templates are rendered with `str.format` and the original arguments in their order."""

from __future__ import annotations

import ast
import functools
import hashlib
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .methods import MethodError, method_files, read

Segment = tuple  # ("text", str) or ("field", expression source, conversion, format spec source)


@dataclass(frozen=True)
class Template:
    """One template and where it came from (`source` = repo@commit:path#symbol, `sha256` of the file)."""

    source: str
    sha256: str
    segments: tuple[Segment, ...] | None = None  # an f-string / concatenation
    fmt: str | None = None  # a str.format template

    @property
    def fields(self) -> list[str]:
        """The inputs the template needs: field expressions, or str.format placeholders."""
        if self.segments is not None:
            return list(dict.fromkeys(s[1] for s in self.segments if s[0] == "field"))
        return [name for _, name, _, _ in string.Formatter().parse(self.fmt or "") if name is not None]

    def render(self, values: Mapping[str, Any] | None = None, *args: Any) -> str:
        """Segments: each field's expression source looked up in `values`. Format templates: `args`
        (positional, in the original call's order) and `values` as keywords."""
        values = dict(values or {})
        if self.fmt is not None:
            return self.fmt.format(*args, **values)
        out = []
        for seg in self.segments or ():
            if seg[0] == "text":
                out.append(seg[1])
                continue
            _, expr, conversion, spec = seg
            if expr not in values:
                raise MethodError(f"{self.source}: no value given for field {{{expr}}}")
            v = values[expr]
            v = {115: str, 114: repr, 97: ascii}.get(conversion, lambda x: x)(v)
            out.append(format(v, spec or ""))
        return "".join(out)

    def provenance(self) -> dict[str, str]:
        return {"source": self.source, "sha256": self.sha256}


# --- read once per process --------------------------------------------------------------------------

def once(fn):
    """Memoise an extraction per (file, root, symbol, arguments): a task asks for its template for every
    item, and walking the function's tree each time was most of the CPU of a paper-protocol run (the
    event loop that feeds the requests stalled on `ast.walk`). Only successes are kept: a failure raises
    again, so a task without its method file still fails closed every time it asks. Each caller gets a
    fresh copy of any dict or list, so that no caller can alter what the next one reads."""
    memo: dict[tuple, Any] = {}

    @functools.wraps(fn)
    def cached(*args: Any, **kwargs: Any) -> Any:
        key = (_frozen(args), _frozen(kwargs))
        if key not in memo:
            memo[key] = fn(*args, **kwargs)
        return _fresh(memo[key])
    cached.cache_clear = memo.clear  # type: ignore[attr-defined]
    return cached


def _frozen(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _frozen(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    return v


def _fresh(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _fresh(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_fresh(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_fresh(x) for x in v)
    return v  # str, numbers, None, Template (frozen, its segments tuples)


# --- reading a file -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _module(local: str, root: str) -> ast.Module:
    try:
        return ast.parse(read(local, Path(root)))
    except SyntaxError as e:
        raise MethodError(f"method file {local}: not parsable Python ({e.msg}, line {e.lineno})") from None


def _source(local: str, symbol: str) -> tuple[str, str]:
    f = method_files()[local]
    return f"{f.source}#{symbol}", f.sha256


def _function(tree: ast.AST, qualname: str, where: str) -> ast.FunctionDef:
    node: ast.AST = tree
    for part in qualname.split("."):
        found = next((n for n in ast.iter_child_nodes(node)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part), None)
        if found is None:
            raise MethodError(f"{where}: no function or class '{qualname}'")
        node = found
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise MethodError(f"{where}: '{qualname}' is not a function")
    return node


def _string_local(func: ast.AST, name: str) -> ast.expr | None:
    """The value of the last plain string (or f-string) assignment to `name` inside `func`, if any."""
    found = None
    for n in ast.walk(func):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and n.targets[0].id == name and _is_stringish(n.value):
            found = n.value
    return found


def _is_stringish(e: ast.expr) -> bool:
    if isinstance(e, ast.Constant):
        return isinstance(e.value, str)
    if isinstance(e, ast.JoinedStr):
        return True
    return isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add) and _is_stringish(e.left) and _is_stringish(e.right)


def segments(expr: ast.expr, func: ast.AST | None = None) -> list[Segment]:
    """Literal text and fields of a string expression; a field that names a local string of `func` is
    inlined (PAPER_PROTOCOL.md §0.1 rule 5)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        out: list[Segment] = [("text", expr.value)]
    elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        out = segments(expr.left, func) + segments(expr.right, func)
    elif isinstance(expr, ast.JoinedStr):
        out = []
        for v in expr.values:
            if isinstance(v, ast.Constant):
                out.append(("text", v.value))
                continue
            local = _string_local(func, v.value.id) if func is not None and isinstance(v.value, ast.Name) \
                and v.conversion == -1 and v.format_spec is None else None
            if local is not None:
                out += segments(local, func)
            else:
                spec = ast.unparse(v.format_spec)[2:-1] if v.format_spec is not None else None
                out.append(("field", ast.unparse(v.value), v.conversion, spec))
    else:
        out = [("field", ast.unparse(expr), -1, None)]
    merged: list[Segment] = []
    for s in out:  # adjacent literal pieces become one
        if s[0] == "text" and merged and merged[-1][0] == "text":
            merged[-1] = ("text", merged[-1][1] + s[1])
        else:
            merged.append(s)
    return merged


# --- the extraction kinds -----------------------------------------------------------------------------

@once
def module_constant(local: str, root: Path, name: str) -> Any:
    """K1: a top-level NAME = <literal>."""
    where = f"{local}#{name}"
    for n in _module(local, str(root)).body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            try:
                return ast.literal_eval(n.value)
            except ValueError:
                raise MethodError(f"{where}: not a literal") from None
    raise MethodError(f"{where}: no module constant '{name}'")


@once
def local_string(local: str, root: Path, func: str, var: str, nth: int = 0, inline: bool = True) -> Template:
    """K2: the nth assignment to VAR inside a function (or Class.method), as segments. `inline` False keeps
    every field a field: a local that is a string on one branch only (VERA-MH's `options_str = "Yes, No"`
    when a question has no options, a join of them otherwise) must not be read as that string."""
    where = f"{local}#{func}.{var}"
    fn = _function(_module(local, str(root)), func, where)
    values = [n.value for n in ast.walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1
              and isinstance(n.targets[0], ast.Name) and n.targets[0].id == var]
    if len(values) <= nth or not _is_stringish(values[nth]):
        raise MethodError(f"{where}: no string assignment #{nth}")
    src, sha = _source(local, f"{func}.{var}")
    return Template(src, sha, segments=tuple(segments(values[nth], fn if inline else None)))


@once
def prefix_assignment(local: str, root: Path, func: str, var: str) -> tuple[str, str]:
    """K2 for `VAR = "<text>" + VAR` inside a function (a text put in front of a local): (its source,
    the text)."""
    where = f"{local}#{func}.{var}"
    fn = _function(_module(local, str(root)), func, where)
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and n.targets[0].id == var and isinstance(n.value, ast.BinOp) and isinstance(n.value.op, ast.Add) \
                and isinstance(n.value.left, ast.Constant) and isinstance(n.value.left.value, str) \
                and isinstance(n.value.right, ast.Name) and n.value.right.id == var:
            return _source(local, f"{func}.{var}")[0], n.value.left.value
    raise MethodError(f"{where}: no '{var} = \"<text>\" + {var}' assignment")


@once
def returned_string(local: str, root: Path, func: str, nth: int = 0) -> Template:
    """K3: the nth return value of a function, as segments."""
    where = f"{local}#{func}:return"
    fn = _function(_module(local, str(root)), func, where)
    values = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    if len(values) <= nth:
        raise MethodError(f"{where}: no return #{nth}")
    src, sha = _source(local, f"{func}:return[{nth}]")
    return Template(src, sha, segments=tuple(segments(values[nth], fn)))


@once
def format_call(local: str, root: Path, func: str, nth: int = 0) -> tuple[Template, list[str]]:
    """K5: the nth `"<constant>".format(...)` call inside a function: the template and its argument
    sources (what the original passed, in order)."""
    where = f"{local}#{func}:format"
    fn = _function(_module(local, str(root)), func, where)
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "format" and isinstance(n.func.value, ast.Constant)
             and isinstance(n.func.value.value, str)]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    if len(calls) <= nth:
        raise MethodError(f"{where}: no .format call #{nth}")
    c = calls[nth]
    src, sha = _source(local, f"{func}:format[{nth}]")
    return Template(src, sha, fmt=c.func.value.value), [ast.unparse(a) for a in c.args]


@once
def call_settings(local: str, root: Path, func: str, keys: tuple[str, ...] = ("temperature",)) -> dict[str, Any]:
    """K9: the first dict literal inside a function holding all of `keys`, constant entries only
    (generation settings such as {'model': ..., 'temperature': 1, 'max_tokens': 365})."""
    where = f"{local}#{func}:settings"
    fn = _function(_module(local, str(root)), func, where)
    for n in ast.walk(fn):
        if isinstance(n, ast.Dict):
            entries = {k.value: v for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant)}
            if all(k in entries for k in keys):
                return {k: v.value for k, v in entries.items() if isinstance(v, ast.Constant)}
    raise MethodError(f"{where}: no dict literal with {', '.join(keys)}")


@once
def call_arguments(local: str, root: Path, func: str, callee: str, nth: int = 0) -> list[Any]:
    """K9: the positional arguments of the nth call to `*.callee(...)` inside a function, in source order: each
    constant's value, None for anything else (`config.get("system_prompt", "<default>")` -> [.., default])."""
    where = f"{local}#{func}:{callee}()"
    fn = _function(_module(local, str(root)), func, where)
    calls = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr == callee), key=lambda c: (c.lineno, c.col_offset))
    if len(calls) <= nth:
        raise MethodError(f"{where}: no call #{nth}")
    return [a.value if isinstance(a, ast.Constant) else None for a in calls[nth].args]


@once
def call_keywords(local: str, root: Path, func: str, callee: str, nth: int = 0) -> dict[str, Any]:
    """K9: the keyword arguments of the first call to `*.callee(...)` inside a function: a constant's
    value, or the source of any other expression (which settings a call sends, and from where)."""
    where = f"{local}#{func}:{callee}()"
    fn = _function(_module(local, str(root)), func, where)
    calls = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call) and (
        (isinstance(n.func, ast.Attribute) and n.func.attr == callee) or (isinstance(n.func, ast.Name) and n.func.id == callee))),
        key=lambda c: (c.lineno, c.col_offset))
    if len(calls) <= nth:
        raise MethodError(f"{where}: no call #{nth} to {callee}")
    return {k.arg: k.value.value if isinstance(k.value, ast.Constant) else ast.unparse(k.value)
            for k in calls[nth].keywords if k.arg}


def file_sha256(local: str) -> str:
    return method_files()[local].sha256


def check_bytes(data: bytes, local: str) -> bool:
    return hashlib.sha256(data).hexdigest() == method_files()[local].sha256


@once
def message_roles(local: str, root: Path, func: str) -> list[str]:
    """K9: the roles of the `{"role": <constant>, "content": ...}` message literals inside a function, in
    source order (which messages the original sends, and as whom)."""
    return [role for role, _content in message_contents(local, root, func)]


@once
def attribute_defaults(local: str, root: Path, func: str) -> dict[str, Any]:
    """K9: constant assignments to attributes inside a function (`self.args.temperature = 0.0`), by
    attribute name: settings an agent falls back to."""
    where = f"{local}#{func}:defaults"
    fn = _function(_module(local, str(root)), func, where)
    out = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute) \
                and isinstance(n.value, ast.Constant):
            out[n.targets[0].attr] = n.value.value
    if not out:
        raise MethodError(f"{where}: no constant attribute assignment")
    return out


@once
def dict_format_value(local: str, root: Path, func: str, key: str, match: dict[str, str]) -> tuple[Template, list[str]]:
    """K6: inside a function, the dict literal whose constant entries include `match`; its `key` entry must
    be a `"<constant>".format(...)` call: the template and the argument sources, in order."""
    symbol = f"{func}[{','.join(f'{k}={v}' for k, v in match.items())}].{key}"
    where = f"{local}#{symbol}"
    fn = _function(_module(local, str(root)), func, where)
    for n in ast.walk(fn):
        if not isinstance(n, ast.Dict):
            continue
        entries = {k.value: v for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant)}
        if key in entries and all(isinstance(entries.get(k), ast.Constant) and entries[k].value == v
                                  for k, v in match.items()):
            value = entries.get(key)
            if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "format"
                    and isinstance(value.func.value, ast.Constant) and isinstance(value.func.value.value, str)):
                raise MethodError(f"{where}: not a .format call on a string")
            src, sha = _source(local, symbol)
            return Template(src, sha, fmt=value.func.value.value), [ast.unparse(a) for a in value.args]
    raise MethodError(f"{where}: no dict literal with {match}")


@once
def local_format(local: str, root: Path, func: str, var: str) -> tuple[Template, list[str]]:
    """K2 + K5: the assignment `VAR = "<constant>".format(...)` inside a function: the template and its
    argument sources."""
    symbol = f"{func}.{var}"
    where = f"{local}#{symbol}"
    fn = _function(_module(local, str(root)), func, where)
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and n.targets[0].id == var and isinstance(n.value, ast.Call) \
                and isinstance(n.value.func, ast.Attribute) and n.value.func.attr == "format" \
                and isinstance(n.value.func.value, ast.Constant) and isinstance(n.value.func.value.value, str):
            src, sha = _source(local, symbol)
            return Template(src, sha, fmt=n.value.func.value.value), [ast.unparse(a) for a in n.value.args]
    raise MethodError(f"{where}: no '{var} = \"...\".format(...)' assignment")


@once
def message_contents(local: str, root: Path, func: str) -> list[tuple[str, str | None]]:
    """K9: (role, content) of the message literals inside a function, in source order; the content is
    the constant text (a fixed system message), or None where it is an expression (the prompt)."""
    where = f"{local}#{func}:messages"
    fn = _function(_module(local, str(root)), func, where)
    found = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Dict):
            entries = {k.value: v for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant)}
            if "role" in entries and "content" in entries and isinstance(entries["role"], ast.Constant):
                c = entries["content"]
                text = c.value if isinstance(c, ast.Constant) and isinstance(c.value, str) else None
                found.append((n.lineno, n.col_offset, entries["role"].value, text))
    if not found:
        raise MethodError(f"{where}: no message literal")
    return [(role, text) for *_, role, text in sorted(found)]


@once
def conditional_local(local: str, root: Path, func: str, var: str) -> tuple[str, Any, Any]:
    """K2 for `VAR = <constant> if <test> else <constant>` inside a function: (the test's source, the
    value when true, the value when false); the caller checks the test is the one it implements."""
    where = f"{local}#{func}.{var}"
    fn = _function(_module(local, str(root)), func, where)
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and n.targets[0].id == var and isinstance(n.value, ast.IfExp) \
                and isinstance(n.value.body, ast.Constant) and isinstance(n.value.orelse, ast.Constant):
            return ast.unparse(n.value.test), n.value.body.value, n.value.orelse.value
    raise MethodError(f"{where}: no '{var} = <constant> if ... else <constant>' assignment")


@once
def argparse_defaults(local: str, root: Path) -> dict[str, Any]:
    """K10: the literal `default=` of every `add_argument("--name", ...)` call in a file, by dest
    (`--max-tokens` -> max_tokens, or its `dest=`): what the original runs with unless told otherwise."""
    out = {}
    for n in ast.walk(_module(local, str(root))):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"):
            continue
        kw = {k.arg: k.value for k in n.keywords if k.arg}
        flags = [a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if "default" not in kw or not flags:
            continue
        dest = kw["dest"].value if isinstance(kw.get("dest"), ast.Constant) else \
            next((f for f in flags if f.startswith("--")), flags[0]).lstrip("-").replace("-", "_")
        try:
            out[dest] = ast.literal_eval(kw["default"])
        except ValueError:  # an expression such as Path("data/x.json"): its source
            out[dest] = ast.unparse(kw["default"])
    if not out:
        raise MethodError(f"{local}: no add_argument(..., default=...) call")
    return out


@once
def branch_return(local: str, root: Path, func: str, var: str, value: str) -> Template:
    """K4: inside a function, the `if VAR == '<value>':` branch (an `elif` too) and its first return
    value, as segments (ELEPHANT's create_prompt picks its prompt by metric this way)."""
    symbol = f"{func}[{var}=={value!r}]:return"
    where = f"{local}#{symbol}"
    fn = _function(_module(local, str(root)), func, where)
    for n in ast.walk(fn):
        t = n.test if isinstance(n, ast.If) else None
        if isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == var and len(t.ops) == 1 \
                and isinstance(t.ops[0], ast.Eq) and isinstance(t.comparators[0], ast.Constant) \
                and t.comparators[0].value == value:
            ret = next((s for s in n.body if isinstance(s, ast.Return) and s.value is not None), None)
            if ret is None or not _is_stringish(ret.value):
                raise MethodError(f"{where}: the branch does not return a string")
            src, sha = _source(local, symbol)
            return Template(src, sha, segments=tuple(segments(ret.value, fn)))
    raise MethodError(f"{where}: no branch 'if {var} == {value!r}'")


@once
def partial_dict(local: str, root: Path, name: str) -> dict[str, Any]:
    """K1': a top-level dict whose values mix literals and expressions (`DATA_DIR / 'x.csv'`): its
    constant entries only, nested dicts kept with their own constant entries."""
    def constants(d: ast.Dict) -> dict[str, Any]:
        out = {}
        for k, v in zip(d.keys, d.values):
            if not isinstance(k, ast.Constant):
                continue
            if isinstance(v, ast.Dict):
                out[k.value] = constants(v)
            elif isinstance(v, ast.Constant):
                out[k.value] = v.value
        return out
    for n in _module(local, str(root)).body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets) \
                and isinstance(n.value, ast.Dict):
            return constants(n.value)
    raise MethodError(f"{local}#{name}: no module dict '{name}'")


@once
def argument_defaults(local: str, root: Path, func: str) -> dict[str, Any]:
    """K9: a function's parameters that have a literal default, by name (settings a caller that does not
    pass them gets)."""
    where = f"{local}#{func}:defaults"
    fn = _function(_module(local, str(root)), func, where)
    a = fn.args
    positional = a.posonlyargs + a.args
    pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
    pairs += [(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
    out = {}
    for p, d in pairs:
        try:
            out[p.arg] = ast.literal_eval(d)
        except ValueError:
            continue  # not a literal: not a setting trustmh can read
    return out


@once
def sent_settings(local: str, root: Path, func: str, callee: str, nth: int = 0) -> dict[str, Any]:
    """K9: what the nth `*.callee(...)` call inside a function sends besides model and messages: each
    keyword's constant, or the default of the function parameter it passes on. Any other expression
    fails closed, since its value cannot be known without running the code."""
    kw = call_keywords(local, root, func, callee, nth)
    defaults = argument_defaults(local, root, func)
    out = {}
    for k, v in kw.items():
        if k in ("model", "messages"):
            continue
        if isinstance(v, str) and v.isidentifier() and v in defaults:
            v = defaults[v]
        elif isinstance(v, str):  # a constant string setting is unknown here; an expression unreadable
            raise MethodError(f"{local}#{func}:{callee}(): setting {k}={v} is not a literal or a parameter default")
        out[k] = v
    return out


@once
def join_separator(local: str, root: Path, func: str) -> str:
    """K3 for a function whose only return is `"<sep>".join(<its parameter>)`: the separator."""
    where = f"{local}#{func}:return"
    fn = _function(_module(local, str(root)), func, where)
    values = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    params = {a.arg for a in fn.args.args}
    if len(values) == 1:
        v = values[0]
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "join" \
                and isinstance(v.func.value, ast.Constant) and isinstance(v.func.value.value, str) \
                and len(v.args) == 1 and not v.keywords and isinstance(v.args[0], ast.Name) and v.args[0].id in params:
            return v.func.value.value
    raise MethodError(f"{where}: not a single 'return \"<sep>\".join(<parameter>)'")
