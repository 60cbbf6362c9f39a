"""The scripts under ``infra/`` are files, not a package: tests load them by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

INFRA_DIR = Path(__file__).resolve().parents[2] / "infra"


def load_script(name: str, folder: str) -> ModuleType:
    """Import ``infra/<folder>/<name>.py`` (without running it: its ``main`` is guarded)."""
    path = INFRA_DIR / folder / f"{name}.py"
    module_name = f"icefloe_infra_{folder}_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered first, as for ``python -m``: dataclasses resolve annotations through it.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
