"""A whole-partition merge leaves exactly the rows its merge mode's rule gives in plain DuckDB.

Random tables (see :mod:`support.merge_fuzz`): partitioned by day, by an identity column, by
both or not at all; merged by append, replace (one or two keys, now and then a partition
source among them, with or without a version of one of six types) or aggregate (sum, count,
min, max and any over INTEGER, BIGINT, DOUBLE and DECIMAL columns; partition sources as keys
or min/max/any); NULLs in keys, versions and values, keys repeated across batches, versions
that tie, and in half the tables values near their type's limits, so that some sums leave the
type. Each table gets a few batches, one commit each (every batch touches every partition, so
each partition has a file per commit), and, in some cases, local merges before the last batch
(compaction then reads files merges wrote).

Then the rows are read from the table's files with their ``_row_id`` into plain DuckDB, the
rule applied there per partition (:func:`support.merge_fuzz.oracle`), and the table compacted
with the DuckDB engine (``icefloe compact T --engine duckdb``: every partition whole). The
table's rows afterwards (read from its files, all columns and ``_row_id``, with their
partition) must be the oracle's: exact values, one of the group's values for ``any``, DOUBLE
sums within rounding; the meta store's row counts must be the rows in the files, and the
compaction's counts the rows read. Whatever the merges before it did, a replace or append
table must also hold what the rule gives over the rows as inserted, and an aggregate table's
groups must re-aggregate to the inserted rows' totals.

Knobs: ``ICEFLOE_FUZZ_SEED``; ``ICEFLOE_MERGE_FUZZ`` (cases, default 128, about 45 s in one
process); ``ICEFLOE_MERGE_FUZZ_ROWS`` (extra rows per batch, default 12: thousands make
DuckDB's parallel aggregation and sorting matter).
"""

from __future__ import annotations

import os
import random
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from icefloe import duck
from icefloe.compaction.local import compact_locally
from icefloe.config import CoreSettings
from icefloe.ingest import Inserter
from icefloe.merge import MergeWorker, merge_locally
from icefloe.metastore.store import MetaStore
from icefloe.settings import load_settings
from icefloe.storage import LocalObjectStore
from support.merge_fuzz import (
    START,
    Case,
    Column,
    create_rows_table,
    differences,
    load_files,
    oracle,
    random_case,
    rollup_differences,
    rollups,
)

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("ICEFLOE_FUZZ_SEED", "20261125"))
CASES = int(os.environ.get("ICEFLOE_MERGE_FUZZ", "128"))
EXTRA_ROWS = int(os.environ.get("ICEFLOE_MERGE_FUZZ_ROWS", "12"))
SHARDS = 4


@pytest.mark.timeout(900)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_whole_partition_merges_match_the_rule_in_duckdb(
    meta: MetaStore, tmp_path: Path, shard: int
) -> None:
    objects = LocalObjectStore(tmp_path / "warehouse")
    settings = load_settings({"ICEFLOE_HOME": str(tmp_path / "home")}).core
    inserter = Inserter(meta=meta, objects=objects)
    worker = MergeWorker(meta=meta, objects=objects)
    con = duck.connect()
    mismatches: list[str] = []
    counts = dict.fromkeys(
        ("cases", "append", "replace", "aggregate", "merged_between", "rows_in", "rows_out"), 0
    )
    counts |= dict.fromkeys(("unkeyed_rows", "unfit_rows", "partitions"), 0)
    try:
        for number in range(shard, CASES, SHARDS):
            rng = random.Random(f"{SEED}:{number}")
            case = random_case(rng, f"m{number}", extra_rows=EXTRA_ROWS)
            try:
                problems = run_case(meta, objects, settings, inserter, worker, con, case, counts)
            except Exception as e:  # the case's description is what tells what failed
                problems = [f"raised {type(e).__name__}: {e}"]
            if problems:
                mismatches.append(
                    f"case {number} ({case.describe()}):\n  " + "\n  ".join(problems[:6])
                )
            counts["cases"] += 1
            counts[case.kind] += 1
    finally:
        con.close()
        worker.close()
        inserter.close()
    assert not mismatches, (
        f"seed {SEED}, shard {shard}: {len(mismatches)} of {counts['cases']} merges differ from"
        " the rule applied in DuckDB:\n" + "\n".join(mismatches[:4])
    )
    # The cases were varied: both modes that drop rows, rows without a key, sums that left
    # their type
    assert counts["rows_out"] < counts["rows_in"], counts
    if counts["cases"] >= 20:
        assert min(counts["replace"], counts["aggregate"]) > 0, counts
        assert counts["merged_between"] > 0, counts
        assert counts["unkeyed_rows"] > 0, counts
        assert counts["unfit_rows"] > 0, counts


def run_case(
    meta: MetaStore,
    objects: LocalObjectStore,
    settings: CoreSettings,
    inserter: Inserter,
    worker: MergeWorker,
    con: duckdb.DuckDBPyConnection,
    case: Case,
    counts: dict[str, int],
) -> list[str]:
    """Fill the case's table, compact it, and list how its rows differ from the oracle's."""
    meta.create_table(case.spec())
    for table in ("inserted", "before", "after"):
        create_rows_table(con, case, table)
    problems: list[str] = []
    for number, batch in enumerate(case.batches):
        written = set(inserter.insert_arrow(case.name, case.arrow(batch)).files)
        # (every row inserted, with the row id the insert gave it)
        new = [f for f in meta.files(case.name) if f.path in written]
        problems += load_files(con, objects, case, new, "inserted")
        if case.merge_between and number == len(case.batches) - 2:
            report = merge_locally(meta=meta, worker=worker, table=case.name, until_quiet=True)
            counts["merged_between"] += report.count("committed")
    # Given the table's rows, read from its files with their row ids
    before = meta.files(case.name)
    partitions = {f.partition_path for f in before}
    problems += load_files(con, objects, case, before, "before")
    want = oracle(con, case, "before")
    # When every partition is compacted whole
    result = compact_locally(
        meta=meta,
        objects=objects,
        settings=settings,
        table=case.name,
        engine="duckdb",
        worker=worker,
    )
    compacted = set() if result is None else {p.partition_path for p in result.partitions}
    statuses = set() if result is None else {p.status for p in result.partitions}
    if compacted != partitions or statuses != {"committed"}:
        problems.append(
            f"compacted {sorted(compacted)} ({sorted(statuses)}), partitions {sorted(partitions)}"
        )
    # Then the table holds the oracle's rows, and the meta store and the compaction count them
    after = meta.files(case.name)
    problems += load_files(con, objects, case, after, "after")
    got = _rows(con, "SELECT * EXCLUDE (__file) FROM after")
    problems += differences(want, got)
    if result is not None:
        reported = (
            sum(p.rows_in for p in result.partitions),
            sum(p.rows_out for p in result.partitions),
        )
        if reported != (sum(f.row_count for f in before), len(got)):
            problems.append(f"compaction reported {reported} rows in and out")
    # and whatever merged before, what the inserted rows give: for replace and append the
    # same rows, for aggregate the same totals per group
    if case.kind == "aggregate":
        problems += rollup_differences(rollups(con, case, "inserted"), rollups(con, case, "after"))
    else:
        problems += differences(oracle(con, case, "inserted"), got)
    counts["rows_in"] += _count(con, "inserted")
    counts["rows_out"] += len(got)
    counts["unfit_rows"] += sum(1 for e in want.values() if e.kept_whole)
    counts["partitions"] += len(partitions)
    if case.kind != "append":
        unkeyed = " OR ".join(f"{k} IS NULL" for k in case.keys)
        counts["unkeyed_rows"] += _count(con, f"before WHERE {unkeyed}")
    return problems


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, object]]:
    return list(con.execute(sql).to_arrow_table().to_pylist())


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def test_a_wide_decimal_sum_that_fits_its_column_is_merged(meta: MetaStore, tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "warehouse")
    case = Case(
        name="wide",
        columns=[
            Column("ts", "TIMESTAMP", not_null=True),
            Column("k", "INTEGER"),
            Column("v", "DECIMAL(38,0)"),
        ],
        partition_by="day(ts)",
        kind="aggregate",
        keys=("k",),
        functions={"ts": "min", "v": "sum"},
    )
    meta.create_table(case.spec())
    inserter = Inserter(meta=meta, objects=objects)
    try:
        for value in (2 * 10**37, 3 * 10**37):  # 5e37 fits DECIMAL(38,0): 38 digits
            inserter.insert_arrow("wide", case.arrow([{"ts": START, "k": 1, "v": Decimal(value)}]))
    finally:
        inserter.close()
    compact_locally(
        meta=meta,
        objects=objects,
        settings=load_settings({"ICEFLOE_HOME": str(tmp_path / "home")}).core,
        table="wide",
        engine="duckdb",
    )
    con = duck.connect()
    try:
        create_rows_table(con, case, "after")
        assert not load_files(con, objects, case, meta.files("wide"), "after")
        assert _rows(con, "SELECT k, v FROM after") == [{"k": 1, "v": Decimal(5 * 10**37)}]
    finally:
        con.close()
