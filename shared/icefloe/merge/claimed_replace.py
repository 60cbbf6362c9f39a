"""The replace commit under a claim: the protocol a merge worker and a Spark compaction share.

Before any work, :func:`check_claim`: a commit under the job's idempotency key means an earlier
delivery finished the job (already committed); inputs no longer live, or no longer claimed
under the job's token, mean the claim is lost (the files were merged elsewhere, or another job
took them after the lease ran out), and whatever the claim still holds is released. After the
outputs are uploaded, :func:`commit_replacement`: one replace commit of the inputs by the
outputs, under the claim token and the idempotency key.
A conflict deletes the outputs and releases whatever the claim still holds; an unknown outcome
leaves them (the retry finds the commit, or the janitor's orphan sweep removes them); any other
failure deletes them; a commit an earlier delivery made already keeps its own files and deletes
these.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from icefloe.errors import CommitConflictError, CommitOutcomeUnknownError, TableNotFoundError
from icefloe.merge.claims import claim_problem
from icefloe.metastore.models import DataFile, NewFile
from icefloe.metastore.store import MetaStore
from icefloe.storage import ObjectStore, discard_uncommitted

logger = logging.getLogger(__name__)

ReplaceStatus = Literal["committed", "already_committed", "claim_lost", "conflict"]


@dataclass(frozen=True, slots=True)
class ClaimedGroup:
    """Claimed files of one partition, to be replaced by new ones in one commit."""

    table: str
    partition_path: str
    file_ids: tuple[int, ...]
    claim_token: uuid.UUID
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class ReplaceOutcome:
    """What became of a claimed group. Only ``committed`` changed the table; ``rows_added``
    is the rows of the new files then."""

    status: ReplaceStatus
    snapshot_id: int | None = None
    rows_added: int = 0
    reason: str = ""


def check_claim(
    meta: MetaStore, group: ClaimedGroup, *, renew_for: timedelta | None = None
) -> list[DataFile] | ReplaceOutcome:
    """The group's input files, live and still claimed by it (the claim renewed for
    ``renew_for`` when given); otherwise why the job must not run: ``already_committed`` (with
    the earlier snapshot) or ``claim_lost`` (with the reason; the files still claimed under
    the group's token are released). The inputs come without their column statistics, which
    no merge reads."""
    earlier = meta.snapshot_for_key(group.table, group.idempotency_key)
    if earlier is not None:
        return ReplaceOutcome(
            "already_committed",
            snapshot_id=earlier.snapshot_id,
            reason=f"committed by an earlier delivery as snapshot {earlier.snapshot_id}",
        )
    inputs = meta.files_by_id(group.table, group.file_ids, statistics=False)
    lost = claim_problem(
        file_ids=group.file_ids,
        partition_path=group.partition_path,
        claim_token=group.claim_token,
        inputs=inputs,
    )
    if (
        lost is None
        and renew_for is not None
        and meta.renew_claim(group.claim_token, lease=renew_for) != len(group.file_ids)
    ):
        lost = "the claim was taken over while renewing it"
    if lost is None:
        return inputs
    if not inputs and not _table_exists(meta, group.table):
        # Dropped after the job was planned: nothing to merge, ever.
        lost = f"table {group.table!r} does not exist (dropped?)"
    # As after a conflict: free whatever inputs the group still holds (a renewal may just have
    # extended them), for the next plan, rather than keep them from every merge for the lease.
    meta.release_claim(group.claim_token)
    return ReplaceOutcome("claim_lost", reason=lost)


def commit_replacement(
    meta: MetaStore, objects: ObjectStore, group: ClaimedGroup, *, add: Sequence[NewFile]
) -> ReplaceOutcome:
    """Replace the group's inputs by ``add`` (uploaded already), as the module docstring says:
    ``committed``, ``already_committed`` or ``conflict``; raises
    :class:`CommitOutcomeUnknownError` (``add`` left in place) and any other failure (``add``
    deleted)."""
    written = [f.path for f in add]
    try:
        result = meta.commit_replace(
            group.table,
            remove=list(group.file_ids),
            add=add,
            claim_token=group.claim_token,
            idempotency_key=group.idempotency_key,
        )
    except CommitConflictError as e:
        discard_uncommitted(objects, written)
        # Free whatever inputs the group still holds, for the next plan (a no-op when the
        # claim was taken over).
        meta.release_claim(group.claim_token)
        return ReplaceOutcome("conflict", reason=str(e))
    except CommitOutcomeUnknownError:
        logger.warning(
            "replace commit of %s/%s: outcome unknown; leaving %d objects",
            group.table,
            group.partition_path,
            len(written),
        )
        raise
    except BaseException:
        discard_uncommitted(objects, written)
        raise
    if not result.committed:
        discard_uncommitted(objects, written)
        return ReplaceOutcome("already_committed", snapshot_id=result.snapshot_id)
    return ReplaceOutcome("committed", snapshot_id=result.snapshot_id, rows_added=result.rows_added)


def _table_exists(meta: MetaStore, name: str) -> bool:
    try:
        meta.get_table(name)
    except TableNotFoundError:
        return False
    return True
