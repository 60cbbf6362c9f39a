"""Nested columns in Iceberg's terms: the schema keeps icefloe's ids at every level, the name
mapping lists the fields inside each column, and footer paths map to leaf ids."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
)

from icefloe.datafiles import encode_parquet
from icefloe.iceberg.mapping import footer_field_ids, iceberg_schema, name_mapping
from icefloe.ingest.row_ids import ROW_ID_COLUMN, new_row_ids
from icefloe.spec import TableSpec

SPEC = TableSpec.create(
    name="ev",
    schema="ts TIMESTAMP NOT NULL, context STRUCT(ip VARCHAR, page STRUCT(url VARCHAR,"
    " title VARCHAR)), tags STRUCT(k VARCHAR, v BIGINT)[], m MAP(VARCHAR, INTEGER)",
    publish="iceberg",
)


def test_the_iceberg_schema_carries_every_nested_id_and_pyiceberg_keeps_them() -> None:
    expected = Schema(
        NestedField(1, "ts", TimestampType(), required=True),
        NestedField(
            2,
            "context",
            StructType(
                NestedField(5, "ip", StringType(), required=False),
                NestedField(
                    6,
                    "page",
                    StructType(
                        NestedField(7, "url", StringType(), required=False),
                        NestedField(8, "title", StringType(), required=False),
                    ),
                    required=False,
                ),
            ),
            required=False,
        ),
        NestedField(
            3,
            "tags",
            ListType(
                9,
                StructType(
                    NestedField(10, "k", StringType(), required=False),
                    NestedField(11, "v", LongType(), required=False),
                ),
                element_required=False,
            ),
            required=False,
        ),
        NestedField(
            4,
            "m",
            MapType(12, StringType(), 13, IntegerType(), value_required=False),
            required=False,
        ),
    )
    schema = iceberg_schema(SPEC)
    assert schema.as_struct() == expected.as_struct()
    # create_table numbers a new table's schema afresh: a new icefloe table's ids survive it
    assert assign_fresh_schema_ids(schema).as_struct() == schema.as_struct()


def test_the_name_mapping_lists_the_fields_inside_each_column() -> None:
    mapping = {f["field-id"]: f for f in json.loads(name_mapping(SPEC, set()))}
    assert mapping[2]["names"] == ["context"]
    assert mapping[2]["fields"] == [
        {"field-id": 5, "names": ["ip"]},
        {
            "field-id": 6,
            "names": ["page"],
            "fields": [{"field-id": 7, "names": ["url"]}, {"field-id": 8, "names": ["title"]}],
        },
    ]
    assert mapping[3]["fields"] == [
        {
            "field-id": 9,
            "names": ["element"],
            "fields": [{"field-id": 10, "names": ["k"]}, {"field-id": 11, "names": ["v"]}],
        }
    ]
    assert mapping[4]["fields"] == [
        {"field-id": 12, "names": ["key"]},
        {"field-id": 13, "names": ["value"]},
    ]
    assert "fields" not in mapping[1]


def test_footer_paths_map_to_the_leaf_ids_the_file_carries() -> None:
    casts = ", ".join(f"NULL::{c.type} AS {c.name}" for c in SPEC.columns)
    table = duckdb.sql(f"SELECT {casts}").to_arrow_table()
    table = table.set_column(0, "ts", pa.array([0], pa.timestamp("us")))
    table = table.append_column(ROW_ID_COLUMN, new_row_ids(1))
    footer = pq.read_metadata(
        pa.BufferReader(encode_parquet(table, spec=SPEC, row_group_sizes=1).data)
    )
    leaves = footer_field_ids(SPEC.layout)
    paths = [footer.schema.column(i).path for i in range(footer.num_columns)]
    assert [p for p in paths if p != ROW_ID_COLUMN] == list(leaves)
    assert leaves == {
        "ts": (1, "TIMESTAMP"),
        "context.ip": (5, "VARCHAR"),
        "context.page.url": (7, "VARCHAR"),
        "context.page.title": (8, "VARCHAR"),
        "tags.list.element.k": (10, "VARCHAR"),
        "tags.list.element.v": (11, "BIGINT"),
        "m.key_value.key": (12, "VARCHAR"),
        "m.key_value.value": (13, "INTEGER"),
    }
    arrow = footer.schema.to_arrow_schema()
    assert arrow.field("context").type.field("page").type.field("url").metadata == {
        b"PARQUET:field_id": b"7"
    }
