"""The build scripts' one command runner (infra/build_commands.py): it echoes the command, and
a failing command is the calling script's own build error, naming the command and its status."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest


def test_a_command_is_echoed_then_run(
    build_environment: ModuleType, capfd: pytest.CaptureFixture[str]
) -> None:
    build_environment.run_command([sys.executable, "-c", "print(6 * 7)"])

    assert capfd.readouterr().out.splitlines() == [f"+ {sys.executable} -c 'print(6 * 7)'", "42"]


@pytest.mark.parametrize(
    ("script", "error"),
    [("build_environment", "BuildError"), ("build_layer", "LayerBuildError")],
)
def test_a_failing_command_is_the_scripts_build_error(
    script: str, error: str, request: pytest.FixtureRequest
) -> None:
    module: ModuleType = request.getfixturevalue(script)

    with pytest.raises(getattr(module, error), match=r"-c 'exit\(3\)' failed with status 3"):
        module.run_command([sys.executable, "-c", "exit(3)"])


def test_both_scripts_run_commands_with_the_one_runner(
    build_environment: ModuleType, build_layer: ModuleType
) -> None:
    import build_commands  # on sys.path once a build script is loaded

    assert build_environment.Runner is build_layer.Runner is build_commands.Runner
    for module in (build_environment, build_layer):
        assert module.run_command.__qualname__ == "command_runner.<locals>.run"
