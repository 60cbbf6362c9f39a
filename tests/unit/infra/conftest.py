"""The scripts under ``infra/emr/`` are files, not a package: load them by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

EMR_DIR = Path(__file__).resolve().parents[3] / "infra" / "emr"


def load_script(name: str) -> ModuleType:
    """Import ``infra/emr/<name>.py`` (without running it: its ``main`` is guarded)."""
    path = EMR_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"icefloe_infra_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered first, as for ``python -m``: dataclasses resolve annotations through it.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compact_job() -> ModuleType:
    return load_script("compact_job")


@pytest.fixture(scope="module")
def build_environment() -> ModuleType:
    return load_script("build_environment")
