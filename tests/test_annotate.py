"""`trustmh annotate` in a real headless Chromium (Debian `chromium`, driven by Playwright): a clinician rates a
blind draw of a run's judged replies; the page reveals neither the model nor the judge's verdict, rating
resumes after a reload, the ratings exported in validate-judge's format give the agreement computed by
hand, and a write without the session's token or from another Origin is refused."""

import csv
import hashlib
import http.client
import json
import math
import re
import threading
from contextlib import contextmanager

import pytest
from playwright.sync_api import expect

from conftest import assert_user_error, run_quiet, run_spec
from trustmh.analysis.runs import load_run
from trustmh.engine import Limits
from trustmh.testing.browser import chromium_tab
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.validation import annotate
from trustmh.validation.human_ratings import ratings_spec, validate_ratings

MODEL = "openai/secret-model-7"
CRITERIA = ("fluency", "professionalism", "empathy", "helpfulness")


def number_in(text: str) -> int:
    return int(re.search(r"reply-number-(\d+)", text).group(1))


def run_judge(k: int) -> dict[str, int]:
    """The run's judge: what it said of reply k (the page must never show it)."""
    return {c: (k + i) % 6 for i, c in enumerate(CRITERIA)}


def human(k: int) -> dict[str, int]:
    """What our clinician answers for reply k."""
    return {c: (k * 3 + i) % 6 for i, c in enumerate(CRITERIA)}


def checking_judge(k: int) -> dict[str, int]:
    """The judge validate-judge checks against the clinician's exported ratings."""
    return {c: (k * 3 + i + (k % 2)) % 6 for i, c in enumerate(CRITERIA)}


def reply(body):
    text = body["messages"][-1]["content"]
    if '"fluency"' in text:  # a judge prompt: the run's, or validate-judge's (model "checker")
        k = number_in(text)
        return json.dumps(checking_judge(k) if body["model"] == "checker" else run_judge(k))
    k = int(hashlib.sha256(text.encode()).hexdigest()[:6], 16) % 1000
    return f"That sounds really hard; I am here with you. (reply-number-{k})"


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("annotate")
    srv = FakeLLMServer(reply=reply)
    srv.__enter__()
    spec = run_spec(models=[MODEL], judge="openai/run-judge", base_url=srv.openai_base_url,
                    judge_base_url=srv.openai_base_url, tasks="reliability.support", suite="sample")
    run_quiet(spec, tmp / "run-of-secret-model")
    yield tmp / "run-of-secret-model", srv
    srv.__exit__(None, None, None)


@contextmanager
def serving(run_dir, n=4):
    run = load_run(run_dir)
    ann = annotate.open_annotation(run, n, "uniform", 1)
    server = annotate.make_server([run], [ann], 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, ann
    finally:
        server.shutdown()
        server.server_close()


def post(server, body, token=None, origin="own", host=None):
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host or f"127.0.0.1:{port}", "Content-Type": "application/json"}
    if origin == "own":
        headers["Origin"] = f"http://127.0.0.1:{port}"
    elif origin:
        headers["Origin"] = origin
    if token:
        headers["X-Trustmh-Token"] = token
    conn.request("POST", "/api/rate", json.dumps(body), headers)
    resp = conn.getresponse()
    out = resp.status, json.loads(resp.read() or b"{}")
    conn.close()
    return out


def rate_current(page) -> int:
    """Answer the item on screen as our clinician would; returns its reply number."""
    k = number_in(page.inner_text("#a-reply"))
    for c, v in human(k).items():
        page.check(f'input[name="c-{c}"][value="{v}"]')
    page.click("#a-save")
    return k


def test_blind_rating_resumes_exports_and_checks_the_judge(chromium, judged_run, tmp_path):
    run_dir, srv = judged_run
    run = load_run(run_dir)
    verdicts = [json.loads(line)["judge"]["text"] for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    with serving(run_dir) as (server, ann):
        token = server.RequestHandlerClass.token
        seen: list[bytes] = []
        with chromium_tab(chromium) as tab:
            page = tab.page
            page.on("response", lambda r: seen.append(r.body()) if r.ok else None)
            page.goto(annotate.url(server))
            page.fill("#a-rater", "dr-a")
            page.click("#a-begin")
            page.wait_for_selector("#a-item:not([hidden])")
            first = [rate_current(page)]
            expect(page.locator("#a-progress")).to_contain_text("you have rated 1")
            first.append(rate_current(page))
            expect(page.locator("#a-progress")).to_contain_text("you have rated 2")
            # a reload: the rater id comes back from the browser, the ratings from the run folder
            page.reload()
            assert page.input_value("#a-rater") == "dr-a"
            page.click("#a-begin")
            page.wait_for_selector("#a-item:not([hidden])")
            assert "you have rated 2" in page.inner_text("#a-progress")
            assert number_in(page.inner_text("#a-reply")) not in first
            rest = [rate_current(page)]
            expect(page.locator("#a-progress")).to_contain_text("you have rated 3")
            rest.append(rate_current(page))
            page.wait_for_selector("#a-done:not([hidden])")
            html = page.content()
            assert not tab.errors, tab.errors
        # blinding: nothing the page was sent names the model, the judge, the run or the judge's verdicts
        sent = b"".join(seen).decode("utf-8", "replace") + html
        for secret in (MODEL, "secret-model", "run-judge", run.id, str(run_dir)):
            assert secret not in sent, secret
        for v in verdicts:
            assert v not in sent
        assert "reply-number-" in sent  # (the replies themselves were shown)
        # writes without the token, or from another origin, are refused; the same write with both is taken
        unit = ann.units[0]["id"]
        body = {"rater": "dr-b", "unit": unit, "answers": human(0)}
        assert post(server, body)[0] == 403
        assert post(server, body, token="not-the-token")[0] == 403
        assert post(server, body, token=token, origin="http://evil.example")[0] == 403
        assert post(server, body, token=token, origin=None)[0] == 403
        assert post(server, body, token=token, host="evil.example")[0] == 403
        assert post(server, dict(body, answers={"fluency": 9}), token=token)[0] == 400
        assert [r["rater"] for r in json.loads((run_dir / "annotation.json").read_text())["ratings"]] == ["dr-a"] * 4
        status, got = post(server, body, token=token)
        assert status == 200 and {k: got[k] for k in ("ok", "done", "total")} == {"ok": True, "done": 1, "total": 4}
        assert [(s["rated"], s["drawn"], s["needed"]) for s in got["sets"]] == [(4, 4, 10)]  # progress per set
    # the four ratings of dr-a were saved as they were given (the fifth, dr-b's, is the accepted write)
    saved = annotate.read_annotation(run_dir)
    assert sorted(r["rater"] for r in saved.ratings) == ["dr-a"] * 4 + ["dr-b"]
    rated = first + rest
    assert len(set(rated)) == 4
    # export in validate-judge's format, then validate-judge against a second judge: hand-computed agreement
    csv_path = tmp_path / "ratings.csv"
    annotate.export([run], [annotate.read_annotation(run_dir)], csv_path)
    assert csv_path.read_text().startswith("item,context,reply,criterion,rater,rating\n")
    exported = list(csv.DictReader(csv_path.open(newline="")))
    assert len(exported) == 5 * len(CRITERIA) and MODEL not in csv_path.read_text()
    spec = ratings_spec(csv_path, judge="openai/checker", judge_base_url=srv.openai_base_url, n_boot=200)
    _, res = validate_ratings(spec, tmp_path / "vj", limits=Limits(max_connections=2))
    tasks = res.models["openai/checker"].tasks
    k_b = number_in(next(r["reply"] for r in exported if r["rater"] == "dr-b"))
    for c in CRITERIA:
        ks = sorted(rated)
        m = tasks[f"validate_judge.{c}"].metrics
        # bias: mean over raters of mean(judge - rater) on the items each rated (dr-b rated one item)
        bias_a = sum(checking_judge(k)[c] - human(k)[c] for k in ks) / 4
        bias_b = checking_judge(k_b)[c] - human(0)[c]
        assert m["judge.bias"].value == pytest.approx((bias_a + bias_b) / 2, abs=1e-12), c
        assert m["judge.bias"].ci is None  # 4 rated items: too few clusters for an interval (issue 44)
        # Spearman of the judge against dr-a by hand (dr-b's single item gives none): ranks of 4 values
        x, y = [checking_judge(k)[c] for k in ks], [human(k)[c] for k in ks]
        assert m["judge.spearman"].value == pytest.approx(_spearman(x, y), abs=1e-12), c


def _spearman(x, y):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for t in range(i, j + 1):
                r[order[t]] = (i + j) / 2 + 1
            i = j + 1
        return r
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


def test_cli_draw_export_and_bad_input(judged_run, tmp_path, cli):
    run_dir, _ = judged_run
    other = tmp_path / "copy"
    import shutil
    shutil.copytree(run_dir, other)
    (other / "annotation.json").unlink(missing_ok=True)
    got = cli("annotate", other, "--n", "3", "--design", "stratified", "--seed", "2", "--export",
              tmp_path / "none.jsonl")
    assert got.returncode == 0, got.stderr
    ann = json.loads((other / "annotation.json").read_text())
    assert ann["design"]["kind"] == "stratified" and len(ann["units"]) == 3 and ann["ratings"] == []
    assert all(0 < u["pi"] <= 1 for u in ann["units"]) and (tmp_path / "none.jsonl").read_text() == ""
    # asking for another draw of a run that has one is refused, with what to do
    again = cli("annotate", other, "--n", "5", "--export", tmp_path / "x.csv")
    assert_user_error(again, "error: ", "already has a draw")
    (other / "annotation.json").write_text('{"kind": "trustmh annotation", "design": 3}')
    bad = cli("annotate", other, "--export", tmp_path / "x.csv")
    assert_user_error(bad, "error: ", "design: missing or unknown")
