"""Schema changes: ``icefloe table alter``.

A change is a new version of the table's spec (:func:`icefloe.spec.evolution.evolve`) and a
snapshot that records it; no data file is rewritten. Queries at that snapshot and after see
the new schema, queries pinned before it the old one. Files keep the version they were written
at and every reader (queries, merges, deletes, Spark compaction and reads, the notebook
client) maps their columns to the current ones by id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from icefloe.errors import SpecError
from icefloe.merge.modes import check_merge_query
from icefloe.metastore.store import MetaStore
from icefloe.query.generated import check_generated_columns
from icefloe.spec import TableSpec, parse_schema, validate_column_name
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


@dataclass(frozen=True, slots=True)
class AlterResult:
    """A committed schema change."""

    table: str
    snapshot_id: int
    spec_version: int
    changes: tuple[str, ...]  # each in words: "rename column a to b"
    spec: TableSpec  # the new spec


def alter_table(*, meta: MetaStore, table: str, changes: Sequence[SchemaChange]) -> AlterResult:
    """Apply ``changes`` in order as one new spec version. SpecError (naming the change) when
    one cannot be made, and then nothing changes."""

    def evolved(current: TableSpec) -> TableSpec:
        spec = evolve(current, changes)
        check_spec_sql(spec)  # the spec's SQL must still fit the columns
        return spec

    result = meta.alter_table(table, evolved)
    return AlterResult(
        table=table,
        snapshot_id=result.snapshot_id,
        spec_version=result.spec.version,
        changes=tuple(map(describe, changes)),
        spec=result.spec,
    )


def check_spec_sql(spec: TableSpec) -> None:
    """Refuse a spec whose SQL DuckDB would refuse later: a custom merge query
    (:func:`icefloe.merge.modes.check_merge_query`) or a generated column's expression
    (:func:`icefloe.query.generated.check_generated_columns`). Run before a table is created
    and on each new version of its spec."""
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
