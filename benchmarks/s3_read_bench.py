"""S3 reads for the query path: DuckDB's httpfs against pyarrow.dataset on pyarrow's S3FileSystem.

Events-like files (``ts``, ``event``, ``user_id``, ``properties`` JSON, ``duration_ms``), sorted
by ``user_id`` across the whole set as a merge leaves them, row groups of 100,000 rows, are served
by moto's S3 server over real HTTP. Each reader does three reads: (a) ``count(*)`` and the sum of
one numeric column over everything, (b) one column of one row group through a filter on the sort
key, (c) every column into Arrow. Times are medians of 5 cold runs (a fresh DuckDB connection or
S3 filesystem each, set up outside the timer; its cost is recorded on its own); bytes and HTTP
requests come from one extra run through a counting proxy, so the proxy does not slow the timed
runs. Run: ``.venv/bin/python -m benchmarks.s3_read_bench --scale small``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from moto.server import ThreadedMotoServer

from benchmarks.common import write_results
from icefloe.datafiles import encode_parquet, with_json_columns
from icefloe.query.s3_access import S3Credentials, configure_s3, pyarrow_s3_filesystem
from icefloe.spec import TableSpec
from support.byte_counter import CountingProxy  # the counter the tests use

SCALES = {"small": {"files": 4, "rows": 200_000}, "full": {"files": 20, "rows": 200_000}}
ROW_GROUP_ROWS = 100_000
RUNS = 5
BUCKET = "s3-read-bench"
REGION = "us-east-1"
CREDS = S3Credentials("testing", "testing")
EVENTS = np.array(["page_load", "click", "signup", "purchase"])
PATHS = np.array(["/", "/pricing", "/docs", "/blog", "/signup", "/checkout"])


@dataclass(frozen=True)
class Reader:
    """A way to read: ``setup(endpoint)`` builds a fresh client, ``read(client)`` does the read."""

    setup: Callable[[str], Any]
    read: Callable[[Any], object]


def _events(rng: np.random.Generator, user_ids: np.ndarray) -> pa.Table:
    rows = len(user_ids)
    paths = rng.choice(PATHS, rows)
    numtime = rng.integers(0, 10_000, rows)
    properties = [
        json.dumps({"path": p, "numtime": int(n), "referrer": f"https://ref{n % 97}.example/"})
        for p, n in zip(paths.tolist(), numtime.tolist(), strict=True)
    ]
    seconds = rng.integers(0, 86_400, rows).astype("timedelta64[s]")
    table = pa.table(
        {
            "ts": pa.array(np.datetime64("2026-11-01T00:00:00") + seconds, pa.timestamp("us")),
            "event": pa.array(rng.choice(EVENTS, rows, p=[0.6, 0.3, 0.03, 0.07])),
            "user_id": pa.array(np.char.add("u", np.char.zfill(user_ids.astype(str), 7))),
            "properties": pa.array(properties),
            "duration_ms": pa.array(rng.integers(1, 60_000, rows), pa.int64()),
        }
    )
    return with_json_columns(table, ["properties"])


SPEC = TableSpec.create(
    name="events",
    schema="ts TIMESTAMP, event VARCHAR, user_id VARCHAR, properties JSON, duration_ms BIGINT",
)


def write_files(s3: Any, *, files: int, rows: int) -> tuple[list[str], int, str]:
    """Upload the files; return their URIs, total bytes, and a user id inside one row group."""
    rng = np.random.default_rng(7)
    users = np.sort(rng.integers(0, files * rows // 100, files * rows))
    uris, total = [], 0
    for f in range(files):
        encoded = encode_parquet(
            _events(rng, users[f * rows : (f + 1) * rows]),
            spec=SPEC,
            row_group_sizes=ROW_GROUP_ROWS,
        )
        key = f"events/data/f{f:03d}.parquet"
        s3.put_object(Bucket=BUCKET, Key=key, Body=encoded.data)
        uris.append(f"s3://{BUCKET}/{key}")
        total += len(encoded.data)
    middle = (files // 2) * rows + ROW_GROUP_ROWS // 2  # mid-row-group: no boundary straddled
    return uris, total, f"u{users[middle]:07d}"


def readers(uris: list[str], target: str) -> dict[str, dict[str, Reader]]:
    paths = [u.removeprefix("s3://") for u in uris]

    def duck(endpoint: str) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        configure_s3(con, region=REGION, endpoint_url=endpoint, credentials=CREDS)
        return con

    def arrow(endpoint: str) -> Any:
        return pyarrow_s3_filesystem(region=REGION, endpoint_url=endpoint, credentials=CREDS)

    def dataset(s3fs: Any) -> ds.Dataset:
        return ds.dataset(paths, format="parquet", filesystem=s3fs)

    def duck_sql(sql: str, *params: object) -> Reader:
        return Reader(duck, lambda con: con.execute(sql, [uris, *params]).fetchall())

    def full_scan(s3fs: Any) -> object:
        table = dataset(s3fs).to_table(columns=["duration_ms"])
        return [(table.num_rows, pc.sum(table.column("duration_ms")).as_py())]

    def point(s3fs: Any) -> object:
        table = dataset(s3fs).to_table(
            columns=["duration_ms"], filter=ds.field("user_id") == target
        )
        return sorted((v,) for v in table.column("duration_ms").to_pylist())

    return {
        "a_full_scan_count_and_sum": {
            "duckdb_httpfs": duck_sql("SELECT count(*), sum(duration_ms) FROM read_parquet(?)"),
            "pyarrow_dataset": Reader(arrow, full_scan),
        },
        "b_one_column_one_row_group": {
            "duckdb_httpfs": duck_sql(
                "SELECT duration_ms FROM read_parquet(?) WHERE user_id = ? ORDER BY 1", target
            ),
            "pyarrow_dataset": Reader(arrow, point),
        },
        "c_all_columns": {
            "duckdb_httpfs": Reader(
                duck,
                lambda con: (
                    con.execute("SELECT * FROM read_parquet(?)", [uris]).to_arrow_table().num_rows
                ),
            ),
            "pyarrow_dataset": Reader(arrow, lambda s3fs: dataset(s3fs).to_table().num_rows),
            # The same decoding without DuckDB's export of the result to Arrow: which part is I/O.
            "duckdb_httpfs_no_arrow_export": Reader(
                duck,
                lambda con: con.execute(
                    "SELECT count(*), max(ts), max(event), max(user_id),"
                    " max(length(properties::VARCHAR)), sum(duration_ms) FROM read_parquet(?)",
                    [uris],
                ).fetchall()[0][0],
            ),
        },
    }


def measure(reader: Reader, *, endpoint: str, proxy: CountingProxy) -> dict[str, Any]:
    """Median of ``RUNS`` cold reads (after one warm-up), then one counted read via the proxy."""
    setups, reads, answer = [], [], None
    for run in range(RUNS + 1):
        start = time.perf_counter()
        client = reader.setup(endpoint)
        ready = time.perf_counter()
        answer = reader.read(client)
        done = time.perf_counter()
        _close(client)
        if run:  # the first run warms the process (extension load, SDK init)
            setups.append(ready - start)
            reads.append(done - ready)
    client = reader.setup(proxy.endpoint)
    proxy.reset()
    reader.read(client)
    _close(client)
    return {
        "median_ms": round(statistics.median(reads) * 1000, 1),
        "setup_median_ms": round(statistics.median(setups) * 1000, 1),
        "bytes": proxy.bytes_down,
        "requests": proxy.requests,
        "answer": answer,
    }


def _close(client: Any) -> None:
    if isinstance(client, duckdb.DuckDBPyConnection):
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto logs every request
    began = time.perf_counter()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=CREDS.key_id,
            aws_secret_access_key=CREDS.secret,
        )
        s3.create_bucket(Bucket=BUCKET)
        uris, total_bytes, target = write_files(s3, files=scale["files"], rows=scale["rows"])
        proxy = CountingProxy(host=host, port=port)
        results: dict[str, dict[str, Any]] = {}
        for read, by_reader in readers(uris, target).items():
            row = {
                name: measure(r, endpoint=endpoint, proxy=proxy) for name, r in by_reader.items()
            }
            duck, arrow = row["duckdb_httpfs"], row["pyarrow_dataset"]
            if len({repr(r.pop("answer")) for r in row.values()}) != 1:
                raise SystemExit(f"{read}: the readers disagree")
            row["ratio_pyarrow_to_duckdb"] = round(arrow["median_ms"] / duck["median_ms"], 2)
            results[read] = row
        proxy.close()
    finally:
        server.stop()
    payload = {
        "scale": args.scale,
        "files": len(uris),
        "rows": scale["files"] * scale["rows"],
        "row_group_rows": ROW_GROUP_ROWS,
        "total_bytes": total_bytes,
        "runs": RUNS,
        "duckdb": duckdb.__version__,
        "pyarrow": pa.__version__,
        "duckdb_threads": duckdb.connect()
        .execute("SELECT current_setting('threads')")
        .fetchall()[0][0],
        "pyarrow_io_threads": pa.io_thread_count(),
        "server": "moto ThreadedMotoServer over loopback HTTP",
        "results": results,
        "wall_s": round(time.perf_counter() - began, 1),
    }
    path = write_results("s3_read", payload)
    print(f"{len(uris)} files, {payload['rows']:,} rows, {total_bytes:,} bytes -> {path}")
    for read, row in results.items():
        d, a = row["duckdb_httpfs"], row["pyarrow_dataset"]
        print(
            f"{read:>28}: duckdb {d['median_ms']:>8} ms {d['bytes']:>12,} B {d['requests']:>4} req"
            f" | pyarrow {a['median_ms']:>8} ms {a['bytes']:>12,} B {a['requests']:>4} req"
            f" | pyarrow/duckdb {row['ratio_pyarrow_to_duckdb']}"
        )
        if "duckdb_httpfs_no_arrow_export" in row:
            print(
                f"{'':>28}  duckdb without the export to Arrow:"
                f" {row['duckdb_httpfs_no_arrow_export']['median_ms']} ms"
            )
    setup = {r: row[r]["setup_median_ms"] for r in ("duckdb_httpfs", "pyarrow_dataset")}
    print(f"setup per cold client (median): {setup}; wall {payload['wall_s']} s")


if __name__ == "__main__":
    main()
