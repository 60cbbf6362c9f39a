"""The meta store's file pruning is sound: over files whose statistics come from real Parquet
footers (membership filters included), a file holding a row that passes some scan's filters is
always listed, for random filters of every type family pruning compares. And it prunes: the
same files are skipped when their statistics prove nothing matches."""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from icefloe.datafiles import encode_parquet, membership_column, new_file_record
from icefloe.membership import may_contain
from icefloe.metastore.store import MetaStore
from icefloe.query.pruning import file_condition
from icefloe.query.scan_filters import (
    AllOf,
    AnyOf,
    Compare,
    InList,
    IsNotNull,
    IsNull,
    ScanFilter,
    TableScans,
    float_key,
)
from icefloe.spec import TableSpec
from support.scan_filter_semantics import passes

SEED = 20261125
FILES = 120
CONDITIONS = 600

SPEC = TableSpec.create(
    name="stats",
    schema=(
        "ts TIMESTAMP NOT NULL, u VARCHAR, n BIGINT, d DOUBLE, f FLOAT, m DECIMAL(9,2),"
        " b BOOLEAN, dt DATE, tm TIME, tz TIMESTAMPTZ"
    ),
    partition_by="day(ts)",
    row_group_by="u",
)
EPOCH = datetime(1970, 1, 1)
EPOCH_DATE = date(1970, 1, 1)
DAY_US = 86_400_000_000


@dataclass(frozen=True)
class Column:
    name: str
    arrow: pa.DataType
    # A random value in the comparison domain, and that value as pyarrow takes it.
    draw: Any
    to_python: Any


def _micros_to_datetime(v: int) -> datetime:
    return EPOCH + timedelta(microseconds=v)


def _micros_to_time(v: int) -> time:
    seconds, micros = divmod(v, 1_000_000)
    return time(seconds // 3600, seconds // 60 % 60, seconds % 60, micros)


def _float32(rng: random.Random) -> tuple[int, float]:
    return float_key(float(pa.scalar(rng.uniform(-5, 5), pa.float32()).as_py()))


BASE_US = (datetime(2026, 11, 1) - EPOCH) // timedelta(microseconds=1)
COLUMNS = [
    Column(
        "ts",
        pa.timestamp("us"),
        lambda r: BASE_US + r.randrange(0, 3 * DAY_US, 997_000_013),
        _micros_to_datetime,
    ),
    Column(
        "u",
        pa.string(),
        # '%' is the driver's placeholder mark: compared literals must keep it as it is.
        lambda r: r.choice(["", "a", "ab", "b", "é", "z", "%Z", "日本"]) + r.choice(["", "x", "%"]),
        lambda v: v,
    ),
    Column("n", pa.int64(), lambda r: r.randint(-30, 30), lambda v: v),
    Column(
        "d",
        pa.float64(),
        lambda r: float_key(math.nan) if r.random() < 0.05 else float_key(r.uniform(-5, 5)),
        lambda v: math.nan if v[0] else v[1],
    ),
    Column("f", pa.float32(), _float32, lambda v: v[1]),
    Column(
        "m",
        pa.decimal128(9, 2),
        lambda r: Decimal(r.randint(-2000, 2000)).scaleb(-2),
        lambda v: v,
    ),
    Column("b", pa.bool_(), lambda r: r.random() < 0.5, lambda v: v),
    Column(
        "dt",
        pa.date32(),
        lambda r: 20_000 + r.randint(0, 40),
        lambda v: EPOCH_DATE + timedelta(days=v),
    ),
    Column("tm", pa.time64("us"), lambda r: r.randrange(0, DAY_US, 1_000_003), _micros_to_time),
    Column(
        "tz",
        pa.timestamp("us", tz="UTC"),
        lambda r: BASE_US + r.randrange(-DAY_US, DAY_US, 7_000_001),
        lambda v: _micros_to_datetime(v).replace(tzinfo=UTC),
    ),
]
BY_NAME = {c.name: c for c in COLUMNS}


def _files(rng: random.Random) -> list[dict[str, list[Any]]]:
    """Each file's values per column (domain values; None is NULL). Most files are narrow in
    some columns so that statistics can prove something."""
    files = []
    for _ in range(FILES):
        rows = rng.randint(1, 12)
        values: dict[str, list[Any]] = {}
        for column in COLUMNS:
            null_share = rng.choice([0.0, 0.0, 0.3, 1.0]) if column.name != "ts" else 0.0
            pool = [column.draw(rng) for _ in range(rng.randint(1, 4))]
            values[column.name] = [
                None if rng.random() < null_share else rng.choice(pool) for _ in range(rows)
            ]
        files.append(values)
    return files


def _commit(meta: MetaStore, files: list[dict[str, list[Any]]]) -> None:
    meta.create_table(SPEC)
    records = []
    for i, values in enumerate(files):
        arrays = {
            c.name: pa.array(
                [None if v is None else c.to_python(v) for v in values[c.name]], type=c.arrow
            )
            for c in COLUMNS
        }
        encoded = encode_parquet(
            pa.table(arrays),
            spec=SPEC,
            row_group_sizes=5,
            membership_column=membership_column(SPEC),
        )
        records.append(
            new_file_record(
                key=f"stats/data/file-{i}.parquet",
                encoded=encoded,
                partition_path="",
                partition_values={},
                partition_start=None,
                spec_version=SPEC.version,
            )
        )
    meta.commit_append(SPEC.name, files=records)


def _filter(rng: random.Random, column: Column, depth: int = 0) -> ScanFilter:
    roll = rng.random()
    if depth < 2 and roll < 0.15:
        children = tuple(_filter(rng, column, depth + 1) for _ in range(rng.randint(1, 3)))
        return AllOf(children) if rng.random() < 0.5 else AnyOf(children)
    if roll < 0.22:
        return IsNull()
    if roll < 0.29:
        return IsNotNull()
    if roll < 0.45:
        return InList(tuple(column.draw(rng) for _ in range(rng.randint(1, 4))))
    return Compare(rng.choice(["=", "!=", "<", "<=", ">", ">="]), column.draw(rng))


def _matches(values: dict[str, list[Any]], scan: dict[str, ScanFilter]) -> bool:
    rows = len(values["ts"])
    return any(all(passes(values[c][i], f) for c, f in scan.items()) for i in range(rows))


@pytest.fixture(scope="module")
def stored(postgres_dsn: str) -> Any:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    store = MetaStore(postgres_dsn, schema=schema, max_connections=4)
    store.migrate()
    files = _files(random.Random(SEED))
    _commit(store, files)
    yield store, files
    store.close()


def _listed(meta: MetaStore, scans: TableScans) -> set[str]:
    with meta.read_tables([SPEC.name]) as read:
        listing = read.pin(SPEC.name).files(may_match=file_condition(scans, SPEC))
    return set(listing.paths)


def test_a_file_holding_a_matching_row_is_always_listed(stored: Any) -> None:
    meta, files = stored
    rng = random.Random(SEED + 1)
    pruned = 0
    for _ in range(CONDITIONS):
        scans = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            columns = rng.sample(COLUMNS, rng.choice([1, 1, 2]))
            scans.append({c.name: _filter(rng, c) for c in columns})
        listed = _listed(meta, TableScans(SPEC.name, tuple(scans)))
        for i, values in enumerate(files):
            path = f"stats/data/file-{i}.parquet"
            if any(_matches(values, scan) for scan in scans):
                assert path in listed, (scans, values)
        pruned += len(files) - len(listed)
    # Sound and not trivially so: most random conditions let statistics skip files.
    assert pruned > CONDITIONS * FILES // 4


def test_each_type_family_prunes(stored: Any) -> None:
    meta, files = stored
    for column in COLUMNS:
        low = min(v for f in files for v in f[column.name] if v is not None)
        below = TableScans(SPEC.name, ({column.name: Compare("<", low)},))
        # Parquet records no minimum of NaN alone: such a file proves nothing.
        only_nan = {
            f"stats/data/file-{i}.parquet"
            for i, f in enumerate(files)
            if column.name == "d"
            and any(v is not None for v in f["d"])
            and all(v is None or v[0] for v in f["d"])
        }
        assert _listed(meta, below) == only_nan, column.name
        at_least = TableScans(SPEC.name, ({column.name: Compare(">=", low)},))
        holding = {
            f"stats/data/file-{i}.parquet"
            for i, f in enumerate(files)
            if any(v is not None for v in f[column.name])
        }
        assert _listed(meta, at_least) >= holding, column.name


def test_floating_point_files_have_no_upper_bound(stored: Any) -> None:
    # Parquet statistics leave NaN out and DuckDB orders NaN above every number, so no float
    # file is skipped for a constant above its maximum.
    meta, files = stored
    above = TableScans(SPEC.name, ({"d": Compare(">", float_key(1e9))},))
    with_values = {
        f"stats/data/file-{i}.parquet"
        for i, f in enumerate(files)
        if any(v is not None for v in f["d"])
    }
    assert _listed(meta, above) == with_values


def test_membership_filters_skip_files_min_max_cannot(stored: Any) -> None:
    meta, files = stored
    absent = "c"  # inside many files' min/max range of u, in none of them
    assert all(absent not in f["u"] for f in files)
    filters = {f.path: f.column_stats["u"].membership for f in meta.files(SPEC.name)}
    in_range = {
        path
        for i, f in enumerate(files)
        if (present := [v for v in f["u"] if v is not None])
        and min(present) < absent < max(present)
        and (path := f"stats/data/file-{i}.parquet")
    }
    # The filters' own false positives (about 1%) are read; every other file is skipped.
    expected = {p for p in in_range if may_contain(filters[p] or "", absent)}
    assert len(in_range) - len(expected) > 10
    assert _listed(meta, TableScans(SPEC.name, ({"u": Compare("=", absent)},))) == expected
    # An IN list: a file is read when one value is in its range and one may be in its filter.
    values = (absent, "c1")
    expected = {
        f"stats/data/file-{i}.parquet"
        for i, f in enumerate(files)
        if (present := [v for v in f["u"] if v is not None])
        and any(min(present) <= v <= max(present) for v in values)
        and any(may_contain(filters[f"stats/data/file-{i}.parquet"] or "", v) for v in values)
    }
    assert _listed(meta, TableScans(SPEC.name, ({"u": InList(values)},))) == expected


def test_an_all_null_column_fails_every_comparison_and_a_null_test_needs_a_null(
    stored: Any,
) -> None:
    meta, files = stored
    not_equal = _listed(meta, TableScans(SPEC.name, ({"n": Compare("!=", 1000)},)))
    is_null = _listed(meta, TableScans(SPEC.name, ({"n": IsNull()},)))
    for i, f in enumerate(files):
        path = f"stats/data/file-{i}.parquet"
        assert (path in not_equal) == any(v is not None for v in f["n"])
        assert (path in is_null) == any(v is None for v in f["n"])


def test_a_scan_without_filters_and_an_unread_plan_read_every_file(stored: Any) -> None:
    meta, files = stored
    everything = {f"stats/data/file-{i}.parquet" for i in range(len(files))}
    narrow = {"n": Compare(">", 10_000)}
    assert _listed(meta, TableScans(SPEC.name, (narrow,))) == set()
    assert _listed(meta, TableScans(SPEC.name, (narrow, {}))) == everything
    assert _listed(meta, TableScans(SPEC.name, None)) == everything
