"""What the build scripts under ``infra/`` (``emr/build_environment.py``,
``lambda/build_layer.py``) share: running one command, echoed first, a failure being the
script's own build error. Each script puts this folder on ``sys.path`` to import it, whether
run as ``python infra/<folder>/<script>.py`` or loaded by path in the tests."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence

# Runs one command (the builds take one, so that tests and --dry-run can stand in for it).
Runner = Callable[[Sequence[str]], None]


def command_runner(error: Callable[[str], Exception]) -> Runner:
    """A :data:`Runner` that prints ``+ <command>``, runs it, and raises ``error`` naming the
    command's first words and its exit status when it fails."""

    def run(command: Sequence[str]) -> None:
        print(f"+ {shlex.join(command)}", flush=True)
        try:
            subprocess.run(list(command), check=True)
        except subprocess.CalledProcessError as e:
            raise error(f"{shlex.join(command[1:5])} failed with status {e.returncode}") from e

    return run
