"""`trustmh data pull` and `trustmh data check`: get the upstream files into the data dir and verify them.

A file only ever appears under its final name after its size and sha256 matched the manifest: it is
written through trustmh's one writer (files.py: a temp file of its own beside it, renamed into place,
atomic on one filesystem; a link or FIFO at either name is never followed).

No source is trusted with the disk: a download, a `--from` file or a zip member stops at the size the
manifest gives (so a mirror sending endless bytes, or a zip bomb, costs at most one chunk more), and a
whole upstream zip, whose size the manifest does not give, stops at _MAX_ZIP.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

import platformdirs
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)

from trustmh.data.loaders import file_sha256
from trustmh.data.manifest import DATASETS, DataFile, Dataset
from trustmh.errors import UserError

if TYPE_CHECKING:
    import httpx

_CHUNK = 1 << 20
_METHODS_PREFIX = "methods/"  # where the method files sit in the data-dir layout (methods.as_dataset)
_TIMEOUT = {"timeout": 60.0, "connect": 15.0}  # httpx.Timeout's; httpx is imported when a pull downloads
# The upstream zips are ~1-5 MB; a source sending more than this for one is not sending that zip.
_MAX_ZIP = 256 << 20
# Bytes as they are stored: a compressed transfer would be decompressed by httpx without any limit.
_HEADERS = {"Accept-Encoding": "identity"}


class _TooLarge(Exception):
    """A source holds more bytes than the manifest allows for it."""


def default_data_dir() -> Path:
    """The data dir when no --data-dir is given: $TRUSTMH_DATA_DIR, else the user cache dir."""
    env = os.environ.get("TRUSTMH_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir("trustmh")) / "data"


@dataclass
class FileStatus:
    path: str
    state: Literal["present", "missing", "corrupt"]
    detail: str = ""


@dataclass
class DatasetStatus:
    dataset: Dataset
    state: Literal["present", "missing", "partial", "corrupt", "user-supplied", "not-supplied"]
    files: list[FileStatus]
    how_to_get: str


# ---------------------------------------------------------------------------------------------- check


def _file_status(data_dir: Path, f: DataFile, verify_hash: bool, at: Path | None = None) -> FileStatus:
    p = at or data_dir / f.path
    if not p.is_file():
        return FileStatus(f.path, "missing")
    size = p.stat().st_size
    if size != f.size:
        return FileStatus(f.path, "corrupt", f"size {size}, expected {f.size}")
    if verify_hash and file_sha256(p) != f.sha256:
        return FileStatus(f.path, "corrupt", "sha256 does not match the manifest")
    return FileStatus(f.path, "present")


def _how_to_get(d: Dataset) -> str:
    return d.how_to_get or f"run `trustmh data pull {d.name}` (or `--from DIR` with a local copy)"


def check(
    data_dir: Path, *, verify_hash: bool = True, manifest: dict[str, Dataset] | None = None,
    methods_root: Path | None = None,
) -> list[DatasetStatus]:
    """Status of every dataset in `data_dir`. Without `verify_hash` only sizes are compared (fast).
    `methods_root`: where the method files are read from when not `<data dir>/methods` (as `run` reads
    them: --methods-dir, $TRUSTMH_METHODS_DIR)."""
    out = []
    for d in (manifest or DATASETS).values():
        if d.gated:
            files = [
                FileStatus(pattern, "present" if any(p.is_file() for p in data_dir.glob(pattern)) else "missing")
                for pattern in d.user_files
            ]
            state = "user-supplied" if all(f.state == "present" for f in files) else "not-supplied"
        else:
            files = [_file_status(data_dir, f, verify_hash, _checked_at(f.path, methods_root)) for f in d.files]
            states = {f.state for f in files}
            if "corrupt" in states:
                state = "corrupt"
            elif states == {"present"}:
                state = "present"
            elif states == {"missing"}:
                state = "missing"
            else:
                state = "partial"
        out.append(DatasetStatus(d, state, files, _how_to_get(d)))
    return out


def _checked_at(path: str, methods_root: Path | None) -> Path | None:
    if methods_root is not None and path.startswith(_METHODS_PREFIX):
        return methods_root / path[len(_METHODS_PREFIX):]
    return None


# ----------------------------------------------------------------------------------------------- pull


def _select(manifest: dict[str, Dataset], names: list[str] | None) -> list[Dataset]:
    if names is None:  # everything that can be downloaded; gated sets are the user's to place
        return [d for d in manifest.values() if not d.gated and not d.on_request]
    chosen = []
    for name in dict.fromkeys(names):  # a name given twice is pulled once
        if name not in manifest:
            # a part of a name ("crisis", "elephant") or a typo ("esconvv") should both find it
            typed = name.lower()
            close = [n for n in manifest if typed in n]
            close += difflib.get_close_matches(typed, list(manifest), n=3, cutoff=0.55)
            close = list(dict.fromkeys(close))[:3]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UserError(f"unknown dataset '{name}'{hint}; valid names: {', '.join(manifest)}")
        d = manifest[name]
        if d.gated:
            raise UserError(f"dataset '{name}' cannot be downloaded by trustmh: {d.how_to_get}")
        chosen.append(d)
    return chosen


def _network_error(url: str, problem: str) -> UserError:
    return UserError(
        f"download failed: {url}: {problem}; check the network, or import a local copy with "
        f"`trustmh data pull --from DIR`"
    )


class _Fetcher:
    """Byte sources for one pull: a local copy, a mirror, or the pinned upstream URLs (zips fetched once)."""

    def __init__(self, stack: contextlib.ExitStack, bar: Progress, data_dir: Path,
                 from_dir: tuple[Path | None, Path | None] | None, url_base: str | None):
        self.stack, self.bar, self.data_dir = stack, bar, data_dir
        self.from_dir, self.url_base = from_dir, url_base  # from_dir: copy_roots() of a local copy
        self._client: httpx.Client | None = None
        self._zips: dict[str, Path] = {}
        self._zip_dir: Path | None = None

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            import httpx  # here: a run reads default_data_dir from this module, and httpx is ~0.1-0.2 s to import
            self._client = self.stack.enter_context(httpx.Client(timeout=httpx.Timeout(**_TIMEOUT),
                                                                 follow_redirects=True, headers=_HEADERS))
        return self._client

    def chunks(self, f: DataFile, task: TaskID) -> Iterator[bytes]:
        """The bytes of `f`, advancing `task`. Raises UserError on network failure, KeyError/BadZipFile
        when a zip lacks the member or is not a zip."""
        if self.from_dir is not None:
            yield from self._read_local(copy_path(self.from_dir, f.path), f.size, task)
        elif self.url_base is not None:
            yield from self._download(f"{self.url_base.rstrip('/')}/{quote(f.path)}", f.size, task)
        elif f.zip_member is not None:
            with zipfile.ZipFile(self._zip(f.url)) as zf:
                declared = zf.getinfo(f.zip_member).file_size
                if declared != f.size:  # checked before a byte is extracted: a 2 MB zip can hold 2 GiB
                    raise _TooLarge(f"{f.zip_member} in {f.url} is {declared} bytes, the manifest says {f.size}")
                with zf.open(f.zip_member) as member:
                    while chunk := member.read(_CHUNK):
                        self.bar.advance(task, len(chunk))
                        yield chunk
        else:
            yield from self._download(f.url, f.size, task)

    def _read_local(self, src: Path, limit: int, task: TaskID) -> Iterator[bytes]:
        size = src.stat().st_size
        if size > limit:
            raise _TooLarge(f"{src} is {size} bytes, the manifest says {limit}")
        with src.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                self.bar.advance(task, len(chunk))
                yield chunk

    def _download(self, url: str, limit: int, task: TaskID) -> Iterator[bytes]:
        """The bytes at `url`; _TooLarge once they pass `limit` (the caller's size check stops the file
        itself; this stops a source announcing, or sending, more than it may)."""
        import httpx
        try:
            with self.client.stream("GET", url) as resp:
                if resp.status_code != 200:
                    raise _network_error(url, f"HTTP {resp.status_code}")
                length = resp.headers.get("content-length", "")
                if length.isdigit() and int(length) > limit:
                    raise _TooLarge(f"{url} announces {int(length)} bytes, the manifest says {limit}")
                got = 0
                # raw: as stored; we asked for no Content-Encoding, and bytes sent compressed anyway fail
                # the sha256 check instead of being inflated without a limit
                for chunk in resp.iter_raw(_CHUNK):
                    got += len(chunk)
                    if got > limit:
                        raise _TooLarge(f"{url} sent more than the manifest's {limit} bytes")
                    self.bar.advance(task, len(chunk))
                    yield chunk
        except httpx.HTTPError as exc:
            raise _network_error(url, str(exc).replace("\n", " ") or type(exc).__name__) from exc

    def _zip(self, url: str) -> Path:
        # Several manifest files live in one upstream zip: download it once per pull, into the data dir
        # (same disk as the final files, removed when the pull ends).
        if url not in self._zips:
            if self._zip_dir is None:
                self._zip_dir = Path(self.stack.enter_context(
                    tempfile.TemporaryDirectory(prefix=".trustmh-zips-", dir=self.data_dir)))
            path = self._zip_dir / f"{len(self._zips)}.zip"
            task = self.bar.add_task(url.rsplit("/", 1)[-1], total=None)
            try:
                with path.open("wb") as fh:
                    for chunk in self._download(url, _MAX_ZIP, task):
                        fh.write(chunk)
            finally:
                self.bar.remove_task(task)
            self._zips[url] = path
        return self._zips[url]


class _Rejected(Exception):
    """A download that does not match the manifest: the writer drops its temp file, the target stays."""


def _install(dest: Path, f: DataFile, chunks: Iterable[bytes]) -> FileStatus:
    """Write `chunks` through trustmh's one writer (a temp file of its own beside `dest`, never a link or a
    FIFO there); it replaces `dest` only if size and sha256 match."""
    from ..files import atomic_open  # at call time: the engine package imports this module
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_open(dest, binary=True) as out:
            h, size = hashlib.sha256(), 0
            for chunk in chunks:
                size += len(chunk)
                if size > f.size:  # stop the source now, not after it has filled the disk
                    raise _Rejected(f"more than the manifest's {f.size} bytes; stopped")
                out.write(chunk)
                h.update(chunk)
            if size != f.size:
                raise _Rejected(f"got {size} bytes, expected {f.size}")
            if h.hexdigest() != f.sha256:
                raise _Rejected("sha256 does not match the manifest")
    except _Rejected as e:
        return FileStatus(f.path, "corrupt", str(e))
    return FileStatus(f.path, "present", "fetched")


def _has_any(root: Path, paths: Iterable[str]) -> bool:
    return any((root / p).is_file() for p in paths)


def copy_roots(from_dir: Path, manifest: dict[str, Dataset] | None = None) -> tuple[Path | None, Path | None]:
    """Where a local copy keeps the data and the method files: (data root, methods root), None where it
    holds none. Three layouts are read: the data dir's own (data files at the top, method files under
    `methods/`), a folder holding `data/upstream/` (and `data/external/`) and `methods/` (as ../shared
    is), and a methods folder
    itself (`<owner>+<repo>/...`); the upstream folder also finds the `methods/` beside its `data/`."""
    datasets = (manifest or DATASETS).values()
    data_paths = [f.path for d in datasets for f in d.files if not f.path.startswith(_METHODS_PREFIX)]
    method_paths = [f.path[len(_METHODS_PREFIX):] for d in datasets for f in d.files
                    if f.path.startswith(_METHODS_PREFIX)]
    data_root = next((r for r in (from_dir, from_dir / "data" / "upstream") if _has_any(r, data_paths)), None)
    candidates = [from_dir / "methods", from_dir]
    if from_dir.name == "upstream" and from_dir.parent.name == "data":
        candidates.append(from_dir.parent.parent / "methods")
    methods_root = next((r for r in candidates if _has_any(r, method_paths)), None)
    return data_root, methods_root


def copy_path(roots: tuple[Path | None, Path | None], path: str) -> Path | None:
    """The file of a local copy that holds manifest `path` (None: the copy holds no such part). In
    ../shared's layout what lies beyond the paper is staged apart, under data/external/: a dataset at
    data/external/<path>, and its method code at data/external/<repo, lower-cased>/method/ (VERA-MH's)."""
    data_root, methods_root = roots
    if path.startswith(_METHODS_PREFIX):
        if methods_root is None:
            return None
        own = methods_root / path[len(_METHODS_PREFIX):]
        owner_repo, _, rest = path[len(_METHODS_PREFIX):].partition("/")
        apart = _external(roots)
        if not own.is_file() and apart is not None and "+" in owner_repo and rest:
            staged = apart / owner_repo.split("+", 1)[1].lower() / "method" / rest
            if staged.is_file():
                return staged
        return own
    if data_root is None:
        return None
    own = data_root / path
    apart = _external(roots)
    if not own.is_file() and apart is not None and (apart / path).is_file():
        return apart / path
    return own


def _external(roots: tuple[Path | None, Path | None]) -> Path | None:
    """../shared's data/external/ when the copy is laid out as ../shared is (data/upstream/, methods/)."""
    data_root, methods_root = roots
    for base in (data_root.parent if data_root is not None and data_root.name == "upstream" else None,
                 methods_root.parent / "data" if methods_root is not None else None):
        if base is not None and base.name == "data" and (base / "external").is_dir():
            return base / "external"
    return None


def pull(
    data_dir: Path,
    *,
    datasets: list[str] | None = None,
    url_base: str | None = None,
    from_dir: Path | None = None,
    progress: bool = True,
    force: bool = False,
    manifest: dict[str, Dataset] | None = None,
) -> list[FileStatus]:
    """Make the chosen datasets (default: all downloadable ones) present and verified in `data_dir`.

    Sources, first that applies: `from_dir` (a local copy, in any layout `copy_roots` reads; with no
    `datasets` named, what it lacks is returned as "missing", not raised), `url_base` or
    $TRUSTMH_DATA_URL (a mirror in that layout), else each file's pinned upstream URL. Files already
    present with the right sha256 are skipped unless `force`. Files that fail verification are not
    installed; after everything else is pulled, a UserError lists them. `manifest` replaces the built-in
    one (tests).
    """
    chosen = _select(manifest or DATASETS, datasets)
    roots = None
    if from_dir is not None:
        from_dir = Path(from_dir).expanduser()
        if not from_dir.is_dir():
            raise UserError(f"--from {from_dir}: no such directory")
        roots = copy_roots(from_dir, manifest)
        if roots == (None, None) and datasets is None:  # named datasets: each file says it is not there
            raise UserError(f"--from {from_dir}: holds neither trustmh's data layout (e.g. "
                            f"trustmh/ethics/EthicMH.csv), nor data/upstream/, nor the authors' method files "
                            f"(<owner>+<repo>/..., or methods/ holding them)")
    elif url_base is None:
        url_base = os.environ.get("TRUSTMH_DATA_URL") or None
    data_dir = Path(data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)

    results: list[FileStatus] = []
    todo: list[DataFile] = []
    for f in (f for d in chosen for f in d.files):
        if not force and _file_status(data_dir, f, verify_hash=True).state == "present":
            results.append(FileStatus(f.path, "present", "already present"))
        else:
            todo.append(f)

    failures: list[FileStatus] = []
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(Progress(*columns, disable=not progress, transient=True))
        total = bar.add_task(f"{len(todo)} files", total=sum(f.size for f in todo))
        fetcher = _Fetcher(stack, bar, data_dir, roots, url_base)
        for f in todo:
            if roots is not None and not ((src := copy_path(roots, f.path)) and src.is_file()):
                # Importing everything a copy holds (no names given), a file it lacks is reported as
                # missing, not a failure: `data check` and `run` say what it leaves out.
                status = FileStatus(f.path, "missing", f"not in {from_dir}")
                (failures if datasets is not None else results).append(status)
                continue
            task = bar.add_task(f.path, total=f.size)
            chunks = fetcher.chunks(f, task)
            try:
                status = _install(data_dir / f.path, f, chunks)
            except (KeyError, zipfile.BadZipFile) as exc:
                status = FileStatus(f.path, "corrupt", f"cannot extract {f.zip_member} from {f.url}: {exc}")
            except _TooLarge as exc:
                status = FileStatus(f.path, "corrupt", f"{exc}; not installed")
            finally:
                chunks.close()  # a source stopped early (too large) is closed now: its connection too
                bar.remove_task(task)
            bar.advance(total, f.size)
            (results if status.state == "present" else failures).append(status)

    if failures:
        raise UserError(f"{len(failures)} file(s) not installed: {_short_list(failures)}")
    return results


def _short_list(failures: list[FileStatus], shown: int = 3) -> str:
    """The first few failures, then how many more: one readable line however many files failed."""
    listed = "; ".join(f"{s.path} ({s.detail})" for s in failures[:shown])
    return listed + (f"; and {len(failures) - shown} more" if len(failures) > shown else "")
