"""Rollback: one new snapshot whose live files are exactly those of an earlier snapshot.

Files live at both snapshots stay as they are; files added since go; files of the earlier
snapshot that are no longer live (merged or rolled away since) are copied back under new
names. Copies, rather than registering an old object again, keep every object named by one
file row only, so garbage collection stays as simple as it is: an object dies with its row.

The plan is read at one head and the commit is refused if the head has moved meanwhile (an
insert or a merge landed): then the rollback plans again, and its copies of the lost attempt
are deleted. A crash between copying and committing leaves copies no file row names; the
janitor's orphan sweep deletes them. A merge holding a removed file loses at its commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from icefloe.datafiles import new_data_key
from icefloe.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    ObjectNotFoundError,
    SnapshotNotFoundError,
)
from icefloe.metastore.models import DataFile, NewFile, RollbackPlan
from icefloe.metastore.store import MetaStore
from icefloe.storage import ObjectStore, discard_uncommitted

# Plans lost to other commits before the rollback gives up (a table written to without pause).
MAX_PLANS = 5
COPY_THREADS = 8


@dataclass(frozen=True, slots=True)
class RollbackResult:
    """What a rollback did. ``snapshot_id`` is None when the live files were already those of
    the target snapshot (nothing was committed)."""

    table: str
    to_snapshot: int
    snapshot_id: int | None
    files_kept: int
    files_removed: int
    files_restored: int
    bytes_copied: int
    rows: int
    plans: int

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "to_snapshot": self.to_snapshot,
            "snapshot_id": self.snapshot_id,
            "committed": self.snapshot_id is not None,
            "files_kept": self.files_kept,
            "files_removed": self.files_removed,
            "files_restored": self.files_restored,
            "bytes_copied": self.bytes_copied,
            "rows": self.rows,
            "plans": self.plans,
        }


def rollback_table(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    table: str,
    to_snapshot: int,
    on_plan: Callable[[RollbackPlan], None] | None = None,
) -> RollbackResult:
    """Commit a snapshot of ``table`` whose live files are exactly those of ``to_snapshot``.

    SnapshotNotFoundError when that snapshot is unknown or expired (its files may be gone);
    CommitConflictError when :data:`MAX_PLANS` plans in a row lost to other commits.
    ``on_plan`` sees each plan before its copies are made (tests use it to commit meanwhile).
    """
    conflict: CommitConflictError | None = None
    for attempt in range(1, MAX_PLANS + 1):
        plan = meta.plan_rollback(table, to_snapshot=to_snapshot)
        if on_plan is not None:
            on_plan(plan)
        if plan.changes_nothing:
            return _result(plan, snapshot_id=None, restored=(), plans=attempt)
        restored = _copy_back(objects, plan)
        try:
            committed = meta.commit_rollback(plan, restored=restored)
        except CommitOutcomeUnknownError:
            raise  # the copies may be live now: the orphan sweep deletes them if they are not
        except CommitConflictError as e:
            discard_uncommitted(objects, [f.path for f in restored])
            conflict = e
            continue
        except BaseException:
            discard_uncommitted(objects, [f.path for f in restored])
            raise
        return _result(plan, snapshot_id=committed.snapshot_id, restored=restored, plans=attempt)
    raise CommitConflictError(
        f"cannot roll {table!r} back to snapshot {to_snapshot}: {MAX_PLANS} plans in a row lost"
        f" to other commits (pause its writers and try again); the last: {conflict}"
    )


def _copy_back(objects: ObjectStore, plan: RollbackPlan) -> list[NewFile]:
    """Copies of the plan's files to restore, under fresh names; all or none."""
    if not plan.restore:
        return []
    copied: list[NewFile] = []

    def copy(f: DataFile) -> NewFile:
        key = new_data_key(table=plan.table, partition_path=f.partition_path)
        info = objects.copy(f.path, key)
        restored = NewFile(
            path=key,
            partition_path=f.partition_path,
            size_bytes=info.size,
            row_count=f.row_count,
            row_group_count=f.row_group_count,
            partition_values=f.partition_values,
            partition_start=f.partition_start,
            column_stats=f.column_stats,
            copy_of=f.origin,
            spec_version=f.spec_version,
        )
        copied.append(restored)
        return restored

    try:
        with ThreadPoolExecutor(max_workers=min(COPY_THREADS, len(plan.restore))) as pool:
            return list(pool.map(copy, plan.restore))
    except ObjectNotFoundError as e:
        discard_uncommitted(objects, [f.path for f in copied])
        raise SnapshotNotFoundError(
            f"cannot roll {plan.table!r} back to snapshot {plan.target_snapshot_id}: one of its"
            f" files is gone ({e}); the snapshot expired while the rollback ran"
        ) from e
    except BaseException:
        discard_uncommitted(objects, [f.path for f in copied])
        raise


def _result(
    plan: RollbackPlan, *, snapshot_id: int | None, restored: Sequence[NewFile], plans: int
) -> RollbackResult:
    return RollbackResult(
        table=plan.table,
        to_snapshot=plan.target_snapshot_id,
        snapshot_id=snapshot_id,
        files_kept=len(plan.keep),
        files_removed=len(plan.remove),
        files_restored=len(restored),
        bytes_copied=sum(f.size_bytes for f in restored),
        rows=sum(f.row_count for f in plan.keep) + sum(f.row_count for f in plan.restore),
        plans=plans,
    )
