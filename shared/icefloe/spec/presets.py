"""Ready-made table specs for common event sources."""

from __future__ import annotations

from icefloe.errors import SpecError
from icefloe.spec.table_spec import TableSpec

# The Segment Spec's common context fields
# (https://segment.com/docs/connections/spec/common/#context). Field order matters: files keep
# min/max statistics for the first 32 struct leaves in schema order (TableSpec.stats_leaves), so
# the leaves people filter on come first (page, campaign, os, library, device, app, then the
# top-level context scalars); location, network, referrer and screen come last and are read but
# not pruned on. Insert types leaves strictly (a JSON number is refused for a VARCHAR leaf), so
# app.build, a number on analytics-android and a string on analytics-ios/analytics.js, is JSON
# (read it with ->> or a cast); traits (free-form per Spec) is JSON too.
SEGMENT_CONTEXT = (
    "STRUCT("
    "page STRUCT(url VARCHAR, path VARCHAR, referrer VARCHAR, search VARCHAR, title VARCHAR),"
    " campaign STRUCT(source VARCHAR, medium VARCHAR, name VARCHAR, term VARCHAR,"
    " content VARCHAR),"
    " os STRUCT(name VARCHAR, version VARCHAR),"
    " library STRUCT(name VARCHAR, version VARCHAR),"
    " device STRUCT(type VARCHAR, manufacturer VARCHAR, model VARCHAR, name VARCHAR, id VARCHAR,"
    " advertisingId VARCHAR, adTrackingEnabled BOOLEAN, token VARCHAR),"
    " app STRUCT(name VARCHAR, version VARCHAR, build JSON, namespace VARCHAR),"
    " locale VARCHAR, timezone VARCHAR, ip VARCHAR, groupId VARCHAR, active BOOLEAN,"
    " userAgent VARCHAR,"
    " location STRUCT(city VARCHAR, country VARCHAR, latitude DOUBLE, longitude DOUBLE,"
    " speed DOUBLE),"
    " network STRUCT(bluetooth BOOLEAN, carrier VARCHAR, cellular BOOLEAN, wifi BOOLEAN),"
    " referrer STRUCT(id VARCHAR, type VARCHAR),"
    " screen STRUCT(width INTEGER, height INTEGER, density DOUBLE),"
    " traits JSON)"
)

SEGMENT_SCHEMA = (
    "messageId VARCHAR NOT NULL, timestamp TIMESTAMP NOT NULL, type VARCHAR NOT NULL,"
    " event VARCHAR, userId VARCHAR, anonymousId VARCHAR, properties JSON,"
    f" context {SEGMENT_CONTEXT}, extra JSON"
)


def segment(name: str) -> TableSpec:
    """Segment-spec ``track``/``page``/``identify``/``screen``/... payloads (a Segment webhook
    sink).

    Partitioned by day of ``timestamp``, sorted by ``event`` then ``timestamp``, deduplicated on
    ``messageId`` by merges (Segment retries deliveries). ``context`` is a typed STRUCT of the
    Spec's common context fields (:data:`SEGMENT_CONTEXT`; its leaves on pages, campaigns, os,
    library, device and app keep file statistics, so filters on them prune); ``properties`` and
    ``context.traits`` are JSON. Fields outside these (``traits``, ``name``, ``receivedAt``,
    ``sentAt``, ``integrations``, and context keys the Spec does not define, at their path such as
    ``{"context": {"instance": ...}}``) are kept in the JSON column ``extra`` rather than refused.
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
