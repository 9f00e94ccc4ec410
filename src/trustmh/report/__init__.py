"""`trustmh report`: one self-contained HTML file per run (or set of runs)."""

from .html import build_context, prepare, render, write_report

__all__ = ["build_context", "prepare", "render", "write_report"]
