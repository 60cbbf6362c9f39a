"""The table catalog: create, alter, publish and drop tables, and read them by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager

from psycopg import errors as pgerrors
from psycopg.types.json import Jsonb

from icefloe.errors import SpecError, TableExistsError, TableNotFoundError
from icefloe.metastore.access import StoreAccess
from icefloe.metastore.models import SpecCommit, TableInfo
from icefloe.metastore.pinned import TablesRead
from icefloe.metastore.rows import INSERT_SNAPSHOT, spec_of, table_info
from icefloe.spec import Publish, TableSpec


class Catalog(StoreAccess):
    """The meta store's tables (a part of :class:`~icefloe.metastore.store.MetaStore`)."""

    def create_table(self, spec: TableSpec) -> TableInfo:
        """Register a table. Raises :class:`TableExistsError` if the name is taken."""
        try:
            with self._connection() as conn, conn.transaction():
                row = conn.execute(
                    """
                    INSERT INTO lake_tables (name, spec, spec_version) VALUES (%s, %s, %s)
                    RETURNING table_id, name, spec, head_snapshot_id, created_at
                    """,
                    (spec.name, Jsonb(spec.to_dict()), spec.version),
                ).fetchone()
                assert row is not None
                conn.execute(
                    "INSERT INTO table_specs (table_id, spec_version, spec) VALUES (%s, %s, %s)",
                    (row[0], spec.version, Jsonb(spec.to_dict())),
                )
        except pgerrors.UniqueViolation as e:
            raise TableExistsError(f"table {spec.name!r} exists already") from e
        assert row is not None
        return table_info(row)

    def alter_table(self, name: str, evolve: Callable[[TableSpec], TableSpec]) -> SpecCommit:
        """Change a table's spec to ``evolve(current spec)``, the next version, and commit a
        snapshot that changes no file but records that version: reads at it and after use the
        new schema; a read pinned earlier keeps the schema it had. Holds the head lock, so it
        is ordered with every commit; files written at the old version and committed later
        are still read right (each file records its version)."""
        with self._connection() as conn, conn.transaction():
            row = conn.execute(
                "SELECT table_id, spec, head_snapshot_id FROM lake_tables"
                " WHERE name = %s AND dropped_at IS NULL FOR UPDATE",
                (name,),
            ).fetchone()
            if row is None:
                raise TableNotFoundError(f"no table named {name!r}")
            table_id, current, head = int(row[0]), spec_of(row[1]), int(row[2])
            spec = evolve(current)
            if spec.version != current.version + 1 or spec.name != current.name:
                raise SpecError(
                    f"alter of {name!r} must give version {current.version + 1} of the spec,"
                    f" named {current.name!r} (got version {spec.version} named {spec.name!r})"
                )
            snapshot_id = head + 1
            stored = Jsonb(spec.to_dict())
            with conn.pipeline(), conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO table_specs (table_id, spec_version, spec) VALUES (%s, %s, %s)",
                    (table_id, spec.version, stored),
                )
                cur.execute(
                    INSERT_SNAPSHOT,
                    (table_id, snapshot_id, head or None, "alter", None)
                    + (0,) * 6
                    + (None, None, spec.version),
                )
                cur.execute(
                    "UPDATE lake_tables SET spec = %s, spec_version = %s, head_snapshot_id = %s"
                    " WHERE table_id = %s",
                    (stored, spec.version, snapshot_id, table_id),
                )
        return SpecCommit(table=name, snapshot_id=snapshot_id, spec=spec)

    def set_publish(self, name: str, publish: Publish) -> TableInfo:
        """Turn a table's publication on (``"iceberg"``) or off (``"none"``). Not a schema
        change: the current spec version is updated in place and no snapshot is committed."""
        with self._connection() as conn, conn.transaction():
            row = conn.execute(
                "SELECT table_id, spec FROM lake_tables"
                " WHERE name = %s AND dropped_at IS NULL FOR UPDATE",
                (name,),
            ).fetchone()
            if row is None:
                raise TableNotFoundError(f"no table named {name!r}")
            spec = dataclasses.replace(spec_of(row[1]), publish=publish)
            stored = Jsonb(spec.to_dict())
            conn.execute(
                "UPDATE table_specs SET spec = %s WHERE table_id = %s AND spec_version = %s",
                (stored, row[0], spec.version),
            )
            updated = conn.execute(
                "UPDATE lake_tables SET spec = %s WHERE table_id = %s"
                " RETURNING table_id, name, spec, head_snapshot_id, created_at",
                (stored, row[0]),
            ).fetchone()
        assert updated is not None
        return table_info(updated)

    def drop_table(self, name: str) -> TableInfo:
        """Drop a table: from now on no listing, query, insert or merge sees it (a commit in
        flight fails), and a table of the same name may be created at once. Its objects and
        rows stay until the janitor purges them, after the table's retention."""
        with self._connection() as conn, conn.transaction():
            row = conn.execute(
                "UPDATE lake_tables SET dropped_at = now()"
                " WHERE name = %s AND dropped_at IS NULL"
                " RETURNING table_id, name, spec, head_snapshot_id, created_at",
                (name,),
            ).fetchone()
        if row is None:
            raise TableNotFoundError(f"no table named {name!r}")
        return table_info(row)

    def get_table(self, name: str) -> TableInfo:
        with self._autocommit() as conn:
            row = conn.execute(
                "SELECT table_id, name, spec, head_snapshot_id, created_at"
                " FROM lake_tables WHERE name = %s AND dropped_at IS NULL",
                (name,),
            ).fetchone()
        if row is None:
            raise TableNotFoundError(f"no table named {name!r}")
        return table_info(row)

    def table_spec(self, name: str, *, version: int) -> TableSpec:
        """The spec of table ``name`` at ``version`` (its current one, or an earlier one)."""
        with self._autocommit() as conn:
            row = conn.execute(
                "SELECT s.spec FROM table_specs s JOIN lake_tables t USING (table_id)"
                " WHERE t.name = %s AND t.dropped_at IS NULL AND s.spec_version = %s",
                (name, version),
            ).fetchone()
        if row is None:
            raise TableNotFoundError(f"table {name!r} has no spec version {version}")
        return spec_of(row[0])

    @contextmanager
    def read_tables(self, names: Collection[str]) -> Iterator[TablesRead]:
        """The tables among ``names`` (unknown names are simply absent): their specs and heads
        in one statement, then snapshots pinned and listed with :meth:`TablesRead.pin`.

        Each is one statement outside any transaction (one round trip each: a warm query whose
        plan is cached makes just the first). That is consistent because a snapshot's files
        never change, and the listing checks in the same statement that the snapshot is
        still live: the janitor forgets a file only after expiring every snapshot that saw
        it, so a listing of a live snapshot is complete, and one of an expired snapshot is
        :class:`SnapshotNotFoundError`, never a partial list."""
        with self._autocommit() as conn:
            rows = (
                conn.execute(
                    "SELECT table_id, name, spec, head_snapshot_id, created_at"
                    " FROM lake_tables WHERE name = ANY(%s) AND dropped_at IS NULL ORDER BY name",
                    (sorted(names),),
                ).fetchall()
                if names
                else []
            )
            yield TablesRead(conn, {info.name: info for info in map(table_info, rows)})

    def list_tables(self) -> list[TableInfo]:
        with self._autocommit() as conn:
            rows = conn.execute(
                "SELECT table_id, name, spec, head_snapshot_id, created_at"
                " FROM lake_tables WHERE dropped_at IS NULL ORDER BY name"
            ).fetchall()
        return [table_info(row) for row in rows]
