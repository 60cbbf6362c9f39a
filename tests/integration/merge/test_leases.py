"""Claims follow their lease settings everywhere: the local merge claims and renews with the
worker's lease (ICEFLOE_MERGE_LEASE_SECONDS), and a local DuckDB compaction keeps its long
lease instead of renewing it down to the merge default."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from icefloe.compaction import DEFAULT_COMPACTION_LEASE
from icefloe.compaction.local import compact_locally
from icefloe.merge import MergeWorker, merge_locally
from icefloe.settings import load_settings
from support.merge_lake import Lake

pytestmark = pytest.mark.integration


@pytest.fixture
def claim_log(lake: Lake, postgres_dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """Every lease set on a file, as (lease length) rows: a trigger in the test's own schema."""
    conn = psycopg.connect(postgres_dsn, autocommit=True)
    conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(lake.meta.schema)))
    conn.execute("CREATE TABLE claim_log (lease interval NOT NULL)")
    conn.execute(
        "CREATE FUNCTION log_claim() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " INSERT INTO claim_log VALUES (NEW.claim_expires_at - now()); RETURN NEW; END $$"
    )
    conn.execute(
        "CREATE TRIGGER log_claim AFTER UPDATE OF claim_expires_at ON data_files FOR EACH ROW"
        " WHEN (NEW.claim_expires_at IS NOT NULL) EXECUTE FUNCTION log_claim()"
    )
    yield conn
    conn.close()


def leases(conn: psycopg.Connection[tuple[object, ...]]) -> set[timedelta]:
    """The leases set (the trigger and the claim share a transaction, so they are exact)."""
    rows = conn.execute("SELECT DISTINCT date_trunc('minute', lease) FROM claim_log").fetchall()
    return {r[0] for r in rows}  # type: ignore[misc]


def test_a_local_merge_claims_and_renews_with_the_workers_lease(
    lake: Lake, claim_log: psycopg.Connection[tuple[object, ...]]
) -> None:
    lake.create()
    lake.insert_batches("events", batches=6, rows=50, days=1)
    lease = timedelta(hours=2)
    worker = MergeWorker(meta=lake.meta, objects=lake.objects, lease=lease)
    report = merge_locally(meta=lake.meta, worker=worker, until_quiet=True)
    assert report.count("committed") > 0
    assert leases(claim_log) == {lease}


def test_a_local_duckdb_compaction_keeps_the_compaction_lease(
    lake: Lake, claim_log: psycopg.Connection[tuple[object, ...]], tmp_path: object
) -> None:
    lake.create()
    lake.insert_batches("events", batches=6, rows=50, days=1)
    result = compact_locally(
        meta=lake.meta,
        objects=lake.objects,
        settings=load_settings({"ICEFLOE_HOME": str(tmp_path)}).core,
        table="events",
        engine="duckdb",
        worker=lake.worker,  # a merge worker with the default 30-minute lease
    )
    assert result is not None and {p.status for p in result.partitions} == {"committed"}
    assert leases(claim_log) == {DEFAULT_COMPACTION_LEASE}
