"""The gated SWMH set from the Hugging Face Hub, for a user who has accepted its terms there.

SWMH may not be redistributed, so trustmh never hosts a copy: this downloads the user's own, with their
Hugging Face token ($HF_TOKEN, or the one `hf auth login` stored), and lays its splits out as the
diagnosis task reads them: <data-dir>/swmh/{train,val,test}.csv, columns text and label. $HF_ENDPOINT
(or `endpoint=`) points it at a mirror. The token goes to the Hub only: no message here contains it.

The repository's file names are not known without access, so the splits are recognised by name (a CSV
called train, val/validation/valid/dev or test, in any folder); anything else is refused with what was
found and how to place the files by hand.

A Hub (or a mirror) is as hostile as any server: every split is size-capped (the listing's size before the
download, the file's after it), read in full with the diagnosis task's own strict CSV reader (UTF-8, the
field limit, the columns) before anything is installed, and the splits are installed all or none, through
trustmh's writer: a pull that fails half-way never leaves a task running on part of the data."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path, PurePosixPath

from ..errors import UserError
from .manifest import DATASETS

REPO = "AIMH/SWMH"
SPLIT_NAMES = {"train": "train", "val": "val", "validation": "val", "valid": "val", "dev": "val", "test": "test"}
COLUMNS = ("text", "label")
# SWMH's splits are a few tens of MB; a hub offering more per file is not serving SWMH.
MAX_SPLIT_BYTES = 200 << 20


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


def _check_size(split: str, size) -> None:
    if isinstance(size, int) and size > MAX_SPLIT_BYTES:
        raise UserError(f"{REPO} {split}: {size} bytes, more than the {MAX_SPLIT_BYTES >> 20} MiB a split of SWMH can "
                        f"be; refusing it (nothing was installed)")


def _validated(split: str, src: Path) -> int:
    """The split's number of rows, once it is known to be what the diagnosis task can read: at most
    MAX_SPLIT_BYTES, UTF-8, a CSV with text and label columns and fields under the CSV field limit."""
    from .loaders import read_csv
    _check_size(split, src.stat().st_size)  # the listing may have lied
    try:
        rows = read_csv(src, list(COLUMNS), text=None)
    except UserError as e:
        problem = str(e).split(": ", 1)[-1] if str(e).startswith(str(src)) else str(e)
        raise UserError(f"{REPO} {split}.csv: {problem} (nothing was installed)") from None
    if not rows:
        raise UserError(f"{REPO} {split}.csv: no rows (nothing was installed)")
    return len(rows)


def _install_all(staged: dict[str, Path], folder: Path) -> None:
    """Every split or none: each is copied to its own temporary file first (the writer), and only when all
    are written are they renamed into place, one after the other."""
    from ..files import atomic_open
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        for split, src in sorted(staged.items()):
            out = stack.enter_context(atomic_open(folder / f"{split}.csv", binary=True))
            with src.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    out.write(chunk)
    # leaving the stack renamed them; an error inside it removed every temporary file and renamed none


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
        files = [f for f in tree if isinstance(f, RepoFile)]
        picks = pick_splits([f.path for f in files])
        sizes = {f.path: f.size for f in files}
        for split, path in picks.items():
            _check_size(split, sizes.get(path))  # before a byte is downloaded
        rows, staged = {}, {}
        with tempfile.TemporaryDirectory(prefix="trustmh-swmh-") as cache:
            for split, path in sorted(picks.items()):
                local = hf_hub_download(REPO, path, repo_type="dataset", revision=revision, token=token,
                                        endpoint=endpoint, cache_dir=cache)
                staged[split] = Path(local)
                rows[split] = _validated(split, staged[split])
            _install_all(staged, Path(data_dir) / "swmh")
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
