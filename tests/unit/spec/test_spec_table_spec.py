"""TableSpec: building from text, cross-reference validation, and the stored dict form."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from icefloe.errors import InvalidNameError, SpecError
from icefloe.spec import (
    AggregateMode,
    Column,
    CustomMode,
    PartitionField,
    ReplaceMode,
    Retention,
    SizeTargets,
    TableSpec,
)

SCHEMA = (
    "ts TIMESTAMP NOT NULL, event VARCHAR, messageId VARCHAR NOT NULL, tenant VARCHAR, "
    "user_id VARCHAR, properties JSON, extra JSON, price DECIMAL(10, 2), n BIGINT"
)


def make(**overrides: Any) -> TableSpec:
    kwargs: dict[str, Any] = {"name": "events", "schema": SCHEMA}
    kwargs.update(overrides)
    return TableSpec.create(**kwargs)


def full_spec() -> TableSpec:
    return make(
        partition_by="day(ts), tenant, bucket[8](user_id)",
        sort_by="event, ts",
        row_group_by="event",
        merge="replace(messageId; version=ts)",
        sizes=SizeTargets(target_file_bytes=64 * 2**20, min_files_to_merge=2),
        retention=Retention(snapshot_retention_seconds=0, orphan_grace_seconds=3600),
        tenant_column="tenant",
        extra_fields="keep",
        overflow_column="extra",
    )


def test_create_parses_the_text_forms() -> None:
    spec = full_spec()
    assert spec.column("price") == Column("price", "DECIMAL(10,2)")
    assert spec.partition_by[0] == PartitionField("ts", "day", None, "day")
    assert spec.sort_by == ("event", "ts")
    assert spec.merge == ReplaceMode(("messageId",), "ts")


def test_defaults_are_an_unpartitioned_append_table() -> None:
    spec = make()
    assert spec.partition_by == () and spec.sort_by == () and spec.row_group_by is None
    assert spec.merge.to_text() == "append"
    assert spec.sizes == SizeTargets() and spec.retention == Retention()
    assert spec.time_partition_field is None


def test_row_group_key_leads_the_file_sort_order() -> None:
    assert make(row_group_by="event").file_sort_keys == ("event",)
    spec = make(row_group_by="event", sort_by="ts, event")
    assert spec.sort_by == ("ts", "event")
    assert spec.file_sort_keys == ("event", "ts")


def test_derived_properties() -> None:
    spec = make(partition_by="tenant, hour(ts), day(ts) AS d, bucket[4](tenant) AS tb")
    assert spec.column_names[:3] == ("ts", "event", "messageId")
    assert spec.time_partition_field == PartitionField("ts", "hour", None, "hour")
    assert spec.partition_source_columns == ("tenant", "ts")
    assert spec.source_types["price"] == "DECIMAL(10,2)"


def test_partition_helpers_compute_and_parse_a_rows_path() -> None:
    spec = make(partition_by="day(ts), tenant, truncate[10](n)")
    row = {"ts": datetime(2026, 11, 22, 13), "tenant": "a/b", "n": 37}
    values = spec.partition_values(row)
    assert values == (datetime(2026, 11, 22), "a/b", 30)
    path = spec.partition_path(values)
    assert path == "day=2026-11-22/tenant=a%2Fb/n_trunc=30"
    assert spec.parse_partition_path(path) == values
    assert spec.partition_values({}) == (None, None, None)


def test_to_dict_is_json_safe_and_round_trips_exactly() -> None:
    spec = full_spec()
    stored = json.loads(json.dumps(spec.to_dict()))
    assert stored["format_version"] == 1
    assert TableSpec.from_dict(stored) == spec
    assert TableSpec.from_dict(stored).to_dict() == spec.to_dict()


@pytest.mark.parametrize(
    "merge",
    ["append", "replace(messageId)", "sql:SELECT * FROM rows"],
)
def test_every_merge_mode_round_trips_through_the_dict(merge: str) -> None:
    spec = make(merge=merge)
    assert TableSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_aggregate_spec_round_trips_through_the_dict() -> None:
    spec = TableSpec.create(
        name="daily",
        schema="day DATE, event VARCHAR, n BIGINT, revenue DECIMAL(12,2), last_seen TIMESTAMP",
        partition_by="month(day)",
        merge="aggregate(day, event; n:count, revenue:sum, last_seen:max)",
    )
    assert isinstance(spec.merge, AggregateMode)
    assert TableSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_from_dict_fills_absent_optional_keys_with_defaults() -> None:
    stored = {
        "format_version": 1,
        "name": "t",
        "columns": [{"name": "a", "type": "int"}],
    }
    assert TableSpec.from_dict(stored) == TableSpec("t", (Column("a", "INTEGER"),))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format_version": 2}, "format_version 2"),
        ({"format_version": True}, "format_version True"),
        ({"surprise": 1}, "unknown key 'surprise'"),
        ({"columns": "a INT"}, "columns: expected a list"),
        ({"columns": [{"name": "a"}]}, "missing key 'type'"),
        ({"sort_by": "a"}, "sort_by: expected a list"),
        ({"merge": {"mode": "upsert"}}, "unknown mode 'upsert'"),
        ({"merge": {"mode": "append", "key": ["a"]}}, "unknown key 'key'"),
        ({"sizes": {"target_file_bytes": "big"}}, "target_file_bytes"),
        ({"partition_by": [{"source": "a", "transform": "bucket", "name": "b"}]}, "bucket count"),
        ({"extra_fields": "drop"}, "extra_fields"),
        ({"publish": "delta"}, "publish: 'delta' is not 'iceberg' or 'none'"),
    ],
)
def test_from_dict_refuses_malformed_input_naming_the_field(
    change: dict[str, object], message: str
) -> None:
    stored = {"format_version": 1, "name": "t", "columns": [{"name": "a", "type": "INT"}]}
    stored.update(change)
    with pytest.raises(SpecError, match=message):
        TableSpec.from_dict(stored)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"partition_by": "day(missing)"}, "partition_by: unknown column 'missing'"),
        ({"partition_by": "hour(price)"}, "'hour' cannot apply to column 'price'"),
        ({"partition_by": "identity(properties)"}, "'identity' cannot apply"),
        ({"partition_by": "day(ts) AS event"}, "named like column 'event'"),
        ({"partition_by": "bucket[4](tenant) AS tenant"}, "named like column 'tenant'"),
        ({"sort_by": "foo"}, "sort_by: unknown column 'foo'"),
        ({"sort_by": "TS"}, "did you mean 'ts'"),
        ({"sort_by": "ts, ts"}, "sort_by: keys must be unique"),
        ({"sort_by": "properties"}, "sort_by: column 'properties' of type JSON"),
        ({"row_group_by": "nope"}, "row_group_by: unknown column 'nope'"),
        ({"merge": "replace(nope)"}, "merge: replace key: unknown column 'nope'"),
        ({"merge": "replace(messageId; version=properties)"}, "cannot be ordered"),
        ({"merge": "aggregate(event; nope:sum)"}, "merge: aggregate: unknown column 'nope'"),
        ({"merge": "aggregate(event; user_id:sum)"}, "'sum' cannot apply to 'user_id'"),
        ({"merge": "aggregate(event; price:count)"}, "'count' cannot apply"),
        ({"merge": "aggregate(event; properties:max)"}, "'max' cannot apply"),
        ({"merge": "aggregate(event; n:sum)"}, "column 'ts' is neither a group key"),
        (
            {
                "partition_by": "truncate[10](n)",
                "merge": "aggregate(event, tenant; ts:max, messageId:any, user_id:min, "
                "properties:any, extra:any, price:sum, n:count)",
            },
            "'n' is a partition source and cannot be 'count'med",
        ),
        ({"tenant_column": "nope"}, "tenant_column: unknown column"),
        ({"tenant_column": "tenant"}, "must also be an identity partition source"),
        ({"extra_fields": "keep"}, "needs a JSON overflow column"),
        ({"extra_fields": "keep", "overflow_column": "event"}, "must be JSON, not VARCHAR"),
        ({"overflow_column": "extra"}, "only used with extra_fields='keep'"),
        ({"extra_fields": "sometimes"}, "extra_fields"),
        ({"publish": "hudi"}, "publish: 'hudi' is not"),
        (
            {"schema": "ts TIMESTAMP, big HUGEINT", "publish": "iceberg"},
            "publish: column 'big' is HUGEINT, which has no Iceberg type",
        ),
        (
            {"schema": "ts TIMESTAMP, tags UINTEGER[]", "publish": "iceberg"},
            "publish: field 'tags.element' is UINTEGER, which has no Iceberg type",
        ),
        (
            {"schema": "ts TIMESTAMP, s STRUCT(a INT, big HUGEINT)", "publish": "iceberg"},
            "publish: field 's.big' is HUGEINT, which has no Iceberg type",
        ),
        (
            {
                "schema": "ts TIMESTAMP, u UUID",
                "partition_by": "bucket[8](u)",
                "publish": "iceberg",
            },
            r"publish: partition 'bucket\[8\]\(u\)' buckets a UUID by its 16 bytes",
        ),
    ],
)
def test_cross_reference_errors_name_the_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        make(**overrides)


def test_aggregate_with_every_column_covered_is_accepted() -> None:
    spec = make(
        merge="aggregate(event, tenant; ts:max, messageId:any, user_id:min, "
        "properties:any, extra:any, price:sum, n:count)"
    )
    assert isinstance(spec.merge, AggregateMode)


@pytest.mark.parametrize("name", ["Events", "../x", "a;b", ""])
def test_invalid_table_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidNameError, match="table name"):
        make(name=name)


def test_hand_built_specs_are_validated_too() -> None:
    with pytest.raises(SpecError, match="at least one column"):
        TableSpec("t", ())
    with pytest.raises(SpecError, match="columns: expected a tuple"):
        TableSpec("t", [Column("a", "INT")])  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="merge: unexpected value"):
        TableSpec("t", (Column("a", "INT"),), merge="append")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="duplicate column"):
        TableSpec("t", (Column("a", "INT"), Column("A", "INT")))


def test_custom_merge_sql_is_kept_verbatim_apart_from_outer_space() -> None:
    spec = make(merge="sql:  SELECT * FROM rows  ")
    assert spec.merge == CustomMode("SELECT * FROM rows")


def test_a_published_spec_round_trips_and_every_publishable_type_has_an_iceberg_type() -> None:
    from icefloe.iceberg.mapping import iceberg_type
    from icefloe.spec.types import ICEBERG_PUBLISHABLE_TYPES

    spec = make(publish="iceberg")
    assert TableSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert make().publish == "none"
    for duckdb_type in [*ICEBERG_PUBLISHABLE_TYPES, "DECIMAL(10,2)"]:
        assert iceberg_type(duckdb_type) is not None
