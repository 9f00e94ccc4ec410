"""The upstream data manifest: every data file trustmh uses, its pinned source, size and sha256.

The data lives in `manifest.toml` beside this module (a package resource); this loader only turns it
into frozen records and derives each download URL from the dataset's repository and commit and the
file's path there, so a commit is written once per dataset. `fetch.py` uses these records to download,
import and verify."""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from importlib import resources
from urllib.parse import quote

from . import methods

RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{src}"


@dataclass(frozen=True)
class DataFile:
    path: str  # relative to the data dir
    size: int
    sha256: str
    url: str  # raw URL at a pinned commit; for zipped files, the zip's URL
    zip_member: str | None = None


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    license: str
    source: str  # "owner/repo@commit" (or where a gated set lives)
    files: tuple[DataFile, ...]
    gated: bool = False  # cannot be downloaded for the user; they place `user_files` themselves
    how_to_get: str = ""
    user_files: tuple[str, ...] = ()  # paths or globs relative to the data dir


def _dataset(entry: dict) -> Dataset:
    repo, commit = entry.get("repo"), entry.get("commit")
    if entry.get("files") and not (repo and commit):
        raise ValueError(f"manifest.toml: dataset {entry['name']} has files but no repo and commit")
    files = tuple(DataFile(f["path"], f["size"], f["sha256"], RAW_URL.format(repo=repo, commit=commit, src=quote(f["src"])),
                           f.get("member")) for f in entry.get("files", ()))
    return Dataset(entry["name"], entry["description"], entry["license"],
                   f"{repo}@{commit}" if repo else entry["source"], files, entry.get("gated", False),
                   entry.get("how_to_get", ""), tuple(entry.get("user_files", ())))


def as_dataset() -> Dataset:
    """The authors' method files (methods.json) as one entry of the data manifest, so `data pull`, `data
    check` and `data pull --from DIR` handle them like any dataset (paths prefixed with `methods/`)."""
    files = tuple(DataFile(f"methods/{f.local}", f.size, f.sha256,
                           RAW_URL.format(repo=f.repo, commit=f.commit, src=f.path), f.zip_member)
                  for f in methods.method_files().values())
    return Dataset(name=methods.DATASET, description="the authors' method files (prompts, rubrics, settings) that "
                   "--protocol paper reads its templates from; never executed",
                   license="per file, see `trustmh data check` and methods.json (MIT, Apache-2.0, ...)",
                   source="8 repositories at pinned commits (methods.json)", files=files)


def _load() -> dict[str, Dataset]:
    text = resources.files(__package__).joinpath("manifest.toml").read_text(encoding="utf-8")
    sets = list(map(_dataset, tomllib.loads(text)["datasets"]))
    last_public = max(i for i, d in enumerate(sets) if not d.gated)
    sets.insert(last_public + 1, as_dataset())
    return {d.name: d for d in sets}


DATASETS: dict[str, Dataset] = _load()

_BY_PATH: dict[str, Dataset] = {f.path: d for d in DATASETS.values() for f in d.files}


def dataset_for_path(relpath: str) -> Dataset | None:
    """The dataset a data-dir-relative path belongs to (a manifest file or a user-supplied file)."""
    rel = relpath.replace("\\", "/").removeprefix("./")
    if rel in _BY_PATH:
        return _BY_PATH[rel]
    for d in DATASETS.values():
        if d.gated and any(fnmatch.fnmatchcase(rel, pattern) for pattern in d.user_files):
            return d
    return None
