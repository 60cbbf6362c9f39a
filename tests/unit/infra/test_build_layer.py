"""The core layer's builder (infra/lambda/build_layer.py) without pip or the network: its pip
commands, what it prunes, and that the botocore models it keeps cover every service the code
calls. tests/package builds the real layer."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
CLIENT_CALL = re.compile(r"""\.client\(\s*["']([a-z0-9-]+)["']""")


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_pip_installs_cpython_312_manylinux_wheels_only(build_layer: ModuleType) -> None:
    plan = build_layer.LayerPlan(output=Path("/out"))
    command = plan.pip_install(Path("/w/icefloe-0.1.0-py3-none-any.whl"))
    joined = " ".join(command)
    assert "--only-binary=:all:" in command and "--no-compile" in command
    assert "--implementation cp --python-version 3.12" in joined
    platforms = {command[i + 1] for i, arg in enumerate(command) if arg == "--platform"}
    # Every manylinux tag whose glibc Amazon Linux 2023 (2.34) has: pip does not widen them.
    assert {"manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64"} <= platforms
    assert "manylinux_2_35_x86_64" not in platforms
    assert command[command.index("--target") + 1] == "/out/python"
    assert command[-1] == "/w/icefloe-0.1.0-py3-none-any.whl[lambda]"


def test_the_layer_installs_the_lambda_extra_with_the_tracer() -> None:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    # Every function uses Powertools' Tracer, which needs aws-xray-sdk in the layer.
    (powertools,) = [r for r in extras["lambda"] if r.startswith("aws-lambda-powertools")]
    assert "[tracer]" in powertools


def test_the_functions_runtime_is_the_layers_python(build_layer: ModuleType) -> None:
    template = (REPO_ROOT / "template.yaml").read_text(encoding="utf-8")
    assert f"Runtime: python{build_layer.PYTHON_VERSION}" in template
    assert f"CompatibleRuntimes: [python{build_layer.PYTHON_VERSION}]" in template


def test_prune_removes_the_listed_paths_and_unused_botocore_models(
    build_layer: ModuleType, tmp_path: Path
) -> None:
    kept = [
        "pyarrow/libarrow.so.2600",
        "pyarrow/libarrow_substrait.so.2600",  # pyarrow.lib links it
        "pyarrow/parquet/core.py",
        "botocore/data/s3/2006-03-01/service-2.json.gz",
        "botocore/data/endpoints.json",
        "duckdb/__init__.py",
        "icefloe/__pycache__/__init__.cpython-312.pyc",  # bytecode is compiled after pruning
    ]
    removed = [
        "pyarrow/libarrow_flight.so.2600",
        "pyarrow/_flight.cpython-312-x86_64-linux-gnu.so",
        "pyarrow/tests/test_array.py",
        "pyarrow/include/arrow/api.h",
        "pyarrow/lib.pxd",
        "botocore/data/ec2/2016-11-15/service-2.json.gz",
    ]
    for i, relative in enumerate(kept + removed):
        _write(tmp_path / relative, 10 + i)
    pruned = build_layer.prune(tmp_path)
    for relative in kept:
        assert (tmp_path / relative).is_file(), relative
    for relative in removed:
        assert not (tmp_path / relative).exists(), relative
    assert pruned.bytes == sum(10 + len(kept) + i for i in range(len(removed)))
    assert not (tmp_path / "botocore/data/ec2").exists()
    # A second prune finds nothing left to remove.
    assert build_layer.prune(tmp_path).bytes == 0


def test_the_kept_botocore_models_cover_every_service_the_code_calls(
    build_layer: ModuleType,
) -> None:
    called = set()
    for folder in ("shared/icefloe", "functions"):
        for path in (REPO_ROOT / folder).rglob("*.py"):
            called |= set(CLIENT_CALL.findall(path.read_text(encoding="utf-8")))
    assert called  # guards the scan itself
    assert called <= build_layer.BOTOCORE_SERVICES, called - build_layer.BOTOCORE_SERVICES


def test_build_installs_then_prunes_and_reports_the_size(
    build_layer: ModuleType, tmp_path: Path
) -> None:
    commands: list[Sequence[str]] = []
    site = tmp_path / "layer" / "python"

    def fake_pip(command: Sequence[str]) -> None:
        commands.append(command)
        if "wheel" in command:
            wheel_dir = Path(command[command.index("--wheel-dir") + 1])
            wheel_dir.mkdir(parents=True, exist_ok=True)
            (wheel_dir / "icefloe-0.1.0-py3-none-any.whl").write_bytes(b"wheel")
        else:
            _write(site / "icefloe" / "__init__.py", 100)
            _write(site / "pyarrow" / "tests" / "t.py", 5000)

    size = build_layer.build(build_layer.LayerPlan(output=tmp_path / "layer"), run=fake_pip)
    assert [c[3] for c in commands] == ["wheel", "install"]  # no python3.12: no bytecode
    assert size == 100  # the tests were pruned
    assert not (site / "pyarrow" / "tests").exists()

    # With a python3.12, the pruned layer is compiled last, to unchecked-hash .pyc files.
    commands.clear()
    plan = build_layer.LayerPlan(output=tmp_path / "layer", bytecode_python="/opt/py312/python3.12")
    build_layer.build(plan, run=fake_pip)
    assert [c[3] for c in commands[:2]] == ["wheel", "install"]
    assert commands[2] == [
        "/opt/py312/python3.12",
        *("-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash"),
        str(site),
    ]


def test_build_fails_when_pip_installed_no_icefloe(build_layer: ModuleType, tmp_path: Path) -> None:
    def fake_pip(command: Sequence[str]) -> None:
        if "wheel" in command:
            wheel_dir = Path(command[command.index("--wheel-dir") + 1])
            wheel_dir.mkdir(parents=True, exist_ok=True)
            (wheel_dir / "icefloe-0.1.0-py3-none-any.whl").write_bytes(b"wheel")

    with pytest.raises(build_layer.LayerBuildError, match="icefloe was not installed"):
        build_layer.build(build_layer.LayerPlan(output=tmp_path), run=fake_pip)


def test_the_wheel_is_built_from_a_clean_copy_of_the_sources(
    build_layer: ModuleType, tmp_path: Path
) -> None:
    # A stale build/lib (setuptools reuses it) or bytecode must not reach the layer.
    repo = tmp_path / "repo"
    (repo / "shared" / "icefloe" / "__pycache__").mkdir(parents=True)
    (repo / "shared" / "icefloe" / "__init__.py").write_text("")
    (repo / "shared" / "icefloe" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"x")
    (repo / "build" / "lib" / "icefloe").mkdir(parents=True)
    (repo / "build" / "lib" / "icefloe" / "deleted_since.py").write_text("")
    (repo / "pyproject.toml").write_text("[project]\n")
    (repo / "README.md").write_text("readme\n")
    copy = tmp_path / "copy"
    build_layer.copy_sources(repo, copy)
    files = sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "shared/icefloe/__init__.py"]


def test_dry_run_prints_both_pip_commands(
    build_layer: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build_layer.main(["--output", str(tmp_path), "--dry-run", "--no-bytecode"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert " pip wheel " in lines[0] and " pip install " in lines[1]
    assert not (tmp_path / "python").exists()


def test_find_python_answers_only_with_an_interpreter_that_runs(
    build_layer: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pyenv-style shim that fails (its version is not selected) and a working interpreter.
    shims, versions = tmp_path / "shims", tmp_path / "pyenv" / "versions" / "3.12.9" / "bin"
    shims.mkdir()
    versions.mkdir(parents=True)
    (shims / "python3.12").write_text("#!/bin/sh\nexit 127\n")
    (versions / "python3.12").write_text("#!/bin/sh\nexit 0\n")
    # pyenv itself says where its versions are (`pyenv root`).
    (shims / "pyenv").write_text(f"#!/bin/sh\necho {tmp_path / 'pyenv'}\n")
    for script in (shims / "python3.12", versions / "python3.12", shims / "pyenv"):
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:/usr/bin:/bin")
    assert build_layer.find_python("3.12") == str(versions / "python3.12")
    (versions / "python3.12").write_text("#!/bin/sh\nexit 1\n")
    assert build_layer.find_python("3.12") is None
