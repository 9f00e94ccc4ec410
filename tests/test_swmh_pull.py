"""Pulling the gated SWMH set through huggingface_hub from a loopback stand-in for the Hub: the splits land
where the diagnosis task reads them, the token is sent to the Hub and shown nowhere, and a refused token,
an unexpected repository or a malformed file each give one clear line."""

import csv
import hashlib
import io
import json
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote, urlsplit

import pytest
from conftest import LoopbackHTTP

from trustmh.data.swmh import pick_splits, pull_swmh
from trustmh.errors import UserError

TOKEN = "hf_test_token_not_a_real_one"


def csv_text(rows, header=("text", "label")):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


FILES = {
    "README.md": "# SWMH\n",
    "train.csv": csv_text([("I can't sleep, everything feels heavy", "self.depression"),
                           ("my thoughts race all night", "self.Anxiety"),
                           ("just venting, long day", "self.offmychest")]),
    "val.csv": csv_text([("manic for a week then crashed", "self.bipolar"), ("I want it to end", "self.SuicideWatch")]),
    "test.csv": csv_text([("nothing helps anymore", "self.depression"), ("panic at the shop again", "self.Anxiety")]),
}


def as_bytes(content) -> bytes:
    return content if isinstance(content, bytes) else content.encode()


class FakeHub(LoopbackHTTP):
    """The three Hub routes huggingface_hub uses here: the repository tree, and HEAD/GET of a file, which
    need the token (the repository is gated: without it the Hub answers 401 with X-Error-Code GatedRepo)."""

    def __init__(self, files):
        self.files = files
        self.listed_sizes = {}  # path -> the size the listing claims, when it lies
        self.seen = []  # (method, path, authorization header)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.answer(self, body=False)

            def do_GET(self):
                hub.answer(self, body=True)

        super().__init__(Handler)

    def answer(self, h, body):
        path = unquote(urlsplit(h.path).path)
        self.seen.append((h.command, h.path, h.headers.get("Authorization")))
        tree, resolve = "/api/datasets/AIMH/SWMH/tree/main", "/datasets/AIMH/SWMH/resolve/main/"
        if path == tree:
            listing = [{"type": "file", "path": p, "size": self.listed_sizes.get(p, len(as_bytes(t))),
                        "oid": hashlib.sha1(as_bytes(t)).hexdigest()}
                       for p, t in self.files.items()]
            return self.send(h, 200, json.dumps(listing).encode(), body, {"Content-Type": "application/json"})
        if path.startswith(resolve) and path[len(resolve):] in self.files:
            if h.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self.send(h, 401, b"gated", body, {"X-Error-Code": "GatedRepo",
                                                          "X-Error-Message": "Access to dataset AIMH/SWMH is restricted."})
            data = as_bytes(self.files[path[len(resolve):]])
            return self.send(h, 200, data, body, {"X-Repo-Commit": "c" * 40,
                                                  "ETag": f'"{hashlib.sha1(data).hexdigest()}"'})
        return self.send(h, 404, b"not found", body, {"X-Error-Code": "EntryNotFound"})

    @staticmethod
    def send(h, status, data, body, headers):
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)


def test_pull_places_every_split_where_the_task_reads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with FakeHub(FILES) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        rows = pull_swmh(tmp_path / "data")
    assert rows == {"train": 3, "val": 2, "test": 2}
    for split in ("train", "val", "test"):
        assert (tmp_path / "data/swmh" / f"{split}.csv").read_text() == FILES[f"{split}.csv"]
    assert not list((tmp_path / "data/swmh").glob("*.tmp"))
    # The token travelled in the Authorization header of the file requests, never in a URL.
    assert all(TOKEN not in path for _, path, _ in hub.seen)
    assert {auth for method, path, auth in hub.seen if "/resolve/" in path} == {f"Bearer {TOKEN}"}


def test_the_task_reads_what_was_pulled(tmp_path, monkeypatch):
    from trustmh.tasks import DataSource, RunContext
    from trustmh.tasks.reliability import Diagnosis
    with FakeHub(FILES) as hub:
        pull_swmh(tmp_path / "data", token=TOKEN, endpoint=hub.url)
    items = Diagnosis().method(RunContext()).load(DataSource(tmp_path / "data", "data"), RunContext())
    assert [it.target for it in items] == ["depression", "Anxiety"]


def test_refused_token_is_one_line_without_the_token(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with FakeHub(FILES) as hub:
        with pytest.raises(UserError) as e:
            pull_swmh(tmp_path / "data", token="hf_wrong_token", endpoint=hub.url)
    msg = str(e.value)
    assert "refused the download: SWMH is gated" in msg and "HF_TOKEN" in msg
    assert "\n" not in msg and "hf_wrong_token" not in msg
    assert not (tmp_path / "data/swmh").exists()


def test_unexpected_repository_layout_is_refused_with_what_was_found(tmp_path):
    files = {"README.md": "x", "data/train-00000.parquet": "x", "test.csv": FILES["test.csv"]}
    with FakeHub(files) as hub:
        with pytest.raises(UserError) as e:
            pull_swmh(tmp_path / "data", token=TOKEN, endpoint=hub.url)
    msg = str(e.value)
    assert "no train split; no val split" in msg and "data/train-00000.parquet" in msg
    assert "<data-dir>/swmh/test.csv" in msg  # the by-hand instructions from the manifest
    assert not (tmp_path / "data/swmh").exists()


def test_a_file_without_the_columns_is_refused(tmp_path):
    files = dict(FILES, **{"val.csv": csv_text([("x", "y")], header=("post", "subreddit"))})
    with FakeHub(files) as hub:
        with pytest.raises(UserError, match=r"val.csv: missing column\(s\) text, label; header is .*post.*subreddit"):
            pull_swmh(tmp_path / "data", token=TOKEN, endpoint=hub.url)


@pytest.mark.parametrize("paths, expected", [
    (["train.csv", "validation.csv", "test.csv"], {"train": "train.csv", "val": "validation.csv", "test": "test.csv"}),
    (["data/Train.CSV", "data/dev.csv", "data/test.csv", "README.md"],
     {"train": "data/Train.CSV", "val": "data/dev.csv", "test": "data/test.csv"}),
])
def test_pick_splits(paths, expected):
    assert pick_splits(paths) == expected


def test_pick_splits_refuses_two_files_for_one_split():
    with pytest.raises(UserError, match=r"several test files \(a/test.csv, b/test.csv\)"):
        pick_splits(["train.csv", "val.csv", "a/test.csv", "b/test.csv"])


def test_cli_data_pull_swmh(tmp_path, cli):
    hf_home = {"HF_HOME": str(tmp_path / "hf")}  # never a token stored by a real `hf auth login`
    with FakeHub(FILES) as hub:
        # HF_* are read when huggingface_hub is imported: run_cli gives the command a fresh interpreter
        proc = cli("data", "pull", "swmh", "--data-dir", tmp_path / "data", without=("HF_TOKEN",),
                   env_extra={**hf_home, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN})
        assert proc.returncode == 0, proc.stderr
        assert "train 3 rows" in proc.stdout and TOKEN not in proc.stdout + proc.stderr
        assert (tmp_path / "data/swmh/test.csv").read_text() == FILES["test.csv"]
        # Access not granted (no token): one line saying what to do, exit 2, nothing written.
        refused = cli("data", "pull", "swmh", "--data-dir", tmp_path / "other", without=("HF_TOKEN",),
                      env_extra={**hf_home, "HF_ENDPOINT": hub.url})
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "SWMH is gated" in refused.stderr and "HF_TOKEN" in refused.stderr
    assert not (tmp_path / "other/swmh").exists()


def test_manifest_says_how_to_pull_swmh():
    from trustmh.data.manifest import DATASETS
    assert "trustmh data pull swmh" in DATASETS["swmh"].how_to_get


# --- issue 24: a hostile hub -------------------------------------------------------------------------------

def _installed(tmp_path):
    folder = tmp_path / "data/swmh"
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir())} if folder.is_dir() else {}


@pytest.mark.parametrize("lie", [False, True], ids=["listed", "listing-lies"])
def test_a_split_over_the_size_cap_is_never_installed(tmp_path, monkeypatch, lie):
    import trustmh.data.swmh as swmh
    monkeypatch.setattr(swmh, "MAX_SPLIT_BYTES", 1000)
    big = dict(FILES, **{"train.csv": csv_text([("x" * 100, "self.depression")] * 20)})  # ~2 kB
    with FakeHub(big) as hub:
        if lie:
            hub.listed_sizes["train.csv"] = 10
        with pytest.raises(UserError, match="train: .* bytes, more than the 0 MiB a split of SWMH can be"):
            pull_swmh(tmp_path / "data", token=TOKEN, endpoint=hub.url)
    fetched = [path for method, path, _ in hub.seen if method == "GET" and path.endswith("train.csv")]
    assert bool(fetched) == lie  # an honest listing stops it before a byte of it is downloaded
    assert _installed(tmp_path) == {}


@pytest.mark.parametrize("bad,needle", [
    (b"text,label\ncaf\xe9 au lait,self.depression\n", "not valid utf-8 text"),
    (("text,label\n" + "y" * 140_000 + ",self.Anxiety\n").encode(), "field larger than field limit"),
    (b"text,label\n\"left open,self.bipolar\n", "malformed CSV"),
    (b"text,label\n", "no rows"),
], ids=["not-utf8", "field-over-128kB", "quote-left-open", "no-rows"])
def test_a_malformed_split_is_one_line_and_installs_nothing(tmp_path, bad, needle):
    files = dict(FILES)
    with FakeHub(files) as hub:
        pull_swmh(tmp_path / "data", token=TOKEN, endpoint=hub.url)  # a good earlier pull
        before = _installed(tmp_path)
        # The next pull changes every split, but its val split (installed last before) is broken.
        files.update({"train.csv": csv_text([("new train", "self.depression")]),
                      "test.csv": csv_text([("new test", "self.Anxiety")])})
        files["val.csv"] = bad
        with pytest.raises(UserError) as e:
            pull_swmh(tmp_path / "data", token=TOKEN, endpoint=hub.url)
    assert needle in str(e.value) and "val.csv" in str(e.value) and "\n" not in str(e.value)
    assert _installed(tmp_path) == before  # all splits or none: the earlier pull is intact
    assert not list((tmp_path / "data/swmh").glob("*.tmp"))


def test_a_link_at_the_old_temp_name_is_never_followed(tmp_path):
    folder = tmp_path / "data/swmh"
    folder.mkdir(parents=True)
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    for split in ("train", "val", "test"):
        (folder / f"{split}.csv.tmp").symlink_to(precious)
    with FakeHub(FILES) as hub:
        pull_swmh(tmp_path / "data", token=TOKEN, endpoint=hub.url)
    assert precious.read_text() == "mine\n"  # before: overwritten by each split in turn
    assert (folder / "test.csv").read_text() == FILES["test.csv"] and not (folder / "test.csv").is_symlink()
