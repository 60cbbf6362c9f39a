"""Fixtures of the ingest unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from icefloe import duck


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    """One DuckDB connection (one thread) for a module's loads."""
    connection = duck.connect(threads=1)
    yield connection
    connection.close()
