"""The manifest loader: URLs built from repo + commit + path, and a malformed entry refused.
(tests/test_data_pull.py checks every listed file against the staged upstream copy.)"""

from importlib import resources

import pytest

from trustmh.data import manifest


def test_url_is_derived_from_repo_commit_and_quoted_path():
    entry = {"name": "x", "description": "d", "license": "l", "repo": "own/er", "commit": "c" * 40,
             "files": [{"path": "x/a&b c.json", "size": 3, "sha256": "0" * 64, "src": "data/a&b c.json"},
                       {"path": "x/m.txt", "size": 1, "sha256": "1" * 64, "src": "z.zip", "member": "in/m.txt"}]}
    d = manifest._dataset(entry)
    assert d.source == "own/er@" + "c" * 40
    assert d.files[0].url == "https://raw.githubusercontent.com/own/er/" + "c" * 40 + "/data/a%26b%20c.json"
    assert d.files[0].zip_member is None
    assert d.files[1].url.endswith("/z.zip") and d.files[1].zip_member == "in/m.txt"
    assert not d.gated and d.user_files == ()


def test_gated_entry_keeps_its_source_and_instructions():
    d = manifest._dataset({"name": "g", "description": "d", "license": "l", "source": "https://example.org/g",
                           "gated": True, "how_to_get": "ask", "user_files": ["g/*"]})
    assert (d.source, d.files, d.gated, d.how_to_get, d.user_files) == ("https://example.org/g", (), True, "ask", ("g/*",))


def test_files_without_a_pinned_commit_are_refused():
    with pytest.raises(ValueError, match="dataset x has files but no repo and commit"):
        manifest._dataset({"name": "x", "description": "", "license": "", "source": "somewhere",
                           "files": [{"path": "a", "size": 1, "sha256": "0" * 64, "src": "a"}]})


def test_the_data_file_holds_each_commit_once_per_dataset():
    # The point of the data file: no URL is written out, so a commit cannot drift between files of a set.
    text = resources.files("trustmh.data").joinpath("manifest.toml").read_text(encoding="utf-8")
    assert "https://raw.githubusercontent.com" not in text
    data_sets = [d for d in manifest.DATASETS.values() if d.name != "methods"]  # methods.json lists those
    assert text.count("\ncommit = ") == sum(1 for d in data_sets if "@" in d.source)
    # + VERA-MH (issue 36): its data (5 files) and its 105 transcripts with their Readme (106)
    assert len(data_sets) == 19 and sum(len(d.files) for d in data_sets) == 95 + 5 + 106
    assert len(manifest.DATASETS["methods"].files) == 64 + 6
