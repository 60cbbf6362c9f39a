"""A local job's runner: gone only when it was this host's and that process no longer runs."""

from __future__ import annotations

import socket
import subprocess
import sys

from icefloe.compaction.runner import current_runner, runner_is_gone


def test_this_process_is_not_gone_and_a_finished_one_is() -> None:
    assert not runner_is_gone(current_runner())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    host = socket.gethostname()
    with open(f"/proc/{child.pid}/stat") as f:
        started = f.read().rsplit(")", 1)[1].split()[19]
    runner = f"{host}:{child.pid}:{started}"
    assert not runner_is_gone(runner)
    child.kill()
    child.wait()
    assert runner_is_gone(runner)
    # The same pid with another start time is another process: the runner is gone
    assert runner_is_gone(current_runner().rsplit(":", 1)[0] + ":1")


def test_other_hosts_and_unreadable_runners_are_never_taken_for_gone() -> None:
    assert not runner_is_gone("some-other-host:1:12345")
    assert not runner_is_gone("garbage")
    assert not runner_is_gone(f"{socket.gethostname()}:notapid:1")
    assert not runner_is_gone(f"{socket.gethostname()}:999999999:")
