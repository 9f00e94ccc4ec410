"""The judge stage's vocabulary: what a task declares (a `Rubric`) and what scoring hands back to it
(`Judged`, `Verdicts`).

A task declares its rubrics; for each sample it renders the judgements it needs (`Method.judgements`),
and the engine sends each one through the same endpoint, store, cache and resume as a generation. A
sample may need several: the paper judges ESConv replies once per criterion. Scoring later reads the
verdicts back from the store by rubric name, without rendering anything again."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..data.methods import method_files
from .roles import JUDGE_ROLES

# Each pillar keeps its templates in its own package (tasks/<pillar>/templates/); a name is found in any of them.
TEMPLATE_DIRS = tuple(sorted((Path(__file__).resolve().parents[1] / "tasks").glob("*/templates")))


def template_path(name: str | Path) -> Path:
    """Where a template named by a task or rubric lives: an absolute path as given (a task from outside
    trustmh), else the pillar folder that holds the name (the first, in folder order, for a name two hold)."""
    if Path(name).is_absolute():
        return Path(name)
    if (found := _FOUND.get(name)) is not None:
        return found
    for folder in TEMPLATE_DIRS:
        if (folder / name).is_file():
            _FOUND[name] = folder / name
            return folder / name
    return TEMPLATE_DIRS[0] / name if TEMPLATE_DIRS else Path(name)  # missing: the read fails with its name


# Where each name was found: a rubric's version is asked for every judge call, and looking in every pillar's
# folder cost ~0.1 ms a call (their files do not move while trustmh runs; a missing name is looked for again).
_FOUND: dict[str | Path, Path] = {}


@dataclass(frozen=True)
class Rubric:
    """One named judgement a task makes of a reply.

    `templates` are the files the judge prompt is rendered from (under tasks/<pillar>/templates): their content
    is the rubric's version, so a stored verdict made with an older text is recognised as such. `role`
    says who answers, a registered judge role (judges/roles.py): "llm" is the run's `--judge` (the rules
    judge stands in offline), "classifier" the run's `--refusal-classifier`, a local model answering with a
    label, and "proxy" the run's `--proxy-judge`, the other model a paper's method names for one judgement
    (PsyLeak's proxy)."""

    name: str = "judge"
    templates: tuple[str, ...] = ()
    role: str = "llm"
    method: str | None = None  # the paper's rubric: an authors' method file (its path under the methods dir)
    # Asking again while the verdict does not parse, as some originals do (the paper's ESConv judge: up to
    # 3 calls while no score is found): at most `attempts` calls, each its own stored request; the verdict
    # is the first that `parses`, else the last. An API error is not re-asked here (the endpoint retries).
    attempts: int = 1
    parses: Callable[[str], bool] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.role not in JUDGE_ROLES:
            raise ValueError(f"rubric {self.name}: role must be a registered judge role ({', '.join(JUDGE_ROLES)}), "
                             f"not {self.role!r}")
        if not self.name or self.name.startswith(":"):
            raise ValueError("a rubric needs a name")
        if self.attempts < 1 or (self.attempts > 1 and self.parses is None):
            raise ValueError(f"rubric {self.name}: attempts must be 1, or more with a `parses` check")

    @property
    def version(self) -> str:
        """Changes whenever a template's text does (re-read when a file's size or mtime changes)."""
        stamps = tuple((st.st_mtime_ns, st.st_size) for st in (template_path(t).stat() for t in self.templates))
        if self.method is not None:  # pinned by its manifest sha256: read nothing
            stamps += (method_files()[self.method].sha256,)
        if self.attempts > 1:  # a verdict re-asked until it parses may differ from a first answer
            stamps += (f"attempts={self.attempts}",)
        return _version(self.role, self.templates, stamps)

    @property
    def source(self) -> list[str]:
        if self.method is not None:
            return [method_files()[self.method].source]
        return [t if Path(t).is_absolute() else
                "trustmh:" + template_path(t).relative_to(TEMPLATE_DIRS[0].parents[2]).as_posix()
                for t in self.templates]


@functools.lru_cache(maxsize=256)
def _version(role: str, templates: tuple[str, ...], stamps: tuple) -> str:
    h = hashlib.sha256(role.encode())
    for name in templates:
        # A name is a file of a pillar's templates; a task defined outside trustmh names its own file.
        h.update(b"\0" + Path(name).name.encode() + b"\0" + template_path(name).read_bytes())
    for stamp in stamps:
        if isinstance(stamp, str):  # a method file's sha256
            h.update(b"\0" + stamp.encode())
    return h.hexdigest()[:16]


@dataclass
class Judged:
    """One verdict for one sample, or why there is none (the rules judge cannot rate, an API error...)."""

    text: str | None = None
    reason: str | None = None


class Verdicts(dict):
    """A sample's verdicts by rubric name. A task with one rubric reads it as that verdict (`.text`,
    `.reason`); a task with several indexes it by name."""

    @property
    def text(self) -> str | None:
        return self._first().text

    @property
    def reason(self) -> str | None:
        return self._first().reason

    def _first(self) -> Judged:
        return next(iter(self.values())) if self else Judged(reason="no judgement")
