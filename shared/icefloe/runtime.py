"""Wiring: build the meta store and the object store once from :class:`icefloe.config.CoreSettings`."""

from __future__ import annotations

from dataclasses import dataclass

from icefloe.config import CoreSettings
from icefloe.metastore.credentials import DsnSource
from icefloe.metastore.embedded import embedded_database_url
from icefloe.metastore.store import MetaStore
from icefloe.storage import ObjectStore, object_store_from_settings


def database_url(settings: CoreSettings) -> str:
    """The configured DSN, or the embedded server's (started on demand)."""
    if settings.database_url:
        return settings.database_url
    return embedded_database_url(settings.embedded_database_dir)


@dataclass(slots=True)
class Runtime:
    """The collaborators every operation needs, built once per process and injected."""

    settings: CoreSettings
    meta: MetaStore
    objects: ObjectStore

    @classmethod
    def open(
        cls, settings: CoreSettings, *, max_connections: int = 8, dsn: DsnSource | None = None
    ) -> Runtime:
        """Open the meta store at ``dsn`` (a source read again when a connection fails, such
        as a rotated secret), else at :func:`database_url`."""
        meta = MetaStore(
            dsn if dsn is not None else database_url(settings),
            schema=settings.database_schema,
            max_connections=max_connections,
        )
        return cls(settings=settings, meta=meta, objects=object_store_from_settings(settings))

    def close(self) -> None:
        self.meta.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
