"""The change feed: the rows a table gained and lost between two snapshots.

The answer is the net difference between the table's rows at ``since`` and at ``until``: each
row (all its columns and its ``_row_id``) live at ``until`` and not at ``since`` is an
``insert``, each live at ``since`` and not at ``until`` a ``delete``, counted as multisets.
Only the files whose liveness differs between the two snapshots are read
(:meth:`icefloe.metastore.store.MetaStore.changed_files`); a file live at both holds the
same rows at both, so its rows cancel without being read.

- **Merges and compactions are invisible** where they keep rows as they are (append tables,
  and every rewrite that keeps a row's values): a row keeps its ``_row_id`` through every
  rewrite, so it is in both differences and cancels. A merge that changes rows (``replace``
  folding duplicates, ``aggregate`` rolling rows up, a custom ``sql:`` merge) changes the
  table, and the feed shows it: the rows it folded away as deletes, a row whose values it
  changed as a delete of the old values and an insert of the new ones.
- **Deletes are deletes; a rollback is the inserts and deletes it amounts to.** A row inserted
  and deleted inside the window is in neither snapshot, so it does not appear.
- **Rows are read in the schema of ``until``**, as a query pinned there reads them (renamed,
  widened, added and dropped columns by field id; generated columns computed for rows of files
  written before them).
- **``_snapshot``** is the snapshot that made the change: for an insert, the last one in the
  window from which the row stayed live until ``until`` (its insert, not a later merge); for a
  delete, the last one at which it stopped being live. Found from the row ids of every file
  live at some point of the window (for the files only passed through, their row ids alone
  are read). For a row whose values a merge changed, it is the last rewrite of the row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from icefloe import duck
from icefloe.duck import ident, string_literal
from icefloe.errors import SnapshotNotFoundError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.metastore.models import ChangedFiles, DataFile
from icefloe.metastore.pinned import integer_argument
from icefloe.metastore.store import MetaStore
from icefloe.query.executor import QueryReadError, first_line
from icefloe.query.views import files_source, view_body
from icefloe.spec import TableSpec
from icefloe.spec.merge import AppendMode, ReplaceMode
from icefloe.storage import ObjectStore

CHANGE_COLUMN = "_change"
SNAPSHOT_COLUMN = "_snapshot"
# The column DuckDB names each row's file in: user column names never start with '_'.
_FILE_COLUMN = "_icefloe_file"


@dataclass(frozen=True, slots=True)
class ChangeFeed:
    """The net changes of ``table`` in ``(since_snapshot, until_snapshot]``. A consumer stores
    ``until_snapshot`` and ``table_id``, and asks for the changes since that snapshot of that
    table next time: snapshot ids count from 1 in every table, so the id is what tells a
    position in this table from one in a table dropped and created again under its name."""

    table: str
    table_id: int  # the table's identity: a new table of the same name has another
    since_snapshot: int
    until_snapshot: int
    rows: pa.Table  # until's columns, then _row_id, _change ('insert'/'delete'), _snapshot
    spec: TableSpec  # the table's spec at until: the schema the rows are in
    files_read_whole: int  # files every row of which changed
    files_read_filtered: int  # files some rows of which changed: read for those
    files_row_ids_read: int  # the other files live at some point: their row ids alone
    bytes_of_files_read: int  # the sizes of the files read beyond their row ids

    @property
    def files_read(self) -> int:
        """Every file the feed opened: those live at one of the two snapshots, and those
        live only between them."""
        return self.files_read_whole + self.files_read_filtered + self.files_row_ids_read

    @property
    def inserts(self) -> int:
        return self._count("insert")

    @property
    def deletes(self) -> int:
        return self._count("delete")

    def _count(self, change: str) -> int:
        return int(pc.sum(pc.equal(self.rows.column(CHANGE_COLUMN), change)).as_py() or 0)


def read_changes(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    table: str,
    since_snapshot: int,
    until_snapshot: int | None = None,
    table_id: int | None = None,
    configure: Callable[[Any], None] | None = None,
) -> ChangeFeed:
    """The net changes of ``table`` after snapshot ``since_snapshot`` up to and including
    ``until_snapshot`` (the head by default); see the module's text. ``since_snapshot`` 0 is
    the table before its first commit, while none of its snapshots has expired.

    ``table_id`` (a previous feed's :attr:`ChangeFeed.table_id`), when given, must be the
    table's: a position taken from another table, or from an earlier table of that name
    (dropped, then created again), is refused with SnapshotNotFoundError rather than read as
    a position in this one. Snapshot ids and table ids must be integers (InvalidInputError)."""
    since = integer_argument("since_snapshot", since_snapshot)
    until = None if until_snapshot is None else integer_argument("until_snapshot", until_snapshot)
    wanted = None if table_id is None else integer_argument("table_id", table_id)
    info = meta.get_table(table)
    # The identity is checked again in the transaction that lists the files, so that the
    # files, the spec read here and the feed's table_id are of one table.
    changed = meta.changed_files(
        table, since=since, until=until, table_id=info.table_id if wanted is None else wanted
    )
    spec = (
        info.spec
        if info.spec.version == changed.spec_version
        else meta.table_spec(table, version=changed.spec_version)
    )
    con = duck.connect()
    try:
        if configure is not None:
            configure(con)
        rows, reads = _changes(con, spec, changed, objects)
    except (duckdb.IOException, duckdb.HTTPException) as e:
        # The files are listed in one transaction and read after it: a gc between the two
        # may have expired the window's snapshots and collected their files.
        _check_still_kept(meta, table, since=since, until=until, table_id=info.table_id)
        raise QueryReadError(
            f"change feed of {table!r} failed to read a file: {first_line(e)}"
        ) from e
    finally:
        con.close()
    return ChangeFeed(
        table=table,
        table_id=info.table_id,
        since_snapshot=changed.since,
        until_snapshot=changed.until,
        rows=rows,
        spec=spec,
        files_read_whole=len(reads.whole),
        files_read_filtered=len(reads.filtered),
        files_row_ids_read=len(reads.ids),
        bytes_of_files_read=sum(f.size_bytes for f in (*reads.whole, *reads.filtered)),
    )


def _check_still_kept(
    meta: MetaStore, table: str, *, since: int, until: int | None, table_id: int
) -> None:
    """After a read failed: a window whose snapshots the janitor expired (and whose files it
    collected) while the feed read them is named as such, not reported as a broken file."""
    try:
        meta.changed_files(table, since=since, until=until, table_id=table_id)
    except SnapshotNotFoundError as e:
        raise SnapshotNotFoundError(
            f"table {table!r}: the feed's snapshots expired while it read them and their files"
            f" were collected; read again ({e})"
        ) from e


@dataclass(frozen=True, slots=True)
class _Reads:
    """What a feed read: files whole, files for some of their rows, and files for their row
    ids alone."""

    whole: tuple[DataFile, ...]
    filtered: tuple[DataFile, ...]
    ids: tuple[DataFile, ...]


def _changes(
    con: Any, spec: TableSpec, changed: ChangedFiles, objects: ObjectStore
) -> tuple[pa.Table, _Reads]:
    row_id = ident(ROW_ID_COLUMN)
    every = (*changed.added, *changed.removed, *changed.passed)
    sides = ["a"] * len(changed.added) + ["r"] * len(changed.removed) + ["p"] * len(changed.passed)
    if every:
        # Every row id of every file live at some point of the window, with the interval
        # [begin, end) that file was live
        lifetimes = ", ".join(
            f"({string_literal(objects.uri(f.path))}, {n}, '{side}', {f.begin_snapshot},"
            f" {'NULL' if f.end_snapshot is None else f.end_snapshot})"
            for n, (f, side) in enumerate(zip(every, sides, strict=True))
        )
        uris = ", ".join(string_literal(objects.uri(f.path)) for f in every)
        # The file's name in a column of a reserved name: a user column may have any name
        # that does not start with '_' (``filename`` too, in files written before it was
        # dropped as much as after)
        con.execute(
            f"CREATE TEMP TABLE held AS SELECT r.{row_id} AS id, l.n, l.side, l.b, l.e"
            f" FROM read_parquet([{uris}], hive_partitioning = false,"
            f" filename = {string_literal(_FILE_COLUMN)}) r"
            f" JOIN (VALUES {lifetimes}) l(uri, n, side, b, e) ON r.{ident(_FILE_COLUMN)} = l.uri"
        )
    else:
        con.execute("CREATE TEMP TABLE held (id BLOB, n INTEGER, side VARCHAR, b BIGINT, e BIGINT)")
    if isinstance(spec.merge, AppendMode | ReplaceMode):
        reads = _changed_rows_by_id(con, spec, changed, objects, every)
    else:
        reads = _changed_rows_by_value(con, spec, changed, objects)
    since, until = changed.since, changed.until
    # When each changed row was live: a start is an interval no other of the row's ends at (a
    # merge's output continues its inputs' intervals); an end is one no other begins at.
    con.execute(
        "CREATE TEMP TABLE life AS SELECT id, b, e FROM held WHERE id IN"
        f" (SELECT {row_id} FROM inserted UNION SELECT {row_id} FROM deleted)"
    )
    con.execute(
        "CREATE TEMP TABLE made AS SELECT id,"
        f" max(b) FILTER (WHERE start AND b > {since}) AS began,"
        f" max(e) FILTER (WHERE finish AND e > {since} AND e <= {until}) AS ended,"
        f" max(b) FILTER (WHERE b > {since}) AS rewritten"
        " FROM (SELECT l.id, l.b, l.e,"
        "   NOT EXISTS (SELECT 1 FROM life p WHERE p.id = l.id AND p.e = l.b) AS start,"
        "   l.e IS NOT NULL AND NOT EXISTS"
        "     (SELECT 1 FROM life n WHERE n.id = l.id AND n.b = l.e) AS finish"
        " FROM life l) GROUP BY id"
    )
    rows = con.execute(
        f"SELECT * FROM ("
        f" SELECT i.*, 'insert' AS {CHANGE_COLUMN},"
        f"   CAST(coalesce(m.began, m.rewritten) AS BIGINT) AS {SNAPSHOT_COLUMN}"
        f" FROM inserted i LEFT JOIN made m ON m.id = i.{row_id}"
        f" UNION ALL"
        f" SELECT d.*, 'delete' AS {CHANGE_COLUMN},"
        f"   CAST(coalesce(m.ended, m.rewritten) AS BIGINT) AS {SNAPSHOT_COLUMN}"
        f" FROM deleted d LEFT JOIN made m ON m.id = d.{row_id})"
        f" ORDER BY {SNAPSHOT_COLUMN}, {CHANGE_COLUMN} = 'insert', {row_id}"
    ).to_arrow_table()
    return rows, reads


def _rows_sql(spec: TableSpec, files: Sequence[DataFile], objects: ObjectStore) -> str:
    source = files_source(spec, [(objects.uri(f.path), f.spec_version) for f in files])
    return view_body(spec, source, None)


def _changed_rows_by_id(
    con: Any,
    spec: TableSpec,
    changed: ChangedFiles,
    objects: ObjectStore,
    every: Sequence[DataFile],
) -> _Reads:
    """Tables whose rewrites keep every row's values (append and replace merges, deletes,
    rollbacks): a row id added and not removed is an insert, one removed and not added a
    delete. Only the files holding such rows are read beyond their row ids: whole when every
    row of theirs changed, else filtered to the changed ids."""
    row_id = ident(ROW_ID_COLUMN)
    whole: list[DataFile] = []
    filtered: list[DataFile] = []
    for name, side, other in (("inserted", "a", "r"), ("deleted", "r", "a")):
        con.execute(
            f"CREATE TEMP TABLE {name}_ids AS SELECT id, n FROM held WHERE side = '{side}'"
            f" AND id NOT IN (SELECT id FROM held WHERE side = '{other}')"
        )
        counts = dict(con.execute(f"SELECT n, count(*) FROM {name}_ids GROUP BY n").fetchall())
        complete = [every[n] for n, c in counts.items() if c == every[n].row_count]
        partial = [every[n] for n, c in counts.items() if c != every[n].row_count]
        parts = [_rows_sql(spec, complete, objects)]
        if partial:
            parts.append(
                f"SELECT * FROM ({_rows_sql(spec, partial, objects)})"
                f" WHERE {row_id} IN (SELECT id FROM {name}_ids)"
            )
        con.execute(f"CREATE TEMP TABLE {name} AS {' UNION ALL '.join(parts)}")
        whole += complete
        filtered += partial
    touched = {f.file_id for f in (*whole, *filtered)}
    return _Reads(
        whole=tuple(whole),
        filtered=tuple(filtered),
        ids=tuple(f for f in every if f.file_id not in touched),
    )


def _changed_rows_by_value(
    con: Any, spec: TableSpec, changed: ChangedFiles, objects: ObjectStore
) -> _Reads:
    """Tables whose merges change rows (aggregate, custom): the rows added and removed are
    compared whole, as multisets, so a row whose values a merge changed is a delete of its
    old values and an insert of its new ones."""
    added, removed = (_rows_sql(spec, files, objects) for files in (changed.added, changed.removed))
    con.execute(f"CREATE TEMP TABLE inserted AS {added} EXCEPT ALL {removed}")
    con.execute(f"CREATE TEMP TABLE deleted AS {removed} EXCEPT ALL {added}")
    return _Reads(whole=(*changed.added, *changed.removed), filtered=(), ids=changed.passed)
