"""NLTK's Punkt model for English (`punkt_tab`): the sentence splitter the ESConv reference metrics'
tokeniser uses, as the original's Robustness/ESConv/src/metrics.py does (`nltk.word_tokenize`, which
splits sentences with it; the original downloads it on first use). trustmh never downloads at run time.

`trustmh data pull punkt` installs it into the data dir (`nltk_data/tokenizers/punkt_tab/english/`):
from NLTK's own downloader (its index's checksum checks the package), or from a local copy with `--from`
(the punkt_tab zip as NLTK ships it, its folder, the `english` folder, or an NLTK data folder). A copy is
data, read as such: the four text files of the model only, each capped in size, parsed as Punkt's tab
format and written through trustmh's one writer. At run time the model is looked for in
`$TRUSTMH_PUNKT` (a folder, as for `--from`), the run's data dir, the default data dir, then NLTK's own
search path (`$NLTK_DATA`, `~/nltk_data`, ...)."""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

from ..errors import UserError

FILES = ("abbrev_types.txt", "collocations.tab", "sent_starters.txt", "ortho_context.tab")
INSTALLED = Path("nltk_data/tokenizers/punkt_tab/english")
MAX_BYTES = 8 << 20  # a file of the English model is ~0.2 MiB
ENV = "TRUSTMH_PUNKT"
# Where a copy may hold the English model's files, from the folder given.
_LAYOUTS = (Path("."), Path("english"), Path("punkt_tab/english"), Path("tokenizers/punkt_tab/english"))


# nltk's package imports every sub-package, and some try scipy.stats and sklearn for features trustmh never
# uses (collocation statistics, classifiers), each falling back when absent: ~90 of nltk's ~120 MiB.
# scipy is refused whole where it is not loaded yet: refusing scipy.stats alone would not keep nltk from
# loading scipy.stats through scipy (~1 s and ~70 MiB).
_OPTIONAL_OF_NLTK = ("scipy", "scipy.stats", "sklearn")


class _RefusedToOneThread:
    """A finder that makes an import of `names` (and their submodules) fail in one thread only: nltk is
    imported in a run's warm-up thread while the event loop's thread goes on, and may import what it likes.
    (Hiding them as None in sys.modules, as before, hid them from every thread.)"""

    def __init__(self, names: list[str]):
        self.names, self.thread = tuple(names), threading.get_ident()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if threading.get_ident() == self.thread and any(name == n or name.startswith(n + ".") for n in self.names):
            raise ImportError(f"{name} is not imported for nltk (trustmh uses no part of nltk that needs it)")
        return None


_IMPORTING = threading.Lock()  # one thread imports nltk; another that needs it waits for the whole package


def import_nltk(wait: bool = True) -> bool:
    """Import nltk with scipy.stats and sklearn refused to it, each unless loaded already (then refusing it
    saves nothing). Tokenisation, BLEU's n-gram counts and Punkt's data path use neither, so the values are
    the same; only nltk's own uses of them (its Fisher test, its scikit-learn classifier wrapper) are left
    without them. Other threads import as usual meanwhile; one that calls this waits until nltk is
    imported whole (two threads importing one package's modules at once can deadlock on their locks), or
    with `wait` False is told False at once (work that can be left for later: a run's `Method.ahead`)."""
    if not _IMPORTING.acquire(blocking=wait):
        return False
    try:
        if "nltk" in sys.modules:
            return True
        refused = _RefusedToOneThread([name for name in _OPTIONAL_OF_NLTK if name not in sys.modules])
        sys.meta_path.insert(0, refused)
        try:
            import nltk  # noqa: F401
        except ImportError:  # a release of nltk that needs them after all: import it as it is
            sys.meta_path.remove(refused)
            import nltk  # noqa: F401,F811
        finally:
            if refused in sys.meta_path:
                sys.meta_path.remove(refused)
        return True
    finally:
        _IMPORTING.release()


def find(data_root: Path | None = None) -> Path | None:
    """The folder holding the English Punkt model to use, or None (the untrained splitter is used then)."""
    from .fetch import default_data_dir
    env = os.environ.get(ENV)
    if env:
        folder = _english_dir(Path(env).expanduser())
        if folder is None:
            raise UserError(f"${ENV}={env}: no Punkt English model there (the files {', '.join(FILES)})")
        return folder
    for root in dict.fromkeys(r for r in (data_root, default_data_dir()) if r is not None):
        if _complete(root / INSTALLED):
            return root / INSTALLED
    import_nltk()  # its search path is nltk.data's, which imports the whole package
    try:
        from nltk.data import find as nltk_find
        found = Path(nltk_find("tokenizers/punkt_tab/english/"))
    except (LookupError, OSError, ValueError):  # NLTK's own search path holds none (or is a zip we skip)
        return None
    return found if _complete(found) else None


def fingerprint(folder: Path) -> str:
    """sha256 over the model's four files (name and content), for results.json to say which model it was."""
    h = hashlib.sha256()
    for name in FILES:
        h.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    return h.hexdigest()


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() and not (folder / name).is_symlink() for name in FILES)


def _english_dir(root: Path) -> Path | None:
    return next((root / rel for rel in _LAYOUTS if _complete(root / rel)), None)


def _from_zip(path: Path) -> dict[str, bytes]:
    """The four files of the English model from a punkt_tab zip (members `*/english/<file>`), each read
    with its size capped (a member's declared size is not trusted: reading stops past the cap)."""
    try:
        with zipfile.ZipFile(path) as z:
            out = {}
            for name in FILES:
                member = next((i for i in z.infolist() if i.filename.endswith(f"english/{name}")), None)
                if member is None:
                    raise UserError(f"{path}: no english/{name} in the zip (is it NLTK's punkt_tab.zip?)")
                with z.open(member) as fh:
                    out[name] = fh.read(MAX_BYTES + 1)
            return out
    except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError) as e:
        raise UserError(f"{path}: not a readable zip ({e})") from None


def _from_dir(path: Path) -> dict[str, bytes]:
    folder = _english_dir(path)
    if folder is None:
        raise UserError(f"{path}: no Punkt English model (the files {', '.join(FILES)}) in it, in english/, "
                        f"punkt_tab/english/ or tokenizers/punkt_tab/english/")
    out = {}
    for name in FILES:
        with (folder / name).open("rb") as fh:
            out[name] = fh.read(MAX_BYTES + 1)
    return out


def read_copy(source: Path) -> dict[str, bytes]:
    """The model's files from a local copy, checked: regular files, within the size cap, UTF-8 text in
    Punkt's tab format (ortho_context.tab: a token and an integer a line; collocations.tab: two tokens)."""
    if source.is_symlink():
        raise UserError(f"{source}: a symbolic link; give the file or folder itself")
    if source.is_file():
        files = _from_zip(source)
    elif source.is_dir():
        files = _from_dir(source)
    else:
        raise UserError(f"{source}: not found")
    for name, raw in files.items():
        if len(raw) > MAX_BYTES:
            raise UserError(f"{source}: {name} is larger than {MAX_BYTES >> 20} MiB; not a Punkt model")
        try:
            lines = raw.decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise UserError(f"{source}: {name} is not UTF-8 text (byte {e.start})") from None
        for lineno, line in enumerate(lines, 1):
            cells = line.split("\t")
            if name.endswith(".tab") and (len(cells) != 2 or (name == "ortho_context.tab" and not cells[1].isdigit())):
                raise UserError(f"{source}:{name}:{lineno}: expected "
                                f"{'a token, a tab and an integer' if name == 'ortho_context.tab' else 'two tokens'}")
    return files


def install(files: dict[str, bytes], data_dir: Path) -> Path:
    """Write the model's files into the data dir through the one writer; returns their folder."""
    from ..files import atomic_write  # at call time: the engine package imports the data package
    folder = data_dir / INSTALLED
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        atomic_write(folder / name, files[name])
    return folder


def pull_punkt(data_dir: Path, *, from_path: Path | None = None, url_base: str | None = None) -> Path:
    """Install the English Punkt model into `data_dir`: from a local copy, or through NLTK's downloader
    (NLTK's index at `url_base`/index.xml, default NLTK's own; its checksum checks the package) into a
    temporary folder, whose zip is then read as a local copy is."""
    if from_path is not None:
        return install(read_copy(from_path), data_dir)
    from nltk.downloader import Downloader
    index = f"{url_base.rstrip('/')}/index.xml" if url_base else None
    with tempfile.TemporaryDirectory(prefix="trustmh-punkt-") as tmp:
        errors = io.StringIO()
        try:
            ok = Downloader(server_index_url=index).download("punkt_tab", download_dir=tmp, quiet=True,
                                                             raise_on_error=True, print_error_to=errors)
        except Exception as e:  # noqa: BLE001 - the downloader raises what its network and index raise
            raise UserError(f"could not download punkt_tab with NLTK's downloader ({type(e).__name__}: "
                            f"{str(e)[:200]}); get it elsewhere and use `trustmh data pull punkt --from PATH`") from None
        package = Path(tmp) / "tokenizers" / "punkt_tab.zip"
        if not ok or not package.is_file():
            raise UserError(f"NLTK's downloader did not fetch punkt_tab ({errors.getvalue().strip()[:200] or 'no reason given'})")
        return install(read_copy(package), data_dir)
