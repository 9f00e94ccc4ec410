"""mkdocs hook: the API page lists exactly `trustmh.__all__`, each name documented from its docstring.

docs/api.md holds the marker `<!-- trustmh.__all__ -->`; this hook replaces it with one mkdocstrings block per
public name, at the module that defines it, so the page can neither miss a name nor list a private one
(tests/test_docs.py checks the built page against `__all__`)."""

from __future__ import annotations

import importlib

MARKER = "<!-- trustmh.__all__ -->"


def api_blocks() -> str:
    import trustmh
    blocks = []
    for name in trustmh.__all__:
        obj = getattr(trustmh, name)
        module = getattr(obj, "__module__", None) if callable(obj) else None
        if module is None:  # a constant: the module the package takes it from
            module = "trustmh." + trustmh._LAZY[name] if name in trustmh._LAZY else "trustmh"
        if module != "trustmh" and not hasattr(importlib.import_module(module), name):
            module = "trustmh"
        blocks.append(f"::: {module}.{name}\n")
    return "\n".join(blocks)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, api_blocks())
    return markdown
