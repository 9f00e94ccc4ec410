"""Which tasks a --tasks selection runs. crisis.conversation is beyond the paper and dearer than the rest of
the benchmark together (the dry run: ~$196 against ~$75 for one model with gpt-4.1 judging), so it runs only
when named: reproducing the paper with `all` never pays for it unasked, and `trustmh list` still shows it."""

from trustmh.tasks import TASKS, resolve_tasks


def ids(selection):
    return [t.id for t in resolve_tasks(selection)]


def test_a_task_run_by_name_only_is_left_out_of_all_and_its_pillar_and_run_when_named():
    named = sorted(k for k, cls in TASKS.items() if cls.by_name_only)
    assert named == ["crisis.conversation"]
    every = sorted(TASKS)
    assert ids("all") == ids(None) == [k for k in every if k not in named]
    assert "crisis.conversation" not in ids("crisis")
    assert ids("crisis") == [k for k in every if k.startswith("crisis.") and k not in named]
    assert ids("crisis.conversation") == ["crisis.conversation"]
    assert ids("all,crisis.conversation") == ids("all") + ["crisis.conversation"]
    assert ids("crisis,crisis.conversation") == ids("crisis") + ["crisis.conversation"]


def test_list_shows_it_and_says_it_runs_by_name_only(cli_here):
    code, out, err = cli_here("list")
    assert code == 0, err
    assert [ln for ln in out.splitlines() if ln.startswith("│ crisis.conversation ")], out
    assert "run only when named in --tasks (not part of 'all' or of its pillar): crisis.conversation" in \
        " ".join(out.split())
