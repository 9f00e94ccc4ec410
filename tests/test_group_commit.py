"""The store's group commit (engine/_endpoint.py CallWriter): every reply is committed, with the links that say
which sample it answers, before anything reads it; links are never committed on their own between replies
(a judgement's link, queued after the replies of its pass were committed, used to cost a commit of its own:
a third of a paper-scale run's commits)."""

from __future__ import annotations

import pytest

from conftest import run_quiet
from test_models_together import Judged1
from trustmh.engine import Limits
from trustmh.engine._store import Store
from trustmh.tasks import TASKS, register
from trustmh.testing.fake_server import FakeLLMServer
from trustmh.types import Item

TASK_ID = "testcommit.judged"
N = 60


class ManyJudged(Judged1):  # one judgement per sample, enough samples for judgements to leave in one pass
    id = TASK_ID

    def load(self, data, ctx):
        return [Item(f"i{n}", {"q": f"question {n}"}) for n in range(N)]


@pytest.fixture
def judged_task():
    register(ManyJudged)
    yield
    TASKS.pop(TASK_ID, None)


def reply(body):
    if body["model"] == "j":
        return "Rating: 4"
    return body["messages"][-1]["content"] + " answered"


def test_links_ride_with_replies_and_every_call_is_linked(spec_for, judged_task, tmp_path, monkeypatch):
    commits = []  # (replies, links) of each commit
    real = Store.put_calls

    def noting(self, rows, links=(), bodies=()):
        commits.append((len(rows), len(links)))
        return real(self, rows, links, bodies)
    monkeypatch.setattr(Store, "put_calls", noting)
    with FakeLLMServer(reply=reply, latency_s=0.05) as srv:
        run_dir, results, calls = run_quiet(spec_for(srv, TASK_ID, n_boot=50), tmp_path / "run",
                                            limits=Limits(max_connections=16))
    assert calls == {"openai/m": N, "judge": N}
    assert sum(r for r, _ in commits) == 2 * N  # each reply committed once
    assert sum(links for _, links in commits) == 2 * N  # each generation's link and each judgement's
    # No commit of links alone: each link is committed with a reply (the one it names at the latest), and
    # the task's end and the run's find nothing left to commit.
    assert [c for c in commits if c[0] == 0] == [], commits
    # and what was committed is what scoring read: every sample has its generation and its verdict
    assert results.models["openai/m"].tasks[TASK_ID].value == 4.0
    store = Store(run_dir / "store.sqlite")
    try:
        orphans = store.db.execute("SELECT COUNT(*) FROM links l LEFT JOIN calls c ON c.key = l.key "
                                   "WHERE c.key IS NULL").fetchone()[0]
        n_links = store.db.execute("SELECT COUNT(*) FROM links").fetchone()[0]
    finally:
        store.close()
    assert (n_links, orphans) == (2 * N, 0)
