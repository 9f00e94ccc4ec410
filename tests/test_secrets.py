"""Secrets and hostile content: API keys never reach an output, run directories are private, ids never
become paths, and model output is inert in the report."""

import asyncio
import importlib.util
import json
import os
import secrets
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import make_synthetic_data, run_quiet, run_spec, synthetic_reply, write_replay
from trustmh.errors import UserError
from trustmh.engine import Limits, RunSpec
from trustmh.testing.fake_server import Fault, FakeLLMServer

FAST = Limits(max_connections=8, timeout=5, max_retries=2, backoff_base=0.01)
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)></textarea>'


class EchoingServer(FakeLLMServer):
    """Error bodies repeat the credentials they were sent, as a careless gateway might."""

    async def _fault_response(self, request, provider, fault, n, body):
        if fault.kind == "status":
            cred = request.headers.get("Authorization") or request.headers.get("x-api-key")
            return self._error(provider, fault.status, f"rejected credentials {cred!r}", fault.retry_after)
        return await super()._fault_response(request, provider, fault, n, body)


def scan(key: str, texts: dict[str, str | bytes], *roots: Path) -> dict[str, int]:
    """Where the key (or its random part alone) occurs, over the given texts and every file under roots."""
    needles = [key, key.split("-")[-1]]
    blobs = {name: t.encode() if isinstance(t, str) else t for name, t in texts.items()}
    blobs.update({str(p): p.read_bytes() for root in roots for p in root.rglob("*") if p.is_file()})
    hits = {name: sum(b.count(n.encode()) for n in needles) for name, b in blobs.items()}
    assert len(blobs) > 3
    return hits


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_api_key_never_reaches_an_output(cli, provider, tmp_path, figures):
    key = f"sk-test-{secrets.token_hex(16)}"
    var = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    env = dict(os.environ, **{var: key})
    data = make_synthetic_data(tmp_path / "data", 12, 6)

    def faults(n, body):  # permanent and retried errors whose messages carry the key back
        return {0: Fault("status", status=400), 1: Fault("status", status=500), 2: Fault("status", status=422),
                3: Fault("status", status=429)}.get(n % 6)

    with EchoingServer(reply=synthetic_reply, faults=faults) as srv:
        url = srv.openai_base_url if provider == "openai" else srv.base_url
        common = ["--base-url", url, "--tasks", "privacy.awareness_tier1,ethics.reasoning", "--suite", "data",
                  "--data-dir", data, "--max-retries", "1", "--no-progress", "--protocol", "trustmh",
                  "--max-failed", "1", "--max-judge-failed", "1"]  # errors are the point here: the run still exits 0
        run = cli("run", "-m", f"{provider}/fake", "--judge", f"{provider}/judge", "--judge-base-url", url,
                  "--out", tmp_path / "run", *common, env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        # The key really was sent, and really came back in error bodies.
        assert srv.n_requests > 20
    res = json.loads((tmp_path / "run/results.json").read_text())
    kinds = {k for t in res["models"][f"{provider}/fake"]["tasks"].values() for k in t["error_kinds"]}
    assert "bad_request" in kinds
    stored = (tmp_path / "run/samples.jsonl").read_text()
    assert "rejected credentials" in stored and "[redacted]" in stored

    with EchoingServer(reply=synthetic_reply, faults=lambda n, body: Fault("status", status=401)) as srv:
        url = srv.openai_base_url if provider == "openai" else srv.base_url
        common[1] = url
        auth = cli("run", "-m", f"{provider}/fake", "--out", tmp_path / "run401", *common, env=env, cwd=tmp_path)
    assert auth.returncode == 2 and "authentication failed" in auth.stderr and "Traceback" not in auth.stderr

    texts = {"run stdout": run.stdout, "run stderr": run.stderr, "401 stdout": auth.stdout, "401 stderr": auth.stderr}
    if importlib.util.find_spec("trustmh.report") is not None:
        from trustmh.report import write_report
        texts["report.html"] = write_report([tmp_path / "run"], tmp_path / "report.html").read_bytes()
    hits = scan(key, texts, tmp_path / "run", tmp_path / "run401")
    assert not any(hits.values()), {k: v for k, v in hits.items() if v}
    figures.update(provider=provider, outputs_scanned=sorted({Path(k).name for k in hits}), key_occurrences=0)


def test_run_dir_and_store_are_owner_only(tmp_path):
    out = tmp_path / "existing"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)  # a directory the user made beforehand keeps its mode (issue 14: --out never
    # changes what it did not create); what the run writes in it is still owner-only
    rep = write_replay(tmp_path / "r.jsonl", [{"task": "privacy.awareness_tier1", "item_id": 0, "response": "4"}])
    run_quiet(run_spec(models=[f"replay/{rep}"], tasks="privacy.awareness_tier1", suite="sample"), out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    created = tmp_path / "created"
    run_quiet(run_spec(models=[f"replay/{rep}"], tasks="privacy.awareness_tier1", suite="sample"), created)
    assert stat.S_IMODE(created.stat().st_mode) == 0o700
    assert stat.S_IMODE((out / "store.sqlite").stat().st_mode) == 0o600
    from trustmh.engine._store import Store
    store = Store(out / "store.sqlite")  # the WAL files exist only while a connection is open
    try:
        store.set_meta("probe", 1)
        for name in ("store.sqlite-wal", "store.sqlite-shm"):
            assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    finally:
        store.close()


@settings(max_examples=200, deadline=None)
@given(name=st.text(min_size=1, max_size=60))
def test_run_id_is_one_plain_path_component(name):
    rid = RunSpec(models=[f"openai/{name}"]).run_id()
    assert "/" not in rid and "\\" not in rid and "\x00" not in rid
    assert rid not in (".", "..") and not rid.startswith(".")
    root = Path("/tmp/runs-root")
    assert (root / rid).resolve().parent == root.resolve()


def test_model_name_cannot_place_the_run_outside_runs_dir(tmp_path):
    with FakeLLMServer(reply=synthetic_reply) as srv:
        data = make_synthetic_data(tmp_path / "data", 2, 0)
        spec = run_spec(models=["openai/../../escaped"], base_url=srv.openai_base_url,
                        tasks="privacy.awareness_tier1", suite="data", data_dir=str(data))
        from trustmh.engine import run
        run_dir, _, _ = run(spec, runs_root=tmp_path / "runs", limits=FAST)
    assert run_dir.parent == tmp_path / "runs" and run_dir.name.startswith("escaped-")
    assert not list(tmp_path.parent.glob("escaped*")) and not list(tmp_path.glob("escaped*"))


def test_replay_item_id_is_never_a_path(tmp_path):
    for bad_id in ("../../etc/passwd", "/etc/passwd", "..\\..\\x", "0/../../1"):
        rep = write_replay(tmp_path / "r.jsonl", [{"task": "privacy.awareness_tier1", "item_id": bad_id,
                                                   "response": "4"}])
        with pytest.raises(UserError, match=r"r\.jsonl:1: unknown item id"):
            run_quiet(run_spec(models=[f"replay/{rep}"], tasks="privacy.awareness_tier1", suite="sample"),
                      tmp_path / "run")
    # Ids come from the data too: a hostile one is only a label, and the run dir holds only its own files.
    data = make_synthetic_data(tmp_path / "data", 0, 2)
    csv = data / "trustmh/ethics/EthicMH.csv"
    csv.write_text(csv.read_text().replace("\n0,", "\n../../../../tmp/evil,", 1))
    rep = write_replay(tmp_path / "ok.jsonl", [{"task": "ethics.reasoning", "item_id": "../../../../tmp/evil",
                                                "response": "Answer: A"}])
    _, res, _ = run_quiet(run_spec(models=[f"replay/{rep}"], tasks="ethics.reasoning", suite="data",
                                   data_dir=str(data)), tmp_path / "run2")
    assert res.models[f"replay/{rep}"].tasks["ethics.reasoning"].n == 1
    assert {p.name for p in (tmp_path / "run2").iterdir()} <= {
        "store.sqlite", "store.sqlite-wal", "store.sqlite-shm", "samples.jsonl", "results.json", "run.lock",
        "report.html"}


def test_model_output_is_inert_in_the_report(tmp_path):
    if importlib.util.find_spec("trustmh.report") is None:
        pytest.skip("the HTML report is not in this tree yet")
    from trustmh.report import write_report
    rep = write_replay(tmp_path / "r.jsonl", [{"task": "privacy.awareness_tier1", "item_id": 0,
                                               "response": f"4) {HOSTILE}"}])
    run_quiet(run_spec(models=[f"replay/{rep}"], tasks="privacy.awareness_tier1", suite="sample"), tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert HOSTILE in [r["response"][3:] for r in rows if r["response"]]  # the data keeps the reply as it was
    html = write_report([tmp_path / "run"], tmp_path / "report.html").read_text(encoding="utf-8")
    for fragment in ('<script>alert("x")', "<img src=x onerror", "</textarea>"):
        assert fragment not in html


# --- issue 14: header values, base URLs, endpoint identity ------------------------------------------

@pytest.mark.parametrize("var", ["OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_API_KEY"])
@pytest.mark.parametrize("bad", ["org-1\r\nX-Injected: 1", "org-1\nx", "org-1\rx"])  # NUL: no OS lets it in
@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_a_line_break_in_any_header_variable_is_refused_at_start_up(monkeypatch, var, bad, transport):
    from trustmh.errors import UserError
    from trustmh.models import make_model
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-1")
    monkeypatch.setenv(var, bad)
    with pytest.raises(UserError) as err:
        make_model("openai/m", base_url="http://127.0.0.1:9/v1", transport=transport)
    assert var in str(err.value) and bad not in str(err.value) and "\n" not in str(err.value)


def test_redact_url_drops_userinfo_query_and_fragment():
    from trustmh.models import redact_url
    assert redact_url("https://u:p@gw.example/v1?key=s3cr3t&x=1#tok") == "https://gw.example/v1"
    assert redact_url("http://[::1]:8000/v1?sig=abc") == "http://[::1]:8000/v1"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert redact_url("http://h:notaport/v1?k=1") == "(unreadable URL)"


def test_endpoint_spellings_of_one_server_key_the_cache_once():
    from trustmh.models import ModelRef, endpoint_id
    one = endpoint_id("openai/m", "https://api.example.com/v1")
    for spelling in ("HTTPS://API.Example.com/v1/", "https://api.example.com:443/v1", "https://api.example.com/v1//",
                     "https://u:p@api.example.com/v1?key=1"):
        assert endpoint_id("openai/m", spelling) == one, spelling
    assert endpoint_id("openai/m", "http://api.example.com/v1") != one  # another scheme, maybe another server
    assert endpoint_id("openai/m", "https://api.example.com:8443/v1") != one
    assert ModelRef("openai/m", "https://API.example.com/v1/").endpoint == one


@pytest.mark.parametrize("provider,var", [("openai", "OPENAI_BASE_URL"), ("anthropic", "ANTHROPIC_BASE_URL")])
def test_base_url_variables_are_honoured_as_the_sdks_do(monkeypatch, provider, var):
    """When no --base-url is given the provider's variable names the server, for the requests and for the
    cache key alike (a store written through it is found again by `trustmh score`)."""
    from trustmh.models import ModelRef, endpoint_id, make_model
    from trustmh.types import Request
    monkeypatch.setenv(var, "")
    with FakeLLMServer(reply=lambda body: "from the variable") as srv:
        url = srv.openai_base_url if provider == "openai" else srv.base_url
        monkeypatch.setenv(var, url + "/")
        model = make_model(f"{provider}/fake")  # no key needed: a base URL is given, by the variable

        async def go():
            try:
                return await model.generate(Request([{"role": "user", "content": "q"}], {"max_tokens": 8}))
            finally:
                await model.aclose()
        out = asyncio.run(go())
        assert out.text == "from the variable" and srv.n_requests == 1
    assert model.endpoint == endpoint_id(f"{provider}/fake", url) == ModelRef(f"{provider}/fake").endpoint
    assert make_model(f"{provider}/fake", base_url="http://127.0.0.1:9/v1").endpoint.endswith("@http://127.0.0.1:9/v1")


@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="needs /proc")
@pytest.mark.parametrize("target", ["trustmh/privacy/tier_1_labels.txt", "trustmh/ethics/EthicMH.csv"])
def test_a_data_file_linked_to_the_environment_prints_no_key(cli, tmp_path, target):
    """A data file symlinked to /proc/self/environ printed both API keys in its error message."""
    keys = {"OPENAI_API_KEY": f"sk-test-{secrets.token_hex(16)}", "ANTHROPIC_API_KEY": f"sk-ant-{secrets.token_hex(16)}"}
    env = {**keys, **os.environ}  # the keys first: an excerpt of the first 40 characters would hold one
    for name, key in keys.items():
        env[name] = key
    data = make_synthetic_data(tmp_path / "data", 4, 4)
    (data / target).unlink()
    (data / target).symlink_to("/proc/self/environ")
    task = "privacy.awareness_tier1" if "privacy" in target else "ethics.reasoning"
    out = cli("run", "-m", "baseline/counselor", "-t", task, "--suite", "data", "--data-dir", data,
              "--no-progress", "--out", tmp_path / "run", env=env, cwd=tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 2 and target.rsplit("/", 1)[-1] in text and "Traceback" not in text, text
    for key in keys.values():
        secret = key.split("-")[-1]
        assert not any(secret[i:i + 8] in text for i in range(len(secret) - 7)), text
