"""The one error hierarchy of icefloe.

Every error the core raises derives from :class:`IcefloeError`. Boundaries (psycopg, botocore,
the file system) translate their own exceptions into these with ``raise ... from e``; callers
branch on the type, never on the message.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


class IcefloeError(Exception):
    """Base class of every error icefloe raises on purpose."""


class ConfigError(IcefloeError):
    """The configuration (environment variables, settings) is invalid."""


class InvalidArgumentError(IcefloeError, ValueError):
    """A function was called outside its contract: an argument out of its range, or arguments
    that disagree (row-group sizes that do not add up to the rows, files of two partitions).

    A mistake of the calling code, not of the data, so it is not an :class:`InvalidInputError`:
    boundaries that refuse bad input as the sender's fault report this as a failure instead.
    """


class InvalidInputError(IcefloeError, ValueError):
    """The caller's input is malformed: a name, a spec, a row, a message."""


class InvalidEventError(InvalidInputError):
    """A function was invoked with an event it does not take (the wrong shape or source): a
    wiring mistake, refused loudly rather than answered."""


class InvalidNameError(InvalidInputError):
    """A table, column or partition name is not allowed."""


class SpecError(InvalidInputError):
    """A table spec (schema, partitioning, sort keys, merge mode, sizes) is invalid."""


class NotFoundError(IcefloeError, LookupError):
    """Something the caller named does not exist."""


class TableNotFoundError(NotFoundError):
    """No table has that name."""


class SnapshotNotFoundError(NotFoundError):
    """The table has no such snapshot (never committed, or expired)."""


class ObjectNotFoundError(NotFoundError):
    """No object is stored under that key."""


class AlreadyExistsError(IcefloeError):
    """Something with that name exists already."""


class TableExistsError(AlreadyExistsError):
    """A table with that name exists already."""


class ObjectExistsError(AlreadyExistsError):
    """An object is already stored under that key; objects are never overwritten."""


class CommitError(IcefloeError):
    """A commit did not happen. Nothing was committed."""


class CommitConflictError(CommitError):
    """The commit's assumptions no longer hold (an input file is gone or claimed by another job).

    Nothing was committed; the caller deletes the objects it wrote for this commit.
    """


class DeleteJobRunningError(CommitConflictError):
    """Files a delete would remove are held by a running delete job (``job_id``): taking them
    would make that job fail and its rows survive, so nothing was committed. Start this delete
    again once that job has ended."""

    def __init__(self, message: str, *, job_id: uuid.UUID) -> None:
        super().__init__(message)
        self.job_id = job_id


class DuplicateReceiptError(CommitConflictError):
    """Some messages of an append were committed already (a redelivery); ``receipts`` names them.

    Nothing was committed; the caller drops those messages (they are done) and retries the rest.
    """

    def __init__(self, message: str, *, receipts: tuple[str, ...]) -> None:
        super().__init__(message)
        self.receipts = receipts


class RowCountMismatchError(CommitError):
    """A rewrite would remove a different number of rows than it decided to remove (rows of a
    file minus rows of its rewrites, against the rows its one evaluation matched). Nothing was
    committed; the caller deletes the objects it wrote."""


class SpecChangedError(CommitConflictError):
    """The table's spec changed (a schema change) after the batch was converted under the spec
    it read: nothing was committed. The inserter converts the batch again under the new spec."""


class CommitOutcomeUnknownError(IcefloeError):
    """The connection dropped while COMMIT was in flight: the commit may or may not have happened.
    (An append whose answer is lost is looked up and retried; it raises this only when the meta
    store stays unreachable through every attempt.)

    The caller must leave the objects it wrote in place; the janitor's orphan sweep removes them
    if no file row ever names them.
    """


class MetaStoreUnavailableError(IcefloeError):
    """The meta store could not be reached, or the connection broke before the commit was sent."""


class PublicationError(IcefloeError):
    """Tables that could not be published (each named, with why); the others were."""


class StorageError(IcefloeError):
    """The object store failed in a way the caller cannot fix by changing its input."""


class MetaStoreNotInitializedError(IcefloeError):
    """The meta store schema does not exist yet: run ``icefloe init``."""


class MigrationError(IcefloeError):
    """The meta store's schema migrations cannot run: the installed set is broken."""


class IdempotencyKeyReusedError(InvalidInputError):
    """An idempotency key was committed already with a batch of other content: nothing of this
    batch was written (a retry must send the same batch; new rows need a new key)."""


class BatchRejectedError(InvalidInputError):
    """A batch of rows was refused as a whole; ``problems`` name the rows and fields at fault.

    Nothing of the batch was written or committed. ``total`` counts the problems found,
    of which ``problems`` may hold the first few only.
    """

    def __init__(
        self, message: str, *, problems: tuple[RowProblem, ...] = (), total: int | None = None
    ) -> None:
        super().__init__(message)
        self.problems = problems
        self.total = len(problems) if total is None else total


@dataclass(frozen=True, slots=True)
class RowProblem:
    """One reason a batch was refused: the row's index in the batch (0-based), the field, why."""

    row: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = []
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.field is not None:
            where.append(f"field {self.field!r}")
        return f"{', '.join(where)}: {self.message}" if where else self.message
