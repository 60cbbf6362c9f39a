"""The Segment preset's typed context: which leaves keep file statistics."""

from __future__ import annotations

from icefloe.spec.presets import preset
from icefloe.spec.table_spec import MAX_STATS_LEAVES
from icefloe.spec.types import struct_field_type

FILTERED_LEAVES = [
    "context.page.url",
    "context.page.path",
    "context.page.referrer",
    "context.campaign.source",
    "context.campaign.medium",
    "context.campaign.name",
    "context.campaign.term",
    "context.campaign.content",
    "context.os.name",
    "context.library.name",
    "context.device.type",
    "context.device.manufacturer",
    "context.app.name",
    "context.app.version",
    "context.locale",
    "context.ip",
]


def test_the_leaves_people_filter_on_keep_statistics() -> None:
    leaves = preset("segment", name="seg").stats_leaves
    assert len(leaves) == MAX_STATS_LEAVES
    missing = [leaf for leaf in FILTERED_LEAVES if leaf not in leaves]
    assert missing == []


def test_varying_and_free_form_fields_are_json() -> None:
    spec = preset("segment", name="seg")
    context = spec.source_types["context"]
    assert struct_field_type(context, ("app", "build")) == "JSON"
    assert struct_field_type(context, ("traits",)) == "JSON"
    assert struct_field_type(context, ("page", "url")) == "VARCHAR"
    assert struct_field_type(context, ("screen", "width")) == "INTEGER"
    assert spec.source_types["properties"] == "JSON"
    assert "context.app.build" not in spec.stats_leaves
