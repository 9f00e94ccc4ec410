"""The gated SWMH set from the Hugging Face Hub, for a user who has accepted its terms there.

SWMH may not be redistributed, so trustmh never hosts a copy: this downloads the user's own, with their
Hugging Face token ($HF_TOKEN, or the one `hf auth login` stored), and lays its splits out as the
diagnosis task reads them: <data-dir>/swmh/{train,val,test}.csv, columns text and label. $HF_ENDPOINT
(or `endpoint=`) points it at a mirror. The token goes to the Hub only: no message here contains it.

The repository's file names are not known without access, so the splits are recognised by name (a CSV
called train, val/validation/valid/dev or test, in any folder); anything else is refused with what was
found and how to place the files by hand."""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from ..errors import UserError
from .manifest import DATASETS

REPO = "AIMH/SWMH"
SPLIT_NAMES = {"train": "train", "val": "val", "validation": "val", "valid": "val", "dev": "val", "test": "test"}
COLUMNS = ("text", "label")


def pick_splits(paths: list[str]) -> dict[str, str]:
    """split -> repository path of its CSV. Refuses a repository where a split is missing or ambiguous."""
    found: dict[str, list[str]] = {}
    for p in paths:
        pp = PurePosixPath(p)
        if pp.suffix.lower() == ".csv" and pp.stem.lower() in SPLIT_NAMES:
            found.setdefault(SPLIT_NAMES[pp.stem.lower()], []).append(p)
    problems = [f"no {s} split" for s in ("train", "val", "test") if s not in found]
    problems += [f"several {s} files ({', '.join(sorted(v))})" for s, v in sorted(found.items()) if len(v) > 1]
    if problems:
        listed = ", ".join(sorted(paths)[:20]) or "no files"
        raise UserError(f"{REPO} does not hold one CSV per split as expected ({'; '.join(problems)}; found: "
                        f"{listed}); get the files by hand: {DATASETS['swmh'].how_to_get}")
    return {s: v[0] for s, v in found.items()}


def _install(src: Path, dest: Path) -> int:
    """Check that `src` is a CSV with text and label columns, then move it to `dest` atomically. Returns
    its number of rows."""
    with src.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise UserError(f"{REPO} {dest.name}: no {' or '.join(missing)} column (columns: "
                            f"{', '.join(reader.fieldnames or []) or 'none'})")
        rows = sum(1 for _ in reader)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dest)
    return rows


def pull_swmh(data_dir: Path, *, token: str | None = None, endpoint: str | None = None,
              revision: str = "main") -> dict[str, int]:
    """Download SWMH into `data_dir`/swmh; returns rows per split. Raises UserError with one line for a
    missing package, a missing or refused token, an unreachable Hub or an unexpected repository."""
    try:
        from huggingface_hub import HfApi, hf_hub_download
        from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError
        from huggingface_hub.errors import HTTPError as TransportError  # its HTTP library's base error
        from huggingface_hub.hf_api import RepoFile
    except ImportError:
        raise UserError("pulling SWMH needs huggingface_hub: pip install 'trustmh[hub]'") from None
    # Read here rather than left to huggingface_hub, which reads HF_ENDPOINT once, when it is imported.
    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    token = token or os.environ.get("HF_TOKEN") or None
    where = f"{REPO} at {endpoint}"
    try:
        api = HfApi(endpoint=endpoint, token=token)
        tree = api.list_repo_tree(REPO, repo_type="dataset", revision=revision, recursive=True)
        picks = pick_splits([f.path for f in tree if isinstance(f, RepoFile)])
        rows = {}
        with tempfile.TemporaryDirectory(prefix="trustmh-swmh-") as cache:
            for split, path in sorted(picks.items()):
                local = hf_hub_download(REPO, path, repo_type="dataset", revision=revision, token=token,
                                        endpoint=endpoint, cache_dir=cache)
                rows[split] = _install(Path(local), Path(data_dir) / "swmh" / f"{split}.csv")
        return rows
    except GatedRepoError:
        raise UserError(f"{where} refused the download: SWMH is gated; log in at "
                        f"https://huggingface.co/datasets/{REPO}, accept its terms, then set HF_TOKEN to a token "
                        f"of that account") from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise UserError(f"{where} answered HTTP {status}") from None
    except (TransportError, LocalEntryNotFoundError, OSError) as e:
        raise UserError(f"could not reach {where} ({type(e).__name__}); check the network, or HF_ENDPOINT") from None
