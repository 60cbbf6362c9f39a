"""Imports point down the layers: `make lint` runs import-linter with the layers contract in
pyproject.toml. These tests keep that contract whole: every module and package of icefloe
stands in exactly one layer (a new one cannot slip past it), and the contract holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "shared" / "icefloe"


def layers() -> list[list[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]


def test_every_module_of_the_package_stands_in_one_layer() -> None:
    named = [name for layer in layers() for name in layer]
    modules = {
        f"icefloe.{path.stem if path.is_file() else path.name}"
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert sorted(named) == sorted(set(named)), "a module stands in two layers"
    assert modules == set(named)


def test_the_layers_contract_holds() -> None:
    linter = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert linter is not None, "import-linter is a dev dependency"
    done = subprocess.run([linter], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "1 kept, 0 broken" in done.stdout
