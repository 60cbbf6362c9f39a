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

import pyarrow as pa

from icefloe import duck
from icefloe.duck import ident, string_literal
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.metastore.models import ChangedFiles, DataFile
from icefloe.metastore.store import MetaStore
from icefloe.query.views import files_source, view_body
from icefloe.spec import TableSpec
from icefloe.storage import ObjectStore

CHANGE_COLUMN = "_change"
SNAPSHOT_COLUMN = "_snapshot"


@dataclass(frozen=True, slots=True)
class ChangeFeed:
    """The net changes of ``table`` in ``(since_snapshot, until_snapshot]``. A consumer stores
    ``until_snapshot`` and asks for the changes since it next time."""

    table: str
    since_snapshot: int
    until_snapshot: int
    rows: pa.Table  # until's columns, then _row_id, _change ('insert'/'delete'), _snapshot
    spec: TableSpec  # the table's spec at until: the schema the rows are in
    files_read: int  # files whose rows were read (added and removed ones)
    files_row_ids_read: int  # files passed through, of which only the row ids were read
    bytes_read: int  # the sizes of the files read whole

    @property
    def inserts(self) -> int:
        return self._count("insert")

    @property
    def deletes(self) -> int:
        return self._count("delete")

    def _count(self, change: str) -> int:
        column = self.rows.column(CHANGE_COLUMN).to_pylist()
        return sum(1 for c in column if c == change)


def read_changes(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    table: str,
    since_snapshot: int,
    until_snapshot: int | None = None,
    configure: Callable[[Any], None] | None = None,
) -> ChangeFeed:
    """The net changes of ``table`` after snapshot ``since_snapshot`` up to and including
    ``until_snapshot`` (the head by default); see the module's text. ``since_snapshot`` 0 is
    the table before its first commit, while none of its snapshots has expired."""
    changed = meta.changed_files(table, since=since_snapshot, until=until_snapshot)
    info = meta.get_table(table)
    spec = (
        info.spec
        if info.spec.version == changed.spec_version
        else meta.table_spec(table, version=changed.spec_version)
    )
    con = duck.connect()
    try:
        if configure is not None:
            configure(con)
        rows = _changes(con, spec, changed, objects)
    finally:
        con.close()
    read = (*changed.added, *changed.removed)
    return ChangeFeed(
        table=table,
        since_snapshot=changed.since,
        until_snapshot=changed.until,
        rows=rows,
        spec=spec,
        files_read=len(read),
        files_row_ids_read=len(changed.passed),
        bytes_read=sum(f.size_bytes for f in read),
    )


def _changes(con: Any, spec: TableSpec, changed: ChangedFiles, objects: ObjectStore) -> pa.Table:
    def rows(files: Sequence[DataFile]) -> str:
        source = files_source(spec, [(objects.uri(f.path), f.spec_version) for f in files])
        return view_body(spec, source, None)

    row_id = ident(ROW_ID_COLUMN)
    con.execute(
        f"CREATE TEMP TABLE inserted AS {rows(changed.added)} EXCEPT ALL {rows(changed.removed)}"
    )
    con.execute(
        f"CREATE TEMP TABLE deleted AS {rows(changed.removed)} EXCEPT ALL {rows(changed.added)}"
    )
    every = (*changed.added, *changed.removed, *changed.passed)
    lifetimes = ", ".join(
        f"({string_literal(objects.uri(f.path))}, {f.begin_snapshot},"
        f" {'NULL' if f.end_snapshot is None else f.end_snapshot})"
        for f in every
    )
    uris = ", ".join(string_literal(objects.uri(f.path)) for f in every)
    if every:
        # When each changed row was live: one interval [begin, end) per file holding it
        con.execute(
            f"CREATE TEMP TABLE life AS SELECT r.{row_id} AS id, l.b, l.e"
            f" FROM (SELECT {row_id}, filename FROM read_parquet([{uris}],"
            " hive_partitioning = false, filename = true)"
            f" WHERE {row_id} IN (SELECT {row_id} FROM inserted"
            f" UNION SELECT {row_id} FROM deleted)) r"
            f" JOIN (VALUES {lifetimes}) l(uri, b, e) ON r.filename = l.uri"
        )
    else:
        con.execute("CREATE TEMP TABLE life (id BLOB, b BIGINT, e BIGINT)")
    since, until = changed.since, changed.until
    # A start is an interval no other of the row's ends at (a merge's output continues its
    # inputs' intervals); an end is one no other begins at.
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
    return con.execute(
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
