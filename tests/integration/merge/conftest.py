"""Fixtures for merge tests: real Postgres, real DuckDB, a local object store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from icefloe.ingest import Inserter
from icefloe.merge import MergeWorker
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.storage import LocalObjectStore
from support.merge_lake import Lake


@pytest.fixture
def make_worker(meta: MetaStore, tmp_path: Path) -> Callable[..., MergeWorker]:
    def make(**kwargs: object) -> MergeWorker:
        objects = kwargs.pop("objects", None) or LocalObjectStore(tmp_path / "warehouse")
        return MergeWorker(meta=meta, objects=objects, **kwargs)  # type: ignore[arg-type]

    return make


@pytest.fixture
def lake(meta: MetaStore, tmp_path: Path) -> Iterator[Lake]:
    objects = LocalObjectStore(tmp_path / "warehouse")
    inserter = Inserter(meta=meta, objects=objects)
    yield Lake(
        meta=meta,
        objects=objects,
        inserter=inserter,
        worker=MergeWorker(meta=meta, objects=objects),
        engine=QueryEngine(meta=meta, objects=objects),
    )
    inserter.close()
