"""Delete: remove the rows a predicate matches, in one new snapshot.

The query engine finds the files that may hold a matching row (its pruning, checked
differentially against unpruned reads, skips only files whose statistics prove no match).
Each of those is read once, and the predicate evaluated once per row, into a decided copy
(each row with its verdict); the count reported and the rewrite both come from that copy, so
they cannot disagree. A file without a match is left alone, a file whose every row matches is
removed, and any other is rewritten without the matching rows (sorted and cut into row groups
as a merge writes). Before anything commits, every changed file must lose exactly the rows
its verdicts named, counted by the meta store's own row counts (the file's, and its
rewrites'); otherwise nothing commits (:class:`RowCountMismatchError`). Removals and rewrites
commit together, so readers see all of a delete or none of it.

Rows inserted after the delete planned are not deleted: they are in files it did not read.
A merge that replaced a planned file first makes the commit a conflict; the delete then
deletes its rewrites and plans again over the merged file, as it does when gc collected the
replaced file before the delete read it (a live file it cannot read is a read error). A merge
still holding a planned file loses at its own commit. A running delete job's files are not
taken: the delete is refused (:class:`DeleteJobRunningError`, naming the job) rather than
make that job fail. A kill before the commit leaves rewrites no file row names; the orphan
sweep deletes them.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import duckdb

from icefloe.datafiles import membership_column
from icefloe.duck import ident
from icefloe.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    RowCountMismatchError,
    TableNotFoundError,
)
from icefloe.lifecycle.predicate import PredicateEvaluationError, check_predicate
from icefloe.merge.modes import ordered_output
from icefloe.merge.writer import stage_rows, upload_staged
from icefloe.metastore.deletes import DeleteJobRunningError, DeleteJobStore
from icefloe.metastore.models import DataFile, NewFile
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.query.database import Configure, WorkDatabase
from icefloe.query.executor import QueryFailedError, QueryReadError
from icefloe.query.views import files_source, view_body
from icefloe.settings.limits import QueryLimits
from icefloe.spec import TableSpec
from icefloe.storage import ObjectStore, discard_uncommitted

# Plans lost to merges before the delete gives up.
MAX_PLANS = 5
BATCH_ROWS = 65_536
# The decided copy of the files being rewritten: each row with its file's number and its
# verdict. Files are decided together up to this many bytes (of Parquet), so that a delete
# over many small files runs few statements, and one over big files holds one at a time.
_DECIDED = ident("__icefloe_decided")
_FILE = ident("__icefloe_file")
_MATCH = ident("__icefloe_match")
DECISION_GROUP_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file a delete changes: ``rewrite`` (some rows stay) or ``remove`` (none do)."""

    path: str
    partition_path: str
    action: Literal["rewrite", "remove"]
    rows: int
    rows_deleted: int


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """What a delete did, or (``dry_run``) would do. ``snapshot_id`` is the new snapshot, None
    for a dry run or when no row matched."""

    table: str
    where: str
    dry_run: bool
    planned_at: int
    snapshot_id: int | None
    files_considered: int
    files_scanned: int
    rows_deleted: int
    changes: tuple[FileChange, ...]
    plans: int

    @property
    def files_rewritten(self) -> int:
        return sum(1 for c in self.changes if c.action == "rewrite")

    @property
    def files_removed(self) -> int:
        return sum(1 for c in self.changes if c.action == "remove")

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "where": self.where,
            "dry_run": self.dry_run,
            "planned_at": self.planned_at,
            "snapshot_id": self.snapshot_id,
            "committed": self.snapshot_id is not None,
            "files_considered": self.files_considered,
            "files_scanned": self.files_scanned,
            "files_rewritten": self.files_rewritten,
            "files_removed": self.files_removed,
            "rows_deleted": self.rows_deleted,
            "plans": self.plans,
            "changes": [
                {
                    "path": c.path,
                    "partition": c.partition_path,
                    "action": c.action,
                    "rows": c.rows,
                    "rows_deleted": c.rows_deleted,
                }
                for c in self.changes
            ],
        }


@dataclass(frozen=True, slots=True)
class DeletePlan:
    """The head a delete planned over, and its files that may hold a matching row."""

    snapshot_id: int
    files_considered: int
    candidates: tuple[DataFile, ...]


def delete_rows(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    table: str,
    where: str,
    dry_run: bool = False,
    limits: QueryLimits | None = None,
    configure: Configure | None = None,
    engine: QueryEngine | None = None,
    database: WorkDatabase | None = None,
) -> DeleteResult:
    """Delete the rows of ``table`` for which ``where`` is true (NULL is not true).

    ``where`` is one SQL expression over the table's columns (see
    :func:`icefloe.lifecycle.predicate.check_predicate`). ``configure`` sets up each DuckDB
    connection before it is locked down (S3 reads of an S3 warehouse).

    ``engine`` (over the same meta store and object store) plans the delete, its pruning
    finding the files that may hold a matching row: a caller deleting often passes its warm
    engine, and spares each delete opening and locking down a DuckDB of its own (about
    20 ms). By default the delete opens one (with ``configure``) and closes it. The rewrites
    run in ``database`` (a caller's warm :class:`WorkDatabase` over the same object store), by
    default one of the delete's own, bounded by ``limits``."""
    conflict: CommitConflictError | None = None
    owned_engine = engine is None
    if engine is None:
        engine = QueryEngine(meta=meta, objects=objects, configure=configure)
    owned_database = database is None
    if database is None:
        database = WorkDatabase(
            root_uri=objects.root_uri, limits=limits or QueryLimits(), configure=configure
        )
    try:
        planner = DeletePlanner(engine=engine, meta=meta, table=table, where=where)
        for attempt in range(1, MAX_PLANS + 1):
            try:
                plan = planner.plan()
            except CommitConflictError as e:
                conflict = e
                continue
            spec, predicate = planner.spec, planner.predicate
            if not dry_run:
                # Files a running delete job holds are its to change: refused before any
                # rewrite (and again at the commit, under the row locks).
                DeleteJobStore(meta).check_not_held(table, plan.candidates)
            try:
                changes, written, added = rewrite_files(
                    objects, spec, predicate, plan.candidates, database=database, write=not dry_run
                )
            except QueryReadError as e:
                # A merge replaced planned files and gc collected them after the plan: as a
                # merge that commits first (below), that makes the delete plan again. Any
                # other read failure raises, naming a live file that is missing.
                conflict = _collected_or_raise(meta, objects, table, plan.candidates, e)
                continue
            result = DeleteResult(
                table=table,
                where=where,
                dry_run=dry_run,
                planned_at=plan.snapshot_id,
                snapshot_id=None,
                files_considered=plan.files_considered,
                files_scanned=len(plan.candidates),
                rows_deleted=sum(c.rows_deleted for c in changes),
                changes=tuple(changes),
                plans=attempt,
            )
            if dry_run or not changes:
                return result
            changed = {c.path for c in changes}
            removed = [f for f in plan.candidates if f.path in changed]
            try:
                check_rows_lost(removed, added, reported=result.rows_deleted)
                committed = meta.commit(
                    table,
                    operation="delete",
                    remove=[f.file_id for f in removed],
                    add=added,
                    table_id=planner.table_id,
                )
            except CommitOutcomeUnknownError:
                raise  # the rewrites may be live now; the orphan sweep deletes them if not
            except CommitConflictError as e:
                discard_uncommitted(objects, written)
                if isinstance(e, DeleteJobRunningError):
                    raise  # a running delete job holds a file: no new plan changes that
                conflict = e
                continue
            except BaseException:
                discard_uncommitted(objects, written)
                raise
            return replace(result, snapshot_id=committed.snapshot_id)
    finally:
        if owned_engine:
            engine.close()
        if owned_database:
            database.close()
    raise CommitConflictError(
        f"delete from {table!r} gave up: {MAX_PLANS} plans in a row lost to merges of the same"
        f" files or to schema changes (try again); the last: {conflict}"
    )


def _collected_or_raise(
    meta: MetaStore,
    objects: ObjectStore,
    table: str,
    candidates: Sequence[DataFile],
    error: QueryReadError,
) -> CommitConflictError:
    """What reading ``candidates`` failing with ``error`` means: a conflict to plan again
    after, when some of them are no longer live (by the meta store: replaced, or their rows
    gone) and their objects are gone too (collected after the plan listed them); otherwise
    ``error`` raises again, naming the live files whose objects are missing, if any."""
    ids = [f.file_id for f in candidates]
    live = {
        f.file_id for f in meta.files_by_id(table, ids, statistics=False) if f.end_snapshot is None
    }
    missing = [f for f in candidates if objects.head(f.path) is None]
    collected = [f.path for f in missing if f.file_id not in live]
    if collected:
        return CommitConflictError(
            f"{table!r}: planned file(s) {_some(collected)} were replaced and collected while"
            f" the delete read them ({error})"
        )
    lost = [f.path for f in missing]
    if lost:
        raise QueryReadError(
            f"delete from {table!r} could not read its files: live file(s) {_some(lost)} are"
            f" missing from the object store ({error})"
        ) from error
    raise error


def _some(paths: Sequence[str]) -> str:
    return ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")


class DeletePlanner:
    """Plans a delete, and plans it again after a lost race, with the table's spec of the
    moment: a schema change meanwhile gives a new spec (the predicate is checked again against
    it); a table dropped (and created again) meanwhile is refused."""

    def __init__(self, *, engine: QueryEngine, meta: MetaStore, table: str, where: str) -> None:
        self._engine = engine
        self._meta = meta
        self._where = where
        info = meta.get_table(table)
        self.table_id = info.table_id
        self.spec = info.spec
        self.predicate = check_predicate(info.spec, where)

    def plan(self) -> DeletePlan:
        """The head's candidate files; CommitConflictError when the schema changed while it
        planned (plan again)."""
        info = self._meta.get_table(self.spec.name)
        if info.table_id != self.table_id:
            raise TableNotFoundError(
                f"table {self.spec.name!r} was dropped while rows were deleted from it"
            )
        if info.spec.version != self.spec.version:
            self.predicate = check_predicate(info.spec, self._where)
            self.spec = info.spec
        return plan_delete(self._engine, self._meta, self.spec, self.predicate)


def plan_delete(
    engine: QueryEngine, meta: MetaStore, spec: TableSpec, predicate: str
) -> DeletePlan:
    """The head, and its files that may hold a matching row (by the query engine's pruning)."""
    try:
        counted = engine.query(f"SELECT count(*) AS n FROM {ident(spec.name)} WHERE {predicate}")
    except QueryReadError:
        raise
    except QueryFailedError as e:
        raise PredicateEvaluationError(
            f"delete refused: the predicate cannot be evaluated on every row of"
            f" {spec.name!r} that it may match: {e}"
        ) from e
    plan = counted.plan(spec.name)
    if plan.spec_version != spec.version:
        # An alter landed between reading the spec and pinning the head: the pruning read the
        # predicate's names with the new schema's meaning. Plan again with it.
        raise CommitConflictError(
            f"{spec.name!r}: its schema changed (to version {plan.spec_version}) while the"
            f" delete was planned at version {spec.version}"
        )
    if not plan.paths:
        return DeletePlan(plan.snapshot_id, plan.files_considered, ())
    # Only the planned files' rows (their keys name one row each): the other live files are
    # not listed again.
    files = meta.files_by_path(spec.name, plan.paths)
    return DeletePlan(plan.snapshot_id, plan.files_considered, tuple(files))


def rewrite_files(
    objects: ObjectStore,
    spec: TableSpec,
    predicate: str,
    candidates: Sequence[DataFile],
    *,
    database: WorkDatabase,
    write: bool,
) -> tuple[list[FileChange], list[str], list[NewFile]]:
    """Count each candidate's matches and (``write``) store rewrites of the changed files,
    in a session of ``database``."""
    changes: list[FileChange] = []
    written: list[str] = []
    added: list[NewFile] = []
    if not candidates:
        return changes, written, added
    uris = [objects.uri(f.path) for f in candidates]
    scratch = Path(tempfile.mkdtemp(prefix="icefloe-delete-"))
    try:
        with database.session() as con:
            _rewrite(
                con,
                objects,
                spec,
                predicate,
                candidates,
                uris,
                scratch,
                write=write,
                changes=changes,
                written=written,
                added=added,
            )
    except BaseException:
        discard_uncommitted(objects, written)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return changes, written, added


def _rewrite(
    con: duckdb.DuckDBPyConnection,
    objects: ObjectStore,
    spec: TableSpec,
    predicate: str,
    candidates: Sequence[DataFile],
    uris: Sequence[str],
    scratch: Path,
    *,
    write: bool,
    changes: list[FileChange],
    written: list[str],
    added: list[NewFile],
) -> None:
    """:func:`rewrite_files`' work on cursor ``con``, appending to its three lists."""
    # Each file read as the table's current columns (a subquery: a view per file cost a
    # statement, about 2 ms, each).
    bodies = [
        f"({view_body(spec, files_source(spec, [(uri, f.spec_version)]), None)})"
        for uri, f in zip(uris, candidates, strict=True)
    ]
    numbered = list(enumerate(candidates))
    for group in _decision_groups(numbered):
        decided = _decide(con, spec, predicate, [(n, bodies[n]) for n, _ in group])
        for number, f in group:
            deleted, rows = decided.get(number, (0, 0))
            if rows != f.row_count:
                raise RowCountMismatchError(
                    f"delete refused: {f.path} read back {rows} rows, but the meta store"
                    f" records {f.row_count}; nothing was committed"
                )
            if deleted == 0:
                continue
            action: Literal["rewrite", "remove"] = "remove" if deleted == rows else "rewrite"
            changes.append(FileChange(f.path, f.partition_path, action, rows, deleted))
            if not write or action == "remove":
                continue
            kept = ordered_output(
                spec,
                f"SELECT * EXCLUDE ({_FILE}, {_MATCH}) FROM {_DECIDED}"
                f" WHERE {_FILE} = {number} AND NOT {_MATCH}",
            )
            reader = con.execute(kept).to_arrow_reader(BATCH_ROWS)
            staged = stage_rows(spec, reader, scratch, bytes_per_row=f.size_bytes / max(1, rows))
            rewrites = upload_staged(
                objects,
                staged,
                table=spec.name,
                partition_path=f.partition_path,
                partition_values=f.partition_values,
                partition_start=f.partition_start,
                written=written,
                spec_version=spec.version,
                stats_leaves=spec.stats_leaves,
                membership_column=membership_column(spec),
            )
            check_rows_lost([f], rewrites, reported=deleted)
            added.extend(rewrites)


def check_rows_lost(
    removed: Sequence[DataFile], added: Sequence[NewFile], *, reported: int
) -> None:
    """Refuse a rewrite whose files, by the meta store's row counts, lose other than
    ``reported`` rows (the rows the predicate's one evaluation matched)."""
    lost = sum(f.row_count for f in removed) - sum(f.row_count for f in added)
    if lost != reported:
        paths = ", ".join(f.path for f in removed[:3]) + (", ..." if len(removed) > 3 else "")
        raise RowCountMismatchError(
            f"delete refused to commit: {paths} would lose {lost} rows, but its predicate"
            f" matched {reported}; nothing was committed"
        )


def _decision_groups(
    numbered: Sequence[tuple[int, DataFile]],
) -> list[list[tuple[int, DataFile]]]:
    """Consecutive runs of files of at most :data:`DECISION_GROUP_BYTES` (a bigger file is a
    run of its own)."""
    groups: list[list[tuple[int, DataFile]]] = []
    size = 0
    for item in numbered:
        if not groups or size + item[1].size_bytes > DECISION_GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += item[1].size_bytes
    return groups


def _decide(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    predicate: str,
    files: Sequence[tuple[int, str]],
) -> dict[int, tuple[int, int]]:
    """Evaluate ``predicate`` once per row of these ``files`` (each a file number and the
    SQL of its rows) into :data:`_DECIDED` (replacing the last group's), and return each file
    number's (matching rows, rows); every later step reads the verdicts stored here, never
    the predicate again.

    The rows are copied undecided, then the predicate marks its rows as the filter of an
    ``UPDATE``: a filter, as in the planning query's ``WHERE``, evaluates a conjunction's later
    terms only on the rows its earlier ones keep (DuckDB's own order), so a guarded cast
    (``k NOT IN ('a') AND CAST(k AS INTEGER) = 1``) that the plan counted is decided here too,
    and the rows marked are exactly those the same ``WHERE`` selects. (A select list evaluates
    every term on every row, and would fail on the rows the guard keeps out.)"""
    sources = " UNION ALL ".join(
        f"SELECT *, {number} AS {_FILE}, false AS {_MATCH} FROM {body} AS {ident(spec.name)}"
        for number, body in files
    )
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_DECIDED} AS {sources}")
    except (duckdb.OutOfMemoryException, duckdb.InterruptException):
        raise
    except duckdb.Error as e:
        # No predicate here: the files could not be read (gone, or the store failed), which a
        # later attempt may not meet.
        raise QueryReadError(
            f"delete from {spec.name!r} could not read its files: {_first_line(e)}"
        ) from e
    try:
        con.execute(
            f"UPDATE {_DECIDED} AS {ident(spec.name)} SET {_MATCH} = true WHERE {predicate}"
        )
    except (duckdb.OutOfMemoryException, duckdb.InterruptException):
        raise
    except duckdb.Error as e:
        # The predicate fails on a row these files hold (a cast of a value that does not
        # convert, unguarded): it cannot decide that row, so the delete decides none.
        raise PredicateEvaluationError(
            f"delete refused: the predicate cannot be evaluated on every row of"
            f" {spec.name!r} that it may match: {_first_line(e)}"
        ) from e
    counts = con.execute(
        f"SELECT {_FILE}, count(*) FILTER (WHERE {_MATCH}), count(*) FROM {_DECIDED}"
        f" GROUP BY {_FILE}"
    ).fetchall()
    return {int(n): (int(deleted), int(rows)) for n, deleted, rows in counts}


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
