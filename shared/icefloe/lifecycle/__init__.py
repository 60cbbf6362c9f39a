"""A table's lifecycle beyond appends and merges: rolling back to an earlier snapshot."""

from icefloe.lifecycle.rollback import RollbackResult, rollback_table

__all__ = ["RollbackResult", "rollback_table"]
