"""The authors' method files: where each comes from, how it is checked, and where it lives locally.

Under `--protocol paper` a task sends what the original code sends, and that text is read at run time
out of the original files (see `data/extract.py`), never out of this repository. The files are fetched
like the data (`trustmh data pull methods`, pinned commit, sha256 checked) into `<data dir>/methods/`,
laid out as `shared/methods` is; `--methods-dir` or $TRUSTMH_METHODS_DIR points elsewhere. `methods.json`
beside this module lists them (repository, commit, path, zip member, size, sha256, licence): facts about
the files, not the files. It is one list, where a pillar's other assets are its own package's: a file is
not one pillar's (reliability and robustness read the same Robustness/ files of the predecessor's code; the
paper's figures belong to every pillar), and `trustmh data pull methods` fetches them as one dataset."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError

MANIFEST = Path(__file__).with_name("methods.json")
DATASET = "methods"  # the name `trustmh data pull` / `data check` know them by


class MethodError(UserError):
    """A method file is missing, altered, or lacks the template a task needs: the task does not run."""


@dataclass(frozen=True)
class MethodFile:
    local: str  # path under the methods dir (zip members under '<zip path>/<member>')
    repo: str
    commit: str
    path: str  # path in the repository (the zip, for a zip member)
    sha256: str
    size: int
    license: str
    tasks: str
    zip_member: str | None = None

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.path}"

    @property
    def source(self) -> str:
        """`owner/repo@commit:path` (with `!member` for a file inside a zip)."""
        member = f"!{self.zip_member}" if self.zip_member else ""
        return f"{self.repo}@{self.commit}:{self.path}{member}"


@functools.lru_cache(maxsize=1)
def method_files() -> dict[str, MethodFile]:
    return {e["local"]: MethodFile(**e) for e in json.loads(MANIFEST.read_text(encoding="utf-8"))}


def methods_dir(data_dir: str | Path | None, override: str | Path | None = None) -> Path:
    """--methods-dir, else $TRUSTMH_METHODS_DIR, else <data dir>/methods."""
    chosen = override or os.environ.get("TRUSTMH_METHODS_DIR")
    if chosen:
        return Path(chosen).expanduser()
    return Path(data_dir or ".") / "methods"


def read(local: str, root: Path) -> bytes:
    """The bytes of a method file after its size and sha256 matched the manifest (fail closed)."""
    f = method_files().get(local)
    if f is None:
        raise MethodError(f"method file {local} is not in trustmh's manifest of the authors' files")
    path = root / local
    if not path.is_file():
        raise MethodError(f"method file {local} missing in {root} — run `trustmh data pull {DATASET}` (or "
                          f"`--methods-dir DIR` pointing at a copy)")
    size = path.stat().st_size
    if size != f.size:
        raise MethodError(f"method file {local}: {size} bytes, expected {f.size} (altered or truncated); "
                          f"run `trustmh data pull {DATASET} --force`")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != f.sha256:
        raise MethodError(f"method file {local}: sha256 does not match {f.source}; run "
                          f"`trustmh data pull {DATASET} --force`")
    return data
