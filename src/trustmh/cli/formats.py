"""Every output format of `report`, `compare` and `gate`, in one registry: what each command's --format
accepts (its help, its shell completion and its check come from here) and the function that writes each.
An unknown format, or one the command cannot write (`compare --ranks --format json`), is a one-line usage
error naming the ones it can; nothing falls back to another format silently. Adding a format is a line
here and its writer."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional

import typer

from ..errors import UserError


@dataclass(frozen=True)
class Formats:
    what: str  # what is written, for the messages: "the report", "the rank table", ...
    # format -> "module:function" that writes it (imported when used: writers pull in heavy modules), or
    # "" for the command's own output (the HTML report, the terminal's tables)
    writers: dict[str, str]
    default: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.writers)

    def listed(self) -> str:
        *first, last = self.names
        return f"{', '.join(first)} or {last}" if first else last

    def check(self, fmt: str, flag: str = "--format") -> str:
        if fmt not in self.writers:
            raise UserError(f"{flag} must be {self.listed()} for {self.what}, not '{fmt}'")
        return fmt

    def writer(self, fmt: str) -> Callable:
        module, _, name = self.writers[self.check(fmt)].partition(":")
        if not name:
            raise ValueError(f"{fmt} is {self.what}'s own output, written by its command")
        return getattr(importlib.import_module(module), name)

    def option(self, help: str, default: Optional[str] = "") -> typer.models.OptionInfo:
        """The command's --format/-f option: `help` followed by the formats, offered to shell completion.
        `default` None: the command picks one by what it writes (compare --ranks)."""
        return typer.Option(self.default if default == "" else default, "--format", "-f",
                            help=f"{help} One of: {', '.join(self.names)}.",
                            autocompletion=lambda: list(self.names))


RANKS = Formats("the rank table", {"csv": "trustmh.report.ranks:rank_csv",
                                   "markdown": "trustmh.report.ranks:rank_markdown",
                                   "latex": "trustmh.report.ranks:rank_latex"}, "markdown")
REPORT = Formats("the report", {"html": "", **RANKS.writers}, "html")
COMPARE = Formats("the comparison", {"table": "", "json": "trustmh.analysis.compare_format:to_json",
                                     "markdown": "trustmh.analysis.compare_format:to_markdown",
                                     "csv": "trustmh.analysis.compare_format:to_csv"}, "table")
GATE = Formats("the gate", {"text": "trustmh.analysis.gate_format:to_text",
                            "json": "trustmh.analysis.gate_format:to_json",
                            "junit": "trustmh.analysis.gate_format:to_junit",
                            "github": "trustmh.analysis.gate_format:to_github"}, "text")
REGISTRY = {"report": REPORT, "report --format (rank table)": RANKS, "compare": COMPARE, "compare --ranks": RANKS,
            "gate": GATE}
