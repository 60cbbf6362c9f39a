"""Schema changes: ``icefloe table alter``.

A change is a new version of the table's spec (:func:`icefloe.spec.evolution.evolve`) and a
snapshot that records it; no data file is rewritten. Queries at that snapshot and after see
the new schema, queries pinned before it the old one. Files keep the version they were written
at and every reader (queries, merges, deletes, Spark compaction and reads, the notebook
client) maps their columns to the current ones by id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from icefloe import duck
from icefloe.errors import CommitConflictError, SpecError, StorageError
from icefloe.ingest.generated_values import generated_problem
from icefloe.ingest.sources import InsertLimits
from icefloe.merge.modes import check_merge_query
from icefloe.metastore.models import DataFile
from icefloe.metastore.store import MetaStore
from icefloe.query.generated import check_generated_columns
from icefloe.query.views import files_source
from icefloe.spec import Column, TableSpec, parse_schema, validate_column_name
from icefloe.spec.evolution import (
    AddColumn,
    AddField,
    DropColumn,
    RenameColumn,
    SchemaChange,
    WidenColumn,
    describe,
    evolve,
)
from icefloe.storage import ObjectStore

# Listings of a table's files whose rows gc collected (after a merge) while an added generated
# column was checked against them, before the alter gives up.
MAX_LISTINGS = 5


@dataclass(frozen=True, slots=True)
class AlterResult:
    """A committed schema change."""

    table: str
    snapshot_id: int
    spec_version: int
    changes: tuple[str, ...]  # each in words: "rename column a to b"
    spec: TableSpec  # the new spec


def alter_table(
    *,
    meta: MetaStore,
    table: str,
    changes: Sequence[SchemaChange],
    objects: ObjectStore | None = None,
    configure: Callable[[Any], None] | None = None,
) -> AlterResult:
    """Apply ``changes`` in order as one new spec version. SpecError (naming the change) when
    one cannot be made, or a rename keeps the name it has, and then nothing changes.

    A generated column added to a table that has files is computed from its expression for
    the rows of those files (see :func:`icefloe.query.views.files_source`); it is added only
    when every such row computes as insert would compute it, which reads the columns its
    expression names in every live file from ``objects`` (DuckDB set up by ``configure``): once
    before the head is locked, and again for any file committed meanwhile."""
    rows = _HeldRows(meta=meta, table=table, objects=objects, configure=configure)
    proposed = evolve(meta.get_table(table).spec, changes)  # first: "no such column"
    for change in changes:  # not a schema version whose rename changes nothing
        if isinstance(change, RenameColumn) and _keeps_its_name(change):
            raise SpecError(
                f"alter {table!r}: cannot {describe(change)}: that is its name already"
                " (nothing would change)"
            )
    check_spec_sql(proposed)  # refused before any file is read or the head is locked
    rows.check(proposed)

    def evolved(current: TableSpec) -> TableSpec:
        spec = evolve(current, changes)
        check_spec_sql(spec)  # the spec's SQL must still fit the columns
        rows.check(spec)  # the head is locked: no file is committed until this returns
        return spec

    result = meta.alter_table(table, evolved)
    return AlterResult(
        table=table,
        snapshot_id=result.snapshot_id,
        spec_version=result.spec.version,
        changes=tuple(map(describe, changes)),
        spec=result.spec,
    )


def _keeps_its_name(change: RenameColumn) -> bool:
    """A rename to the name it has: ``n=n``; for a field, ``c.f=c.f`` or ``c.f=f`` (a field's
    new name stays in its struct)."""
    if "." not in change.old:
        return change.new == change.old
    parent, _, name = change.old.rpartition(".")
    new_parent, dot, new_name = change.new.rpartition(".")
    return new_name == name and (not dot or new_parent == parent)


class _HeldRows:
    """The rows a table holds, checked against the generated columns a new spec version adds:
    each live file once."""

    def __init__(
        self,
        *,
        meta: MetaStore,
        table: str,
        objects: ObjectStore | None,
        configure: Callable[[Any], None] | None,
    ) -> None:
        self._meta, self._table, self._objects, self._configure = meta, table, objects, configure
        self._checked: set[int] = set()

    def check(self, spec: TableSpec) -> None:
        previous = {c.id for c in spec.layout_at(spec.version - 1).columns}
        added = [
            c
            for c, column_id in zip(spec.columns, spec.column_ids, strict=True)
            if c.generated and column_id not in previous
        ]
        if not added:
            return
        where = f"alter {self._table!r}: cannot add generated column"
        for _ in range(MAX_LISTINGS):
            files = [f for f in self._meta.files(self._table) if f.file_id not in self._checked]
            if not files:
                return
            if self._objects is None:
                raise SpecError(
                    f"{where} {added[0].name!r}: the table has files, and their rows are"
                    " checked against its expression; give the lake's object store"
                )
            try:
                self._check_files(spec, added, files, self._objects, where)
            except duckdb.IOException as e:
                # Not the expression's fault: a file could not be read. Files a merge replaced
                # and gc collected after the listing are listed again (their rows are in the
                # merge's output); a live file that cannot be read is the store's failure.
                self._raise_unless_collected(files, self._objects, e)
                continue
            self._checked.update(f.file_id for f in files)
            return
        raise CommitConflictError(
            f"alter {self._table!r}: gc collected files (merged meanwhile) of {MAX_LISTINGS}"
            " listings in a row while their rows were checked against the generated columns"
            " it adds; nothing changed (try again)"
        )

    def _check_files(
        self,
        spec: TableSpec,
        added: Sequence[Column],
        files: Sequence[DataFile],
        objects: ObjectStore,
        where: str,
    ) -> None:
        """SpecError when a row of ``files`` cannot take an ``added`` column's value; a file
        that cannot be read raises DuckDB's IOException."""
        uris = {f.file_id: objects.uri(f.path) for f in files}
        con = duck.connect()
        try:
            if self._configure is not None:
                self._configure(con)
            for column in added:
                problem = _problem(con, spec, column, [(uris[f.file_id], f) for f in files])
                if problem is not None:
                    uri, text = problem
                    raise SpecError(
                        f"{where} {column.name!r}: a row of {uri}, written before it, cannot"
                        f" take its value: {text}. Nothing changed; make the expression"
                        " hold for every row (TRY_CAST gives NULL where a CAST fails)"
                    )
        finally:
            con.close()

    def _raise_unless_collected(
        self, files: Sequence[DataFile], objects: ObjectStore, error: duckdb.IOException
    ) -> None:
        """Return when some of ``files`` are no longer live (by the meta store) and their
        objects are gone: collected after they were listed. Otherwise raise StorageError,
        naming the live files whose objects are missing, if any."""
        live = {
            f.file_id
            for f in self._meta.files_by_id(
                self._table, [f.file_id for f in files], statistics=False
            )
            if f.end_snapshot is None
        }
        missing = [f for f in files if objects.head(f.path) is None]
        if any(f.file_id not in live for f in missing):
            return
        first = str(error).strip().splitlines()[0] if str(error).strip() else "IO error"
        lost = ", ".join(f.path for f in missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise StorageError(
            f"alter {self._table!r}: could not read the rows of its files to check the generated"
            f" columns it adds{f' (live file(s) {lost} are missing)' if lost else ''}: {first};"
            " nothing changed"
        ) from error


def _problem(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    column: Column,
    files: Sequence[tuple[str, DataFile]],
) -> tuple[str, str] | None:
    """The first file (uri) with a row ``column`` cannot be computed for, and why."""

    def problem(group: Sequence[tuple[str, DataFile]]) -> str | None:
        source = files_source(spec, [(uri, f.spec_version) for uri, f in group])
        assert source is not None
        return generated_problem(con, spec, column, source, limits=InsertLimits())

    whole = problem(files)
    if whole is None:
        return None
    for uri, f in files:  # which file: one at a time, only once some row failed
        text = problem([(uri, f)])
        if text is not None:
            return uri, text
    return files[0][0], whole


def check_spec_sql(spec: TableSpec) -> None:
    """Refuse a spec whose SQL DuckDB would refuse later: a custom merge query
    (:func:`icefloe.merge.modes.check_merge_query`) or a generated column's expression
    (:func:`icefloe.query.generated.check_generated_columns`), which in a new version of the
    spec must read the columns and fields it read in the version before (by id, at the same
    type: a rename, a drop, a widening or two names swapped is refused, naming both). Run
    before a table is created and on each new version of its spec."""
    check_merge_query(spec)
    check_generated_columns(spec)


def add_column(text: str) -> AddColumn | AddField:
    """``"c TYPE"`` as a change (the CLI's ``--add-column``); ``"c.field TYPE"`` adds a field
    to struct column ``c``."""
    name, _, type_text = text.strip().partition(" ")
    if "." in name:
        if not type_text.strip():
            raise SpecError(f"--add-column takes 'name TYPE', got {text!r}")
        return AddField(name, type_text.strip())
    columns = parse_schema(text)
    if len(columns) != 1:
        raise SpecError(f"--add-column takes one 'name TYPE', got {text!r}")
    return AddColumn(columns[0])


def rename_column(text: str) -> RenameColumn:
    """``"old=new"`` as a change (the CLI's ``--rename-column``)."""
    old, sep, new = text.partition("=")
    if not sep or not old.strip() or not new.strip():
        raise SpecError(f"--rename-column takes 'old=new', got {text!r}")
    validate_column_name(new.strip().rpartition(".")[2])
    return RenameColumn(old.strip(), new.strip())


def widen_column(text: str) -> WidenColumn:
    """``"c TYPE"`` as a change (the CLI's ``--widen``)."""
    name, _, wider = text.strip().partition(" ")
    if not name or not wider.strip():
        raise SpecError(f"--widen takes 'name TYPE', got {text!r}")
    return WidenColumn(name, wider.strip())


def drop_column(text: str) -> DropColumn:
    """``"c"`` as a change (the CLI's ``--drop-column``)."""
    if not text.strip():
        raise SpecError("--drop-column takes a column name")
    return DropColumn(text.strip())
