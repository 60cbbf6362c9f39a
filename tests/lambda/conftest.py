"""Fixtures of the end-to-end Lambda tests (the helpers are in :mod:`support.lambda_stack`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.lambda_stack import Deployment


@pytest.fixture
def deployment(postgres_dsn: str, schema_name: str, tmp_path: Path) -> Deployment:
    """This test's meta store schema and home, for the functions' environments."""
    return Deployment(postgres_dsn=postgres_dsn, schema_name=schema_name, home=tmp_path / "home")
