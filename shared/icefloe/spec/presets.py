"""Ready-made table specs for common event sources."""

from __future__ import annotations

from icefloe.errors import SpecError
from icefloe.spec.table_spec import TableSpec

SEGMENT_SCHEMA = (
    "messageId VARCHAR NOT NULL, timestamp TIMESTAMP NOT NULL, type VARCHAR NOT NULL,"
    " event VARCHAR, userId VARCHAR, anonymousId VARCHAR, properties JSON, context JSON,"
    " extra JSON"
)


def segment(name: str) -> TableSpec:
    """Segment-spec ``track``/``page``/``identify``/... payloads (a Segment webhook sink).

    Partitioned by day of ``timestamp``, sorted by ``event`` then ``timestamp``, deduplicated on
    ``messageId`` by merges (Segment retries deliveries). Fields outside the core ones
    (``traits``, ``name``, ``receivedAt``, ``sentAt``, ``integrations``, ...) are kept in the
    JSON column ``extra`` rather than refused.
    """
    return TableSpec.create(
        name=name,
        schema=SEGMENT_SCHEMA,
        partition_by="day(timestamp)",
        sort_by="event, timestamp",
        merge="replace(messageId)",
        extra_fields="keep",
        overflow_column="extra",
    )


PRESETS = {"segment": segment}


def preset(kind: str, *, name: str) -> TableSpec:
    try:
        return PRESETS[kind](name)
    except KeyError:
        raise SpecError(f"preset: unknown preset {kind!r} (known: {', '.join(PRESETS)})") from None
