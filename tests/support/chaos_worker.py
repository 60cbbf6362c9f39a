"""One process of the chaos test (``tests/chaos/test_chaos.py``): a role run in a loop until it
is killed. Every process joins the embedded meta store under ``ICEFLOE_HOME`` on start, so
kills also land while that server is being started or joined.

    python chaos_worker.py insert SLOT START   # batches SLOT-START, SLOT-START+1, ...
    python chaos_worker.py merge | compact | gc | delete | alter

An insert prints ``ACK <key> <snapshot>`` once its batch is committed: the test counts a batch
as acknowledged only when that line arrived. Known errors (icefloe's own) are reported on stderr
and the loop goes on, as a deployed function would be invoked again; anything else ends the
process with a traceback, which the test reports as a failure.
"""

from __future__ import annotations

import itertools
import sys
import time
from datetime import datetime, timedelta

from icefloe.compaction.local import compact_locally
from icefloe.errors import IcefloeError
from icefloe.ingest import Inserter
from icefloe.janitor import Janitor
from icefloe.lifecycle import alter_table, delete_rows
from icefloe.lifecycle.alter import add_column, drop_column, rename_column
from icefloe.merge import MergeWorker, merge_locally
from icefloe.runtime import Runtime
from icefloe.settings import load_settings
from icefloe.spec.evolution import SchemaChange

TABLE = "chaos"
SCHEMA = "ts TIMESTAMP NOT NULL, batch VARCHAR NOT NULL, i INTEGER NOT NULL, v BIGINT NOT NULL"
ROWS_PER_BATCH = 20
# The delete role removes the last row of every batch, again and again.
DOOMED = f"i = {ROWS_PER_BATCH - 1}"
START = datetime(2026, 11, 1)


def batch_rows(key: str, n: int) -> list[dict[str, object]]:
    """The rows of batch ``key`` (the ``n``-th of its slot): the same rows on every retry."""
    return [
        {
            "ts": (
                START + timedelta(minutes=(n * ROWS_PER_BATCH + i) * 7 % (2 * 24 * 60))
            ).isoformat(),
            "batch": key,
            "i": i,
            "v": n * 1000 + i,
        }
        for i in range(ROWS_PER_BATCH)
    ]


def _insert(runtime: Runtime, slot: str, start: int) -> None:
    inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
    for n in itertools.count(start):
        key = f"{slot}-{n}"
        while True:
            try:
                result = inserter.insert_rows(TABLE, batch_rows(key, n), idempotency_key=key)
                break
            except IcefloeError as e:  # a retry with the same key, as a client would
                print(f"insert {key}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                time.sleep(0.05)
        print(f"ACK {key} {result.snapshot_id}", flush=True)


def _merge(runtime: Runtime) -> None:
    worker = MergeWorker(meta=runtime.meta, objects=runtime.objects)
    while True:
        merge_locally(meta=runtime.meta, worker=worker, table=TABLE)
        time.sleep(0.05)


def _compact(runtime: Runtime) -> None:
    while True:
        compact_locally(
            meta=runtime.meta,
            objects=runtime.objects,
            settings=runtime.settings,
            table=TABLE,
            engine="duckdb",
        )
        time.sleep(0.3)


def _gc(runtime: Runtime) -> None:
    janitor = Janitor(meta=runtime.meta, objects=runtime.objects)
    while True:
        janitor.run(table=TABLE)
        time.sleep(0.3)


def _delete(runtime: Runtime) -> None:
    while True:
        delete_rows(meta=runtime.meta, objects=runtime.objects, table=TABLE, where=DOOMED)
        time.sleep(0.3)


def _alter(runtime: Runtime) -> None:
    """A scratch column added, renamed and dropped, round and round: files of many schema
    versions under every other role (which never name it)."""
    while True:
        names = runtime.meta.get_table(TABLE).spec.column_names
        if "note" in names:
            change: SchemaChange = rename_column("note=memo")
        elif "memo" in names:
            change = drop_column("memo")
        else:
            change = add_column("note VARCHAR")
        alter_table(meta=runtime.meta, table=TABLE, changes=[change])
        time.sleep(0.5)


def main(argv: list[str]) -> None:
    role = argv[0]
    with Runtime.open(load_settings().core, max_connections=3) as runtime:
        print("READY", flush=True)
        while True:
            try:
                if role == "insert":
                    _insert(runtime, argv[1], int(argv[2]))
                elif role == "merge":
                    _merge(runtime)
                elif role == "compact":
                    _compact(runtime)
                elif role == "gc":
                    _gc(runtime)
                elif role == "delete":
                    _delete(runtime)
                elif role == "alter":
                    _alter(runtime)
                else:
                    raise SystemExit(f"unknown role {role!r}")
            except IcefloeError as e:
                print(f"{role}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                time.sleep(0.1)


if __name__ == "__main__":
    main(sys.argv[1:])
