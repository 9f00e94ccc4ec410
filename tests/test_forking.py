"""tests/forking.py: a forked command is a process of its own, as `python ARGS` would be."""

import os
import signal
import subprocess

import pytest

import forking


def test_a_forked_command_has_its_own_pid_environment_folder_argv_and_exit_code(tmp_path):
    code = "import os, sys; print(os.getpid(), os.getcwd(), os.environ.get('ONLY_THERE'), sys.argv); sys.exit(3)"
    env = dict(os.environ, ONLY_THERE="yes")
    got = forking.run(["-c", code, "a", "b"], env=env, cwd=tmp_path, timeout=60)
    pid, folder, value, argv = got.stdout.split(" ", 3)
    assert got.returncode == 3 and int(pid) != os.getpid()
    assert (folder, value, argv.strip()) == (str(tmp_path), "yes", "['-c', 'a', 'b']")
    assert "ONLY_THERE" not in os.environ and os.getcwd() != str(tmp_path)


def test_trustmh_exit_codes_and_errors_come_back_and_a_kill_is_minus_the_signal():
    done = forking.run(["-m", "trustmh.cli", "run", "--limit", "0"], timeout=60)
    assert done.returncode == 2 and "--limit must be at least 1" in done.stderr and "Traceback" not in done.stderr
    crashed = forking.run(["-c", "raise SystemExit('no way')"], timeout=60)
    assert crashed.returncode == 1 and "no way" in crashed.stderr
    sleeper = forking.Forked(["-c", "import time; time.sleep(60)"])
    sleeper.send_signal(signal.SIGKILL)
    assert sleeper.wait(timeout=30) == -signal.SIGKILL
    with pytest.raises(subprocess.TimeoutExpired):
        forking.run(["-c", "import time; time.sleep(60)"], timeout=0.5)
