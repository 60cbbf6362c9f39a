"""Times finer than a microsecond: ``TIME`` and ``TIMESTAMP`` hold whole microseconds, and the
finer digits are dropped, the same from every input (Go, OpenTelemetry, pandas and polars send
nanoseconds; refusing them would refuse whole streams over digits no query reads). Arrow's
``time64[ns]`` (polars' ``Time``) was refused outright, and DuckDB's own cast of it rounded
23:59:59.9999999 up to 24:00:00."""

from __future__ import annotations

from datetime import datetime, time
from pathlib import Path

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.lake import Lake

LAST_NANO_OF_DAY = 86_399_999_999_999


@pytest.fixture
def times(connected_lake: Lake) -> Lake:
    connected_lake.create_table(
        "tn", schema="id BIGINT, t TIME, ts TIMESTAMP, tz TIMESTAMPTZ, s STRUCT(t TIME)"
    )
    return connected_lake


def stored(lake: Lake) -> list[dict[str, object]]:
    return lake.query("SELECT id, t, ts, tz, s FROM tn ORDER BY id").to_pylist()


def test_nanosecond_times_keep_their_whole_microseconds(times: Lake) -> None:
    lake = times
    nanos = pa.array([1, LAST_NANO_OF_DAY, 3_600_000_001_999], pa.time64("ns"))
    lake.insert("tn", pa.table({"id": [1, 2, 3], "t": nanos}))
    lake.insert("tn", pl.DataFrame({"id": [4], "t": [time(10, 0, 0, 5)]}))
    nested = pa.array([{"t": LAST_NANO_OF_DAY}], pa.struct([("t", pa.time64("ns"))]))
    lake.insert("tn", pa.table({"id": [5], "s": nested}))
    rows = {r["id"]: (r["t"], r["s"]) for r in stored(lake)}
    assert rows == {
        1: (time(0, 0), None),
        2: (time(23, 59, 59, 999_999), None),
        3: (time(1, 0, 0, 1), None),
        4: (time(10, 0, 0, 5), None),
        5: (None, {"t": time(23, 59, 59, 999_999)}),
    }


def test_a_nanosecond_time_of_24_hours_is_refused(times: Lake) -> None:
    whole_day = pa.array([LAST_NANO_OF_DAY + 1], pa.time64("ns"))
    with pytest.raises(BatchRejectedError, match="row 0, field 't': a TIME must be from 00:00:00"):
        times.insert("tn", pa.table({"id": [9], "t": whole_day}))
    assert times.table("tn").head_snapshot_id == 0


def test_nanosecond_timestamps_drop_the_same_digits_from_every_input(
    times: Lake, tmp_path: Path
) -> None:
    lake = times
    text = "2020-06-01T10:00:00.123456789Z"
    nanos = pd.Timestamp("2020-06-01 10:00:00.123456789").value
    lake.insert("tn", [{"id": 1, "ts": text, "tz": text}])
    csv = tmp_path / "rows.csv"
    csv.write_text(f"id,ts,tz\n2,{text},{text}\n")
    lake.insert("tn", csv)
    lake.insert(
        "tn",
        pa.table(
            {
                "id": [3],
                "ts": pa.array([nanos], pa.timestamp("ns")),
                "tz": pa.array([nanos], pa.timestamp("ns", tz="UTC")),
            }
        ),
    )
    frame = pd.DataFrame({"id": [4], "ts": [pd.Timestamp(text).tz_localize(None)]})
    lake.insert("tn", frame.assign(tz=pd.Timestamp(text)))
    lake.insert(
        "tn",
        pl.DataFrame({"id": [5], "ts": [nanos]}).with_columns(
            pl.col("ts").cast(pl.Datetime("ns")), tz=pl.col("ts").cast(pl.Datetime("ns", "UTC"))
        ),
    )
    moment = datetime(2020, 6, 1, 10, 0, 0, 123_456)
    for row in stored(lake):
        ts, tz = row["ts"], row["tz"]
        assert isinstance(tz, datetime)
        assert (ts, tz.replace(tzinfo=None)) == (moment, moment), row["id"]
    assert len(stored(lake)) == 5
