"""A delete leaves exactly the rows for which its predicate is not true: random predicates over
random data, each delete's result compared with an unpruned read of the snapshot it started
from, minus the matching rows; then rolled back to that snapshot for the next predicate.

Deletes skip files by the query engine's pruning and rewrite the others file by file; this
checks both against DuckDB reading every file at once. ``ICEFLOE_FUZZ_SEED`` and
``ICEFLOE_DELETE_FUZZ`` (predicates, default 60) are the knobs.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import duckdb
import pytest

from icefloe import duck
from icefloe.lifecycle import delete_rows, rollback_table
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.query.views import parquet_source, view_sql
from icefloe.storage import LocalObjectStore
from support.query_fuzz import TABLE, QueryGenerator, canonical, fill_table, spec

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("ICEFLOE_FUZZ_SEED", "20261125"))
PREDICATES = int(os.environ.get("ICEFLOE_DELETE_FUZZ", "60"))


def test_deletes_leave_exactly_the_rows_their_predicate_does_not_match(
    meta: MetaStore, tmp_path: Path
) -> None:
    # Given a random table in many files, some merged
    rng = random.Random(SEED)
    objects = LocalObjectStore(tmp_path / "warehouse")
    fill_table(meta, objects, rng, count=16, merged=10)
    table = spec()
    start = meta.get_table(TABLE).head_snapshot_id
    files = meta.files(TABLE)
    reference = duck.connect()
    reference.execute(view_sql(table, parquet_source([objects.uri(f.path) for f in files]), None))
    everything = reference.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    engine = QueryEngine(meta=meta, objects=objects)
    generator = QueryGenerator(rng)

    # When random predicates are deleted, one at a time, each from the same start
    mismatches: list[str] = []
    partial = undecidable = 0
    for number in range(PREDICATES):
        where = generator.predicate(TABLE)
        kept_sql = f"SELECT * FROM {TABLE} WHERE NOT coalesce(({where}), false)"
        try:
            kept = reference.execute(kept_sql).to_arrow_table().to_pylist()
        except duckdb.Error:
            # DuckDB cannot evaluate it over every row (a cast that fails on some value). The
            # delete may refuse it, or succeed where the rows that fail lie only in files whose
            # statistics rule a match out (as DuckDB's own row-group skipping would): there is
            # no unpruned answer to compare with, so it is only counted.
            undecidable += 1
            continue
        expected = canonical([tuple(r.values()) for r in kept])
        result = delete_rows(meta=meta, objects=objects, table=TABLE, where=where)
        got = canonical(
            [tuple(r.values()) for r in engine.query(f"SELECT * FROM {TABLE}").rows.to_pylist()]
        )
        if got != expected:
            mismatches.append(f"#{number}: {where}\n  kept {len(got)} rows, want {len(expected)}")
        elif everything is not None and result.rows_deleted != everything[0] - len(expected):
            mismatches.append(f"#{number}: {where}\n  reported {result.rows_deleted} deleted")
        if 0 < len(expected) < (everything or (0,))[0]:
            partial += 1
        _undo(meta, objects, start)

    # Then every delete kept exactly the rows it should have, and the cases were varied
    assert not mismatches, (
        f"seed {SEED}: {len(mismatches)} of {PREDICATES} deletes differ:\n"
        + "\n".join(mismatches[:5])
    )
    assert partial > PREDICATES // 4, f"only {partial} deletes removed some but not all rows"
    assert undecidable < PREDICATES // 5


def _undo(meta: MetaStore, objects: LocalObjectStore, start: int) -> None:
    if meta.get_table(TABLE).head_snapshot_id != start:
        rollback_table(meta=meta, objects=objects, table=TABLE, to_snapshot=start)
