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
        return self.claim_groups(table, [file_ids], lease=lease, tokens=[token])[0]

    def claim_groups(
        self,
        table: str,
        groups: Sequence[Sequence[int]],
        *,
        lease: timedelta,
        tokens: Sequence[uuid.UUID | None] | None = None,
    ) -> list[uuid.UUID | None]:
        """Claim live files for several merge jobs in one transaction, each group all or
        nothing as :meth:`claim_files` claims one: per group its token (``tokens``' or a new
        one), or None where any of its files is not live, locked by another claimer or claimed
        under an unexpired lease. Groups may not share a file."""
        wanted = [sorted(set(ids)) for ids in groups]
        if not wanted or any(not ids for ids in wanted):
            raise InvalidInputError("claim_groups: a group with no file ids")
        every = sorted({i for ids in wanted for i in ids})
        if len(every) != sum(len(ids) for ids in wanted):
            raise InvalidInputError("claim_groups: groups share a file")
        given = list(tokens) if tokens is not None else [None] * len(wanted)
        if len(given) != len(wanted):
            raise InvalidInputError("claim_groups: one token (or None) per group")
        info = self.get_table(table)
        with self._connection() as conn, conn.transaction():
            rows = conn.execute(
                """
                SELECT file_id FROM data_files
                WHERE table_id = %s AND file_id = ANY(%s) AND end_snapshot IS NULL
                  AND (claim_token IS NULL OR claim_expires_at <= now())
                ORDER BY file_id
                FOR UPDATE SKIP LOCKED
                """,
                (info.table_id, every),
            ).fetchall()
            available = {int(r[0]) for r in rows}
            claimed = [
                (token or uuid.uuid4()) if available.issuperset(ids) else None
                for ids, token in zip(wanted, given, strict=True)
            ]
            ids_claimed = [i for ids, t in zip(wanted, claimed, strict=True) if t for i in ids]
            token_of_id = [t for ids, t in zip(wanted, claimed, strict=True) if t for _ in ids]
            if ids_claimed:
                # The rows of groups left unclaimed stay as they were; their locks end here.
                conn.execute(
                    "UPDATE data_files AS f SET claim_token = c.token,"
                    " claim_expires_at = now() + %s"
                    " FROM unnest(%s::bigint[], %s::uuid[]) AS c(file_id, token)"
                    " WHERE f.file_id = c.file_id",
                    (lease, ids_claimed, token_of_id),
                )
        return claimed

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
