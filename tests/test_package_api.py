"""The package root is the authoring surface (issue 21): what docs/python.md (*Use from Python*) and
docs/architecture.md's *The judge stage* / *Writing a task* tell a task or provider author to use is
exported from `trustmh`, nothing undocumented is, the lazy exports are typed, and `py.typed` ships."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import tomllib
from pathlib import Path

import trustmh

ROOT = Path(__file__).resolve().parents[1]
# Modules an author's names come from. The statistics library stays `trustmh.scoring.metrics.<name>`: the docs
# name those with the module, and only its few authoring names are at the root.
AUTHORING = ("trustmh.types", "trustmh.errors", "trustmh.tasks.base", "trustmh.judges.rubric", "trustmh.scoring.metrics",
             "trustmh.models", "trustmh.models.base", "trustmh.engine", "trustmh.engine.spec")


def section(path: Path, heading: str) -> str:
    """The text under a `## heading`, up to the next heading of that level."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def author_docs() -> str:
    arch = ROOT / "docs" / "architecture.md"
    return "\n".join([(ROOT / "docs" / "python.md").read_text(encoding="utf-8"), section(arch, "The judge stage"),
                      section(arch, "Writing a task")])


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def inline_names(text: str) -> set[str]:
    """Identifiers the prose shows as code: `name`, `@name`, `name(...)`, and each of `a`/`b` pairs;
    a dotted `module.name` is left to the module it names."""
    prose = re.sub(r"^```\w*\n.*?^```", "", text, flags=re.S | re.M)
    names = set()
    for span in re.findall(r"`([^`\n]+)`", prose):
        m = re.fullmatch(r"@?([A-Za-z_]\w*)(\(.*\))?", span.strip())
        if m:
            names.add(m.group(1))
    return names


def imported_from_root(text: str) -> set[str]:
    names = set()
    for block in python_blocks(text):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "trustmh":
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "trustmh":
                names.add(node.attr)
    return names


def public_definitions() -> dict[str, str]:
    """name -> module, for what the authoring modules define at their top (classes, functions, constants)."""
    out: dict[str, str] = {}
    for modname in AUTHORING:
        mod = importlib.import_module(modname)
        for name, value in vars(mod).items():
            if name.startswith("_") or inspect.ismodule(value):
                continue
            if getattr(value, "__module__", modname) == modname or name.isupper():
                out.setdefault(name, modname)
    return out


def members() -> set[str]:
    """Attributes and methods of the classes an author subclasses or fills in (`load`, `score`, `n`...):
    the docs name them as code, and they are reached through their class, not the root."""
    names: set[str] = set()
    for cls in (trustmh.Task, trustmh.Sample, trustmh.Score, trustmh.Item, trustmh.RunContext, trustmh.Rubric,
                trustmh.Judged, trustmh.Verdicts, trustmh.Request, trustmh.Response, trustmh.Model,
                trustmh.Resamples, trustmh.Table, trustmh.MetricSpec, trustmh.RunSpec):
        names |= set(dir(cls)) | set(getattr(cls, "__dataclass_fields__", {})) | set(getattr(cls, "model_fields", {}))
    return names


def test_what_the_docs_tell_an_author_to_use_is_exported_from_the_root():
    docs = author_docs()
    shown = imported_from_root("\n".join([docs, (ROOT / "README.md").read_text(encoding="utf-8")]))
    assert {"Task", "register", "register_model", "run", "RunSpec"} <= shown  # the parse saw the examples
    assert shown <= set(trustmh.__all__), sorted(shown - set(trustmh.__all__))
    defined, own = public_definitions(), members()
    named = {n for n in inline_names(docs) if n in defined and n not in own}
    assert {"Table", "judge_text", "Means", "NO_ANSWER"} <= named  # the parse saw the prose
    assert named <= set(trustmh.__all__), {n: defined[n] for n in sorted(named - set(trustmh.__all__))}


def test_nothing_is_exported_that_the_docs_do_not_name():
    docs = author_docs()
    documented = inline_names(docs) | imported_from_root(docs)
    assert set(trustmh.__all__) <= documented, sorted(set(trustmh.__all__) - documented)
    # The root's docstring is the API listing: every export once, and nothing else listed.
    listing = trustmh.__doc__.split("Public API", 1)[1]
    listed = re.findall(r"\b[A-Za-z_]\w*\b", " ".join(line.split(" - ")[0] for line in listing.splitlines()))
    assert sorted(n for n in listed if n in trustmh.__all__) == sorted(trustmh.__all__)
    assert len(trustmh.__all__) <= 40  # small: a task's needs (inspect_ai keeps about fifteen)


def test_lazy_exports_are_typed_and_resolve_where_they_say():
    tree = ast.parse((ROOT / "src" / "trustmh" / "__init__.py").read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.level == 1, ast.dump(imp)
                typed |= {a.name: imp.module for a in imp.names}
    lazy = trustmh._LAZY
    assert typed == lazy
    for name, module in lazy.items():
        assert getattr(trustmh, name) is getattr(importlib.import_module(f"trustmh.{module}"), name), name
    assert set(trustmh.__all__) == set(lazy) | {n for n in trustmh.__all__ if n in vars(trustmh)}


def test_py_typed_ships_with_the_package():
    assert (ROOT / "src" / "trustmh" / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["trustmh"]
