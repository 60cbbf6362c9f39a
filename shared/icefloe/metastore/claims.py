"""Claims and leases: a merge or compaction job takes live files under a token for a lease,
renews it while it works, and releases it; a commit under the token ends the files."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta

from icefloe.errors import InvalidInputError
from icefloe.metastore.access import StoreAccess


class Claims(StoreAccess):
    """Claims on live files (a part of :class:`~icefloe.metastore.store.MetaStore`)."""

    def claim_files(
        self,
        table: str,
        file_ids: Sequence[int],
        *,
        lease: timedelta,
        token: uuid.UUID | None = None,
    ) -> uuid.UUID | None:
        """Claim live files for one merge job, all or nothing; returns the token, or None.

        Rows locked by another claimer are skipped (``SKIP LOCKED``), and files claimed under an
        unexpired lease are taken; either way the claim fails as a whole and nothing changes.
        """
        if not file_ids:
            raise InvalidInputError("claim_files: no file ids given")
        info = self.get_table(table)
        token = token or uuid.uuid4()
        wanted = sorted(set(file_ids))
        with self._connection() as conn, conn.transaction():
            rows = conn.execute(
                """
                SELECT file_id FROM data_files
                WHERE table_id = %s AND file_id = ANY(%s) AND end_snapshot IS NULL
                  AND (claim_token IS NULL OR claim_expires_at <= now())
                ORDER BY file_id
                FOR UPDATE SKIP LOCKED
                """,
                (info.table_id, wanted),
            ).fetchall()
            if [int(r[0]) for r in rows] != wanted:
                return None
            conn.execute(
                "UPDATE data_files SET claim_token = %s, claim_expires_at = now() + %s"
                " WHERE file_id = ANY(%s)",
                (token, lease, wanted),
            )
        return token

    def renew_claim(self, token: uuid.UUID, *, lease: timedelta) -> int:
        """Extend the lease of the live files claimed under ``token``; returns how many.

        A lease that expired is renewed too, as long as nobody claimed the files since.
        """
        with self._connection() as conn, conn.transaction():
            cur = conn.execute(
                "UPDATE data_files SET claim_expires_at = now() + %s"
                " WHERE claim_token = %s AND end_snapshot IS NULL",
                (lease, token),
            )
            return cur.rowcount

    def release_claim(self, token: uuid.UUID) -> int:
        """Free every file claimed under ``token``; returns how many were freed."""
        with self._connection() as conn, conn.transaction():
            cur = conn.execute(
                "UPDATE data_files SET claim_token = NULL, claim_expires_at = NULL"
                " WHERE claim_token = %s",
                (token,),
            )
            return cur.rowcount
