"""TIME statistics are read from a footer's stored integers, not pyarrow's ``datetime.time``
(which reads 24:00:00 back as 00:00:00, proving a file that holds the latest time of a day
held none late): ``24:00:00`` is kept as such, a value outside the day leaves the file's
range unknown, and every unit gives the same text for the same time."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.datafiles import footer_stats
from icefloe.metastore.models import ColumnStats

DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400 * 10**9}


def _stats(unit: str, *groups: list[int | None]) -> ColumnStats:
    """The TIME statistics of a file of ``unit`` ticks, one row group per list."""
    kind = pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    storage = pa.int32() if kind.bit_width == 32 else pa.int64()
    buffer = io.BytesIO()
    with pq.ParquetWriter(buffer, pa.schema([("t", kind)])) as writer:
        for ticks in groups:
            writer.write_table(pa.table({"t": pa.array(ticks, storage).view(kind)}))
    return footer_stats(pq.read_metadata(pa.BufferReader(buffer.getvalue())))["t"]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_time_2400_is_kept_as_2400_in_every_unit(unit: str) -> None:
    day = DAY[unit]
    stats = _stats(unit, [day // 2, None], [day, day // 4])
    assert stats == ColumnStats(min="06:00:00", max="24:00:00", null_count=1)


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
def test_fractions_are_written_to_the_microsecond(unit: str) -> None:
    per_second = DAY[unit] // 86_400
    half = per_second // 2
    stats = _stats(unit, [3600 * per_second + half, 7200 * per_second])
    assert (stats.min, stats.max) == ("01:00:00.500000", "02:00:00")


def test_a_nanosecond_fraction_below_a_microsecond_is_dropped() -> None:
    # DuckDB reads the column in microseconds, dropping the rest as well
    stats = _stats("ns", [1_500, 86_400 * 10**9 - 1])
    assert (stats.min, stats.max) == ("00:00:00.000001", "23:59:59.999999")


@pytest.mark.parametrize("unit", ["s", "us"])
def test_a_time_outside_the_day_leaves_the_range_unknown(unit: str) -> None:
    day = DAY[unit]
    assert _stats(unit, [0, day + 1]) == ColumnStats(min=None, max=None, null_count=0)
    assert _stats(unit, [-1, 5], [day // 2]) == ColumnStats(min=None, max=None, null_count=0)


def test_the_text_orders_as_the_times_do() -> None:
    times = [0, 1, 999_999, 1_000_000, 43_200_000_000, 86_399_999_999, 86_400_000_000]
    texts = [_stats("us", [t]).max for t in times]
    assert texts == [
        "00:00:00",
        "00:00:00.000001",
        "00:00:00.999999",
        "00:00:01",
        "12:00:00",
        "23:59:59.999999",
        "24:00:00",
    ]
    assert sorted(texts) == texts  # the meta store compares them as text ("C" collation)
