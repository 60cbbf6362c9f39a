"""Pinned reads: a snapshot resolved (the head, an id, or as of a time) and its files listed
from the same connection, so that the listing is the complete file list of the snapshot that
was resolved whatever commits or janitor runs happen meanwhile."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from icefloe.errors import InvalidInputError, SnapshotNotFoundError, TableNotFoundError
from icefloe.metastore.access import Conn
from icefloe.metastore.file_filter import FileCondition, StatNames, render
from icefloe.metastore.models import DataFile, FileListing, JsonScalar, TableInfo
from icefloe.metastore.rows import FILE_COLUMNS, data_file, spec_of
from icefloe.spec import TableSpec


def integer_argument(name: str, value: object) -> int:
    """``value`` as an int, if it is an integer (a bool, a float or a text is not one): a
    snapshot or table id given by a caller, refused naming ``name`` otherwise."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    raise InvalidInputError(f"{name} must be an integer, not {value!r} ({type(value).__name__})")


def moment_argument(name: str, value: object) -> datetime:
    """``value`` as an aware datetime (a naive one is UTC), whatever the meta store session's
    time zone; anything else is refused naming ``name``."""
    if not isinstance(value, datetime):
        raise InvalidInputError(
            f"{name} must be a datetime, not {value!r} ({type(value).__name__})"
        )
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Pin:
    table: str
    table_id: int
    snapshot_id: int
    spec_version: int  # the snapshot's (the table's current one at its head)


class PinnedSnapshot:
    """A resolved snapshot and the connection that resolved it (see :meth:`MetaStore.pin` and
    :meth:`MetaStore.read_tables`)."""

    def __init__(self, conn: Conn, pin: Pin) -> None:
        self._conn = conn
        self._pin = pin
        self.table = pin.table
        self.snapshot_id = pin.snapshot_id
        self.spec_version = pin.spec_version

    def spec(self, current: TableSpec) -> TableSpec:
        """The spec a read of this snapshot uses: the version the snapshot was committed at
        (``current``, the table's spec now, unless the schema changed since)."""
        if current.version == self.spec_version:
            return current
        row = self._conn.execute(
            "SELECT spec FROM table_specs WHERE table_id = %s AND spec_version = %s",
            (self._pin.table_id, self.spec_version),
        ).fetchone()
        if row is None:
            raise SnapshotNotFoundError(
                f"table {self.table!r}: spec version {self.spec_version} of snapshot"
                f" {self.snapshot_id} is not recorded"
            )
        return spec_of(row[0])

    def files(
        self,
        *,
        start_from: datetime | None = None,
        start_before: datetime | None = None,
        partition_equals: Mapping[str, JsonScalar] | None = None,
        may_match: FileCondition | None = None,
        renamed: StatNames | None = None,
    ) -> FileListing:
        """The snapshot's live files whose partition period starts in the window (and whose
        partition values equal ``partition_equals``), of which those ``may_match`` lets through
        (:mod:`icefloe.metastore.file_filter`) are returned: one lean query, so that planning
        stays cheap at 10^5 files. In no particular order (sorting 10^5 rows cost a third of
        the listing); the set is what a snapshot guarantees."""
        if self.snapshot_id == 0:
            return FileListing(paths=(), sizes=(), row_counts=(), spec_versions=(), considered=0)
        where, params = live_at(
            self._pin.table_id,
            self.snapshot_id,
            start_from=start_from,
            start_before=start_before,
        )
        for i, (name, value) in enumerate(sorted((partition_equals or {}).items())):
            where = sql.SQL("{} AND partition_values -> {} = {}").format(
                where, sql.Placeholder(f"partition_name_{i}"), sql.Placeholder(f"partition_{i}")
            )
            params[f"partition_name_{i}"] = name
            params[f"partition_{i}"] = Jsonb(value)
        # One statement, one row: the files to read as one text (a row per file, four fields
        # each), their count, how many live files the window left (only when statistics
        # narrow them further, else the same number), and whether the snapshot is still
        # unexpired (an expired one's files may be partly forgotten). One row, not a row per
        # file: 10^5 row objects cost a plan two passes of the garbage collector (about 90 ms
        # of a 160 ms listing); one text costs a split.
        query = sql.SQL(
            "SELECT string_agg(path || E'\\t' || size_bytes || E'\\t' || row_count || E'\\t'"
            " || spec_version, E'\\n'), count(*), {considered},"
            " EXISTS (SELECT FROM snapshots WHERE table_id = %(table_id)s"
            " AND snapshot_id = %(at)s AND expired_at IS NULL)"
            " FROM data_files WHERE {where}{needed}"
        ).format(
            considered=sql.SQL("(SELECT count(*) FROM data_files WHERE {})").format(where)
            if may_match is not None
            else sql.SQL("NULL"),
            where=where,
            needed=sql.SQL(" AND {}").format(
                _with_parameters(render(may_match, renamed=renamed), self._conn)
            )
            if may_match is not None
            else sql.SQL(""),
        )
        # Not prepared: a generic plan (Postgres's choice after a few runs of a prepared
        # statement) cannot use the snapshot id to pick the index, and was 1.7x slower at 10^5.
        row = self._conn.execute(query, params, prepare=False).fetchone()
        assert row is not None  # an aggregate without GROUP BY answers one row
        text, matched, considered, unexpired = row
        if not unexpired:
            raise SnapshotNotFoundError(
                f"snapshot {self.snapshot_id} of table {self.table!r} expired before its"
                " files were listed (older than the table's retention); query again"
            )
        fields = text.replace("\t", "\n").split("\n") if text is not None else []
        if len(fields) != 4 * matched:
            # Only a path holding a tab or a line break, which no valid key does.
            raise InvalidInputError(
                f"table {self.table!r}, snapshot {self.snapshot_id}: a file path in the meta"
                " store holds a control character"
            )
        paths = tuple(fields[0::4])
        sizes, row_counts, spec_versions = (tuple(map(int, fields[k::4])) for k in (1, 2, 3))
        if considered is None:
            considered = len(paths)
        return FileListing(
            paths=paths,
            sizes=sizes,
            row_counts=row_counts,
            spec_versions=spec_versions,
            considered=considered,
        )


class TablesRead:
    """Tables read in one transaction (see :meth:`MetaStore.read_tables`)."""

    def __init__(self, conn: Conn, tables: Mapping[str, TableInfo]) -> None:
        self._conn = conn
        self.tables = dict(tables)

    def pin(
        self, table: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> PinnedSnapshot:
        """The snapshot a read of ``table`` pins (as :meth:`MetaStore.resolve_snapshot`), in
        this transaction."""
        info = self.tables.get(table)
        if info is None:
            raise TableNotFoundError(f"no table named {table!r}")
        pin = resolve_from(
            self._conn,
            table,
            info.table_id,
            info.head_snapshot_id,
            info.spec.version,
            snapshot_id=snapshot_id,
            as_of=as_of,
        )
        return PinnedSnapshot(self._conn, pin)


def resolve(conn: Conn, table: str, *, snapshot_id: int | None, as_of: datetime | None) -> Pin:
    head = conn.execute(
        "SELECT table_id, head_snapshot_id, spec_version FROM lake_tables"
        " WHERE name = %s AND dropped_at IS NULL",
        (table,),
    ).fetchone()
    if head is None:
        raise TableNotFoundError(f"no table named {table!r}")
    return resolve_from(
        conn,
        table,
        int(head[0]),
        int(head[1]),
        int(head[2]),
        snapshot_id=snapshot_id,
        as_of=as_of,
    )


def resolve_from(
    conn: Conn,
    table: str,
    table_id: int,
    head_snapshot_id: int,
    head_spec_version: int,
    *,
    snapshot_id: int | None,
    as_of: datetime | None,
) -> Pin:
    if snapshot_id is None and as_of is None:
        return Pin(table, table_id, head_snapshot_id, head_spec_version)
    if snapshot_id is not None:
        snapshot_id = integer_argument("snapshot_id", snapshot_id)
        row = conn.execute(
            "SELECT snapshot_id, expired_at, spec_version FROM snapshots"
            " WHERE table_id = %s AND snapshot_id = %s",
            (table_id, snapshot_id),
        ).fetchone()
        wanted = f"snapshot {snapshot_id}"
    else:
        as_of = moment_argument("as_of", as_of)
        row = conn.execute(
            "SELECT snapshot_id, expired_at, spec_version FROM snapshots"
            " WHERE table_id = %s AND committed_at <= %s"
            " ORDER BY snapshot_id DESC LIMIT 1",
            (table_id, as_of),
        ).fetchone()
        wanted = f"snapshot as of {as_of}"
    if row is None:
        raise SnapshotNotFoundError(f"table {table!r} has no {wanted}")
    if row[1] is not None:
        raise SnapshotNotFoundError(
            f"table {table!r}: {wanted} (snapshot {row[0]}) has expired"
            " (older than the table's retention)"
        )
    return Pin(table, table_id, int(row[0]), int(row[2]))


def live_at(
    table_id: int,
    snapshot_id: int,
    *,
    partitions: Sequence[str] | None = None,
    start_from: datetime | None = None,
    start_before: datetime | None = None,
) -> tuple[sql.Composed, dict[str, Any]]:
    """The WHERE clause (and its parameters) of the files live at a snapshot."""
    where = [
        sql.SQL("table_id = %(table_id)s"),
        sql.SQL("begin_snapshot <= %(at)s"),
        sql.SQL("(end_snapshot IS NULL OR end_snapshot > %(at)s)"),
    ]
    params: dict[str, Any] = {"table_id": table_id, "at": snapshot_id}
    if partitions is not None:
        where.append(sql.SQL("partition_path = ANY(%(partitions)s)"))
        params["partitions"] = list(partitions)
    if start_from is not None:
        where.append(sql.SQL("partition_start >= %(start_from)s"))
        params["start_from"] = start_from
    if start_before is not None:
        where.append(sql.SQL("partition_start < %(start_before)s"))
        params["start_before"] = start_before
    return sql.SQL(" AND ").join(where), params


def files_at(
    conn: Conn,
    table_id: int,
    snapshot_id: int,
    *,
    partitions: Sequence[str] | None = None,
    start_from: datetime | None = None,
    start_before: datetime | None = None,
) -> list[DataFile]:
    where, params = live_at(
        table_id,
        snapshot_id,
        partitions=partitions,
        start_from=start_from,
        start_before=start_before,
    )
    query = sql.SQL("SELECT {columns} FROM data_files WHERE {where} ORDER BY file_id").format(
        columns=sql.SQL(FILE_COLUMNS), where=where
    )
    return [data_file(row) for row in conn.execute(query, params).fetchall()]


def _with_parameters(expression: sql.Composable, conn: Conn) -> sql.SQL:
    """``expression`` (literals inlined) as text for a statement run with parameters: each
    ``%`` in it doubled, since psycopg reads the statement's ``%`` as placeholders (a literal
    ``'100%'`` would fail, and ``'%%'`` would compare as ``'%'``)."""
    return sql.SQL(expression.as_string(conn).replace("%", "%%"))
