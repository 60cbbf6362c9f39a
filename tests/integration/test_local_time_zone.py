"""A process whose local time zone is not UTC stores and answers exactly as one in UTC.

Naive times mean UTC, and queries are computed in UTC. DuckDB takes the process's zone (``TZ``)
for every cursor it opens unless the zone is set for the whole database: an insert or a query
run on a cursor under ``TZ=America/New_York`` read ``2020-01-01 10:00:00`` as 15:00 UTC and
answered ``hour(tz)`` in New York time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Insert the same naive times as rows, as a CSV file and as Arrow text, then answer in the
# child process and in process, and after a merge. The 02:00 UTC event is the day before in
# New York: the day partition and the one-day window must still hold it.
SCRIPT = """
import json, sys
import pyarrow as pa
import icefloe

csv_path = sys.argv[1]
out = {}
for isolation in ("in_process", "child_process"):
    with icefloe.connect(query_isolation=isolation) as lake:
        if isolation == "in_process":
            lake.create_table("t", schema="n INTEGER, ts TIMESTAMP, tz TIMESTAMPTZ NOT NULL",
                              partition_by="day(tz)")
            lake.insert("t", [{"n": 1, "ts": "2020-01-01 10:00:00", "tz": "2020-01-01 02:00:00"}])
            lake.insert("t", csv_path)
            lake.insert("t", pa.table({"n": pa.array([3], pa.int32()),
                                       "ts": ["2020-01-01 10:00:00"],
                                       "tz": ["2020-01-01 02:00:00"]}))
        sql = ("SELECT n, CAST(ts AS VARCHAR) AS ts, CAST(tz AS VARCHAR) AS tz, hour(tz) AS h,"
               " CAST(CAST(tz AS DATE) AS VARCHAR) AS d FROM t"
               " WHERE tz >= TIMESTAMPTZ '2020-01-01 00:00:00' AND tz < TIMESTAMPTZ '2020-01-02'"
               " ORDER BY n")
        out[isolation] = lake.query(sql).to_pylist()
        if isolation == "child_process":
            lake.merge("t")
            out["merged"] = lake.query(sql).to_pylist()
            out["partitions"] = sorted({f.partition_path for f in lake.meta.files("t")})
print(json.dumps(out))
"""


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_a_process_in_another_time_zone_stores_and_answers_in_utc(
    zone: str, tmp_path: Path, postgres_dsn: str, schema_name: str
) -> None:
    # Given a process whose local time zone is New York (or a half-hour zone)
    csv_path = tmp_path / "events.csv"
    csv_path.write_text("n,ts,tz\n2,2020-01-01 10:00:00,2020-01-01 02:00:00\n")
    env = {
        **os.environ,
        "TZ": zone,
        "ICEFLOE_HOME": str(tmp_path / "home"),
        "ICEFLOE_DATABASE_URL": postgres_dsn,
        "ICEFLOE_DATABASE_SCHEMA": schema_name,
    }
    env.pop("ICEFLOE_WAREHOUSE", None)
    # When it inserts naive times three ways and queries them, before and after a merge
    ran = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(csv_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    # Then every input was read as UTC, and every answer is in UTC
    expected = [
        {
            "n": n,
            "ts": "2020-01-01 10:00:00",
            "tz": "2020-01-01 02:00:00+00",
            "h": 2,
            "d": "2020-01-01",
        }
        for n in (1, 2, 3)
    ]
    assert seen["in_process"] == expected
    assert seen["child_process"] == expected
    assert seen["merged"] == expected
    # And the rows are in the UTC day's partition
    assert seen["partitions"] == ["day=2020-01-01"]


AS_OF_SCRIPT = """
import json
from datetime import UTC
import icefloe

with icefloe.connect(query_isolation="in_process") as lake:
    lake.create_table("t", schema="n INTEGER")
    lake.insert("t", [{"n": 1}])
    lake.insert("t", [{"n": 2}])
    first = lake.snapshots("t")[0].committed_at
    naive_utc = first.astimezone(UTC).replace(tzinfo=None)
    print(json.dumps({
        "aware": lake.query("SELECT count(*) AS c FROM t", as_of=first).to_pylist(),
        "naive": lake.query("SELECT count(*) AS c FROM t", as_of=naive_utc).to_pylist(),
    }))
"""


def test_a_naive_as_of_is_utc_whatever_the_meta_store_sessions_zone(
    tmp_path: Path, postgres_dsn: str, schema_name: str
) -> None:
    # Given a meta store session in New York time (PGTZ sets it, as a server's default would)
    env = {
        **os.environ,
        "TZ": "America/New_York",
        "PGTZ": "America/New_York",
        "ICEFLOE_HOME": str(tmp_path / "home"),
        "ICEFLOE_DATABASE_URL": postgres_dsn,
        "ICEFLOE_DATABASE_SCHEMA": schema_name,
    }
    env.pop("ICEFLOE_WAREHOUSE", None)
    # When a query asks for the first snapshot's commit time, naive (UTC) and aware
    ran = subprocess.run(
        [sys.executable, "-c", AS_OF_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    # Then both read the first snapshot (a naive time read as New York's was five hours later:
    # the second snapshot)
    assert seen == {"aware": [{"c": 1}], "naive": [{"c": 1}]}
