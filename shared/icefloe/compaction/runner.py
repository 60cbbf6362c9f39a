"""Who runs a local compaction job: the process's host, pid and start time, so that a later
janitor run on the same host can tell that the process is gone (a pid alone may be reused)."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def current_runner() -> str:
    """This process, as a job record names its runner."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_ticks(os.getpid())}"


def runner_is_gone(runner: str) -> bool:
    """True only when ``runner`` names a process of this host that no longer runs (or another
    process now has its pid). A runner on another host cannot be checked from here: False."""
    parts = runner.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid, started = parts[0], int(parts[1]), parts[2]
    if host != socket.gethostname() or not started:
        return False  # another machine's, or recorded where start times cannot be read
    return _start_ticks(pid) != started


def _start_ticks(pid: int) -> str:
    """The process's start time since boot, in clock ticks (Linux); "" when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: fields follow its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""
