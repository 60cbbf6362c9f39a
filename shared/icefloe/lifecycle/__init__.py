"""A table's lifecycle beyond appends and merges: schema changes, deleting rows, rolling back."""

from icefloe.lifecycle.alter import AlterResult, alter_table
from icefloe.lifecycle.delete import DeleteResult, FileChange, delete_rows
from icefloe.lifecycle.delete_jobs import (
    DeletePartRunner,
    DeletePartTask,
    DeleteRequest,
    DeleteStarted,
    reconcile_deletes,
    start_delete,
)
from icefloe.lifecycle.rollback import RollbackResult, rollback_table
from icefloe.metastore.deletes import DeleteJobRunningError

__all__ = [
    "AlterResult",
    "DeleteJobRunningError",
    "DeletePartRunner",
    "DeletePartTask",
    "DeleteRequest",
    "DeleteResult",
    "DeleteStarted",
    "FileChange",
    "RollbackResult",
    "alter_table",
    "delete_rows",
    "reconcile_deletes",
    "rollback_table",
    "start_delete",
]
