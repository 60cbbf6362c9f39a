"""icefloe: a serverless Parquet merge engine for event data on object storage.

``icefloe.connect()`` opens a lake (see :mod:`icefloe.lake`); the modules underneath stay
available for finer control.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from icefloe.lake import Lake


def connect(**settings: Any) -> Lake:
    """Open a lake: see :func:`icefloe.lake.connect` for the arguments. (Imported on first
    use, so that ``import icefloe`` stays light for the Lambda handlers.)"""
    from icefloe.lake import connect as open_lake

    return open_lake(**settings)


__all__ = ["__version__", "connect"]
