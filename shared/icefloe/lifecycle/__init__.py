"""A table's lifecycle beyond appends and merges: deleting rows, rolling back."""

from icefloe.lifecycle.delete import DeleteResult, FileChange, delete_rows
from icefloe.lifecycle.rollback import RollbackResult, rollback_table

__all__ = ["DeleteResult", "FileChange", "RollbackResult", "delete_rows", "rollback_table"]
