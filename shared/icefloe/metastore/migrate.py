"""Numbered, transactional schema migrations, safe to run twice and from two processes at once."""

from __future__ import annotations

import logging
import re
import zlib
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql

from icefloe.errors import MigrationError

logger = logging.getLogger(__name__)

_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql_text: str


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """Versions applied by this run (empty when the schema was already current)."""

    schema: str
    applied: tuple[int, ...]
    current_version: int


def available_migrations() -> tuple[Migration, ...]:
    """The migrations shipped in the package, in version order."""
    found: list[Migration] = []
    for entry in resources.files("icefloe.metastore.migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(
            f"the installed migrations must be numbered 1..n without gaps (a broken install?),"
            f" found {versions}"
        )
    return tuple(found)


def _lock_id(schema: str) -> int:
    # A stable 63-bit advisory lock id per schema, so two schemas migrate independently.
    return zlib.crc32(f"icefloe.migrate.{schema}".encode()) & 0x7FFF_FFFF_FFFF_FFFF


def migrate(conn: psycopg.Connection[tuple[object, ...]], *, schema: str) -> MigrationReport:
    """Apply every missing migration in one transaction under a schema-wide advisory lock.

    A concurrent run waits for the lock, then finds nothing left to do.
    """
    migrations = available_migrations()
    schema_id = sql.Identifier(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(schema),))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema_id))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(schema_id))
        conn.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version     integer PRIMARY KEY,
                name        text NOT NULL,
                applied_at  timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        rows = conn.execute("SELECT version FROM schema_migrations").fetchall()
        done = {int(str(row[0])) for row in rows}
        applied: list[int] = []
        for migration in migrations:
            if migration.version in done:
                continue
            logger.info("applying migration %04d_%s", migration.version, migration.name)
            conn.execute(sql.SQL(migration.sql_text))  # a shipped file, no parameters
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(migration.version)
    return MigrationReport(schema=schema, applied=tuple(applied), current_version=len(migrations))
