"""A table's lifecycle beyond appends and merges: deleting rows, rolling back."""

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

__all__ = [
    "DeletePartRunner",
    "DeletePartTask",
    "DeleteRequest",
    "DeleteResult",
    "DeleteStarted",
    "FileChange",
    "RollbackResult",
    "delete_rows",
    "reconcile_deletes",
    "rollback_table",
    "start_delete",
]
