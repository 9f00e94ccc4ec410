"""`trustmh data pull/check` against a loopback HTTP mirror of ../shared/data/upstream (no network)."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import zipfile
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import LoopbackHTTP, methods_with_vera

from trustmh.data.fetch import check, default_data_dir, pull
from trustmh.data.manifest import DATASETS, DataFile, Dataset, dataset_for_path
from trustmh.errors import UserError

UPSTREAM = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "upstream"
# MentalAlign-70k is staged apart (../shared/data/external/mentalalign) and pulled to <data dir>/mentalalign.
MENTALALIGN = UPSTREAM.parent / "external" / "mentalalign"
# VERA-MH too (../shared/data/external/vera-mh): data/, conversations/ and LICENSE pulled to <data dir>/vera-mh,
# its code (method/) to <data dir>/methods/SpringCare+VERA-MH.
VERA = UPSTREAM.parent / "external" / "vera-mh"
needs_upstream = pytest.mark.skipif(not (UPSTREAM.is_dir() and MENTALALIGN.is_dir() and VERA.is_dir()),
                                    reason=f"no staged upstream data at {UPSTREAM}, {MENTALALIGN} and {VERA}")

METHODS = UPSTREAM.parent.parent / "methods"
DOWNLOADABLE = [d for d in DATASETS.values() if not d.gated and not d.on_request]  # what a plain pull fetches
ALL_FILES = [f for d in DOWNLOADABLE for f in d.files]
# The data proper; the authors' method files ("methods") are staged apart, in ../shared/methods.
DATA_FILES = [f for d in DOWNLOADABLE if d.name != "methods" for f in d.files]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Mirror(LoopbackHTTP):
    """A static file server on 127.0.0.1 that records every requested path; `overrides` maps a
    path to a body served instead of the file (to simulate a bad mirror)."""

    def __init__(self, root: Path):
        self.hits: list[str] = []
        self.overrides: dict[str, bytes] = {}
        mirror = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):
                path = unquote(urlsplit(self.path).path).lstrip("/")
                mirror.hits.append(path)
                if path in mirror.overrides:
                    body = mirror.overrides[path]
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    super().do_GET()

        super().__init__(Handler)


@pytest.fixture(autouse=True)
def _no_env_mirror(monkeypatch):
    monkeypatch.delenv("TRUSTMH_DATA_URL", raising=False)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """A mirror in the data-dir layout: the staged data, and the staged method files under methods/."""
    root = tmp_path_factory.mktemp("mirror")
    for entry in UPSTREAM.iterdir():
        (root / entry.name).symlink_to(entry)
    methods_with_vera(root)
    (root / "mentalalign").symlink_to(MENTALALIGN)
    (root / "vera-mh").symlink_to(VERA)
    m = Mirror(root)
    yield m
    m.close()


@pytest.fixture(scope="module")
def pulled(mirror, tmp_path_factory):
    """One full pull through the mirror, shared by the tests that only read it."""
    data_dir = tmp_path_factory.mktemp("data")
    pull(data_dir, url_base=mirror.url, progress=False)
    return data_dir


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".part") or p.name.startswith(".trustmh-zips-")]


# --------------------------------------------------------------------------------------- the manifest


@pytest.mark.needs_methods
@needs_upstream
def test_manifest_matches_every_staged_file():
    staged = {p.relative_to(UPSTREAM).as_posix(): p for p in UPSTREAM.rglob("*") if p.is_file()}
    staged.pop("MANIFEST.md")
    staged.update({f"mentalalign/{p.relative_to(MENTALALIGN).as_posix()}": p for p in MENTALALIGN.rglob("*")
                   if p.is_file() and p.name != "MANIFEST.md"})
    staged.update({f"methods/{p.relative_to(METHODS).as_posix()}": p for p in METHODS.rglob("*")
                   if p.is_file() and p.name not in ("MANIFEST.json", "MANIFEST.md")})
    # VERA-MH: its data, transcripts and licence, and of its code the six files crisis.conversation reads
    staged.update({f"vera-mh/{p.relative_to(VERA).as_posix()}": p for p in VERA.rglob("*")
                   if p.is_file() and p.name not in ("MANIFEST.md", "PROTOCOL.md") and "method" not in p.relative_to(VERA).parts})
    from trustmh.data.methods import method_files
    staged.update({f"methods/{f.local}": VERA / "method" / f.path for f in method_files().values()
                   if f.repo == "SpringCare/VERA-MH"})
    listed = [f for d in DATASETS.values() if not d.gated for f in d.files]  # on request too
    in_manifest = {f.path: f for f in listed}
    assert len(in_manifest) == len(listed), "a path is listed twice"
    assert sorted(in_manifest) == sorted(staged)
    for rel, p in staged.items():
        f = in_manifest[rel]
        assert (f.size, f.sha256) == (p.stat().st_size, sha256(p)), rel


def test_manifest_urls_are_pinned_to_the_dataset_source():
    for d in DOWNLOADABLE:
        if d.name == "methods":  # eight repositories: each file's URL is checked against methods.json
            from trustmh.data.methods import method_files
            for f, m in zip(d.files, method_files().values()):
                assert f.url.startswith(f"https://raw.githubusercontent.com/{m.repo}/{m.commit}/"), f.path
            continue
        repo, commit = d.source.split("@")
        assert re.fullmatch(r"[0-9a-f]{40}", commit), d.name
        for f in d.files:
            assert f.url.startswith(f"https://raw.githubusercontent.com/{repo}/{commit}/"), f.path
            assert " " not in f.url and "&" not in f.url, f.url  # quoted
            assert (f.zip_member is not None) == f.url.endswith(".zip"), f.path
    for d in DATASETS.values():
        assert d.gated == (not d.files) and (not d.gated or (d.how_to_get and d.user_files)), d.name


def test_dataset_for_path():
    assert dataset_for_path("cpsycoune/Love&Marriage/3.json").name == "cpsycoune"
    assert dataset_for_path("trustmh/privacy/tier_1.txt").name == "trustmh-privacy"
    assert dataset_for_path("confaide/tier_1.txt").name == "confaide"
    assert dataset_for_path("trustmh/ethics/EthicMH.csv").name == "ethicmh"
    assert dataset_for_path("swmh/test.csv").name == "swmh"
    assert dataset_for_path("d4/anything.json").name == "d4"
    assert dataset_for_path("elephant/PAS.csv").name == "pas"
    assert dataset_for_path("nowhere/x.txt") is None


def test_default_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TRUSTMH_DATA_DIR", str(tmp_path / "d"))
    assert default_data_dir() == tmp_path / "d"
    monkeypatch.delenv("TRUSTMH_DATA_DIR")
    assert default_data_dir().name == "data" and "trustmh" in str(default_data_dir())


# ------------------------------------------------------------------------------------- pull and check


@pytest.mark.needs_methods
@needs_upstream
def test_full_pull_verifies_every_file(pulled):
    for f in ALL_FILES:
        assert sha256(pulled / f.path) == f.sha256, f.path
    states = {s.dataset.name: s.state for s in check(pulled)}
    assert all(states[d.name] == "present" for d in DOWNLOADABLE), states
    assert all(states[d.name] == "not-supplied" for d in DATASETS.values() if d.gated), states
    assert not leftovers(pulled)


@pytest.mark.needs_methods
@needs_upstream
def test_a_dataset_on_request_is_pulled_only_when_named(pulled, mirror):
    on_request = [d for d in DATASETS.values() if d.on_request]
    assert [d.name for d in on_request] == ["mentalalign", "vera-mh-conversations"]
    assert not (pulled / "mentalalign").exists()  # a plain pull left it out: the benchmark does not need it
    assert not (pulled / "vera-mh" / "conversations").exists() and (pulled / "vera-mh/data/rubric.tsv").is_file()
    for d in on_request:
        result = pull(pulled, datasets=[d.name], url_base=mirror.url, progress=False)
        assert len(result) == len(d.files)
        for f in d.files:
            assert sha256(pulled / f.path) == f.sha256, f.path


@pytest.mark.needs_methods
@needs_upstream
def test_second_pull_downloads_nothing(pulled, mirror):
    mirror.hits.clear()
    result = pull(pulled, url_base=mirror.url, progress=False)
    assert mirror.hits == []
    assert len(result) == len(ALL_FILES) and all(s.detail == "already present" for s in result)


@needs_upstream
def test_a_link_planted_at_a_data_file_is_refused_and_its_target_untouched(mirror, tmp_path):
    precious = tmp_path / "thesis.txt"
    precious.write_text("years of work")
    (tmp_path / "data" / "confaide").mkdir(parents=True)
    os.symlink(precious, tmp_path / "data" / "confaide" / "tier_2a.txt")
    with pytest.raises(UserError, match="symbolic link"):
        pull(tmp_path / "data", datasets=["confaide"], url_base=mirror.url, progress=False)
    assert precious.read_text() == "years of work"
    assert not [p for p in (tmp_path / "data" / "confaide").iterdir() if p.name.endswith(".tmp")]


@needs_upstream
def test_corrupt_file_is_reported_and_repaired(mirror, tmp_path):
    pull(tmp_path, datasets=["confaide", "elephant-samples"], url_base=mirror.url, progress=False)
    victim = tmp_path / "confaide" / "tier_2a.txt"
    data = bytearray(victim.read_bytes())
    data[100] ^= 1  # same size, different hash: only the sha256 check can see it
    victim.write_bytes(bytes(data))

    status = {s.dataset.name: s for s in check(tmp_path)}
    assert status["confaide"].state == "corrupt"
    assert [f.path for f in status["confaide"].files if f.state == "corrupt"] == ["confaide/tier_2a.txt"]
    assert status["elephant-samples"].state == "present"
    assert status["esconv"].state == "missing"
    # without hashing the same-size damage is invisible; a size change is not
    assert {s.dataset.name: s.state for s in check(tmp_path, verify_hash=False)}["confaide"] == "present"

    mirror.hits.clear()
    pull(tmp_path, datasets=["confaide"], url_base=mirror.url, progress=False)
    assert mirror.hits == ["confaide/tier_2a.txt"]
    assert {s.dataset.name: s.state for s in check(tmp_path)}["confaide"] == "present"


@needs_upstream
def test_partial_dataset(mirror, tmp_path):
    pull(tmp_path, datasets=["esconv"], url_base=mirror.url, progress=False)
    (tmp_path / "esconv" / "valid.json").unlink()
    assert {s.dataset.name: s.state for s in check(tmp_path)}["esconv"] == "partial"


@needs_upstream
def test_wrong_body_is_never_installed(mirror, tmp_path):
    mirror.overrides["trustmh/PsyHarm.csv"] = b"ID,not the real file\n"
    try:
        with pytest.raises(UserError, match=r"trustmh/PsyHarm\.csv") as err:
            pull(tmp_path, datasets=["trustmh"], url_base=mirror.url, progress=False)
    finally:
        mirror.overrides.clear()
    assert "\n" not in str(err.value)
    assert not (tmp_path / "trustmh" / "PsyHarm.csv").exists()
    # the other files of the set were still pulled, and no temp file is left behind
    assert (tmp_path / "trustmh" / "JailbreakMH.csv").is_file()
    assert not leftovers(tmp_path)


@needs_upstream
def test_force_refetches(mirror, tmp_path):
    pull(tmp_path, datasets=["emobench"], url_base=mirror.url, progress=False)
    mirror.hits.clear()
    pull(tmp_path, datasets=["emobench"], url_base=mirror.url, progress=False, force=True)
    assert mirror.hits == ["emobench/EU.jsonl"]


@needs_upstream
def test_mirror_from_environment(mirror, tmp_path, monkeypatch):
    monkeypatch.setenv("TRUSTMH_DATA_URL", mirror.url + "/")
    mirror.hits.clear()
    pull(tmp_path, datasets=["cpsycoune"], progress=False)
    assert "cpsycoune/Love&Marriage/3.json" in mirror.hits  # quoted on the wire, same path on the server
    assert {s.dataset.name: s.state for s in check(tmp_path)}["cpsycoune"] == "present"


@needs_upstream
def test_import_from_local_copy(tmp_path):
    result = pull(tmp_path, datasets=["cpsycoune", "trustmh-privacy", "ethicmh"], from_dir=UPSTREAM,
                  progress=False)
    assert len(result) == 45 + 7 + 1 and {s.state for s in result} == {"present"}
    states = {s.dataset.name: s.state for s in check(tmp_path)}
    assert states["cpsycoune"] == states["trustmh-privacy"] == states["ethicmh"] == "present"


def test_import_errors(tmp_path):
    with pytest.raises(UserError, match="no such directory"):
        pull(tmp_path / "data", from_dir=tmp_path / "nope", progress=False)
    (tmp_path / "partial-copy").mkdir()
    with pytest.raises(UserError, match=r"usmle-mental/USMLE-mental\.jsonl \(not in "):
        pull(tmp_path / "data", datasets=["usmle-mental"], from_dir=tmp_path / "partial-copy", progress=False)


def test_unknown_and_gated_dataset_names(tmp_path):
    with pytest.raises(UserError, match=r"unknown dataset 'esconvv' \(did you mean esconv\?\); valid names: "):
        pull(tmp_path, datasets=["esconvv"], progress=False)
    with pytest.raises(UserError, match=r"did you mean .*cpsycoune"):
        pull(tmp_path, datasets=["cpsycounE"], progress=False)
    with pytest.raises(UserError, match=r"did you mean llms-mental-health-crisis\?"):
        pull(tmp_path, datasets=["crisis"], progress=False)
    with pytest.raises(UserError, match=r"huggingface\.co/datasets/AIMH/SWMH"):
        pull(tmp_path, datasets=["swmh"], progress=False)


def test_network_failure_names_url_and_suggests_from(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserError, match=rf"127\.0\.0\.1:{port}/emobench/EU\.jsonl.*--from DIR"):
        pull(tmp_path, datasets=["emobench"], url_base=f"http://127.0.0.1:{port}", progress=False)
    assert not (tmp_path / "emobench" / "EU.jsonl").exists() and not leftovers(tmp_path)


def test_user_supplied_sets(tmp_path):
    (tmp_path / "swmh").mkdir()
    for split in ("train", "val"):
        (tmp_path / "swmh" / f"{split}.csv").write_text("text,label\n")
    status = {s.dataset.name: s for s in check(tmp_path)}
    assert status["swmh"].state == "not-supplied"
    assert "huggingface.co/datasets/AIMH/SWMH" in status["swmh"].how_to_get
    (tmp_path / "swmh" / "test.csv").write_text("text,label\n")
    (tmp_path / "d4").mkdir()
    (tmp_path / "d4" / "dialogues.json").write_text("[]")
    status = {s.dataset.name: s.state for s in check(tmp_path)}
    assert status["swmh"] == status["d4"] == "user-supplied"
    assert status["pas"] == status["elephant-full"] == "not-supplied"


# ---------------------------------------------------------------------------------- files inside zips


def test_zip_members_are_extracted_and_verified(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    a, b = b"tier one\\nprompt\n", b"1.5,2.0,3.25"
    with zipfile.ZipFile(served / "bundle.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("privacy/task1/benchmark/a.txt", a)
        zf.writestr("privacy/task1/benchmark/b.txt", b)
        zf.writestr("unrelated/c.txt", b"not wanted")
    server = Mirror(served)
    try:
        url = f"{server.url}/bundle.zip"

        def entry(name, body, member):
            return DataFile(f"zipset/{name}", len(body), hashlib.sha256(body).hexdigest(), url, zip_member=member)

        good = Dataset("zipset", "test", "MIT", "x/y@" + "0" * 40, files=(
            entry("a.txt", a, "privacy/task1/benchmark/a.txt"),
            entry("b.txt", b, "privacy/task1/benchmark/b.txt"),
        ))
        data_dir = tmp_path / "data"
        pull(data_dir, manifest={"zipset": good}, progress=False)
        assert (data_dir / "zipset" / "a.txt").read_bytes() == a
        assert (data_dir / "zipset" / "b.txt").read_bytes() == b
        assert server.hits == ["bundle.zip"]  # one download for both members
        assert not (data_dir / "zipset" / "c.txt").exists() and not leftovers(data_dir)
        assert [s.state for s in check(data_dir, manifest={"zipset": good})] == ["present"]

        # a member whose bytes do not match, and one the zip does not have
        bad = Dataset("zipset", "test", "MIT", "x/y@" + "0" * 40, files=(
            entry("wrong.txt", b"other bytes", "unrelated/c.txt"),
            entry("absent.txt", b"", "privacy/nope.txt"),
        ))
        with pytest.raises(UserError, match=r"2 file\(s\).*zipset/wrong\.txt.*zipset/absent\.txt"):
            pull(data_dir, manifest={"zipset": bad}, progress=False)
        assert not (data_dir / "zipset" / "wrong.txt").exists()
        assert not (data_dir / "zipset" / "absent.txt").exists() and not leftovers(data_dir)
    finally:
        server.close()


# ---------------------------------------------------------------------- sources that send too much (issue 14)

from http.server import BaseHTTPRequestHandler  # noqa: E402

FLOOD = 64 << 20  # what a hostile source offers; a pull must stop long before


class Flood(LoopbackHTTP):
    """Serves FLOOD bytes for any path, without Content-Length (or with a true one), counting what it
    managed to send before the client hung up."""

    def __init__(self, announce: bool = False):
        self.sent = 0
        flood = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection does

            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                if announce:
                    self.send_header("Content-Length", str(FLOOD))
                self.end_headers()
                block = b"x" * 65536
                try:
                    while flood.sent < FLOOD:
                        self.wfile.write(block)
                        flood.sent += len(block)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        super().__init__(Handler)


def small_set(url: str = "http://127.0.0.1:9/x", member: str | None = None) -> dict[str, Dataset]:
    body = b"62 KB in the manifest, in spirit"
    f = DataFile("flood/file.json", len(body), hashlib.sha256(body).hexdigest(), url, zip_member=member)
    return {"flood": Dataset("flood", "test", "MIT", "x/y@" + "0" * 40, files=(f,))}


@pytest.mark.parametrize("announce", [False, True], ids=["endless", "content-length"])
def test_a_download_stops_at_the_manifest_size(tmp_path, announce):
    """A source sending far more than the manifest's size was written out whole before the check
    (a 62 KB file: 6 GB in 25 s). It now stops within a chunk of the size."""
    server = Flood(announce)
    try:
        with pytest.raises(UserError, match=r"flood/file\.json \(.*(?:sent more than the|announces \d+ bytes, the) manifest"):
            pull(tmp_path / "data", manifest=small_set(), url_base=server.url, progress=False)
    finally:
        server.close()
    assert server.sent < 16 << 20, server.sent  # the client hung up early (socket buffers hold a few MB)
    assert not (tmp_path / "data" / "flood" / "file.json").exists() and not leftovers(tmp_path / "data")


def test_a_zip_bomb_member_is_refused_before_extraction(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    with zipfile.ZipFile(served / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("data/file.json", b"\0" * FLOOD)  # ~64 KB compressed
    server = Mirror(served)
    try:
        manifest = small_set(f"{server.url}/bomb.zip", member="data/file.json")
        with pytest.raises(UserError, match=f"data/file.json in .*bomb.zip is {FLOOD} bytes, the manifest says"):
            pull(tmp_path / "data", manifest=manifest, progress=False)
    finally:
        server.close()
    assert not leftovers(tmp_path / "data")


def test_from_refuses_a_file_larger_than_the_manifest_says(tmp_path):
    src = tmp_path / "copy" / "flood"
    src.mkdir(parents=True)
    (src / "file.json").write_bytes(b"y" * (FLOOD // 16))
    with pytest.raises(UserError, match=r"file\.json is 4194304 bytes, the manifest says 32"):
        pull(tmp_path / "data", manifest=small_set(), from_dir=tmp_path / "copy", progress=False)
    assert not leftovers(tmp_path / "data")
