"""S3 reads for the query path: DuckDB's httpfs versus pyarrow's S3 filesystem (Query issue).

Against moto's S3 server over real HTTP (a proxy counts the bytes sent), the same sorted files
(value-sorted ``user_id``, row groups of 50,000 rows) are read three ways by each reader: a full
scan of one numeric column, a point query on the sort key, and every column. Medians of 5 runs,
each on a fresh connection or filesystem (no cache carried over).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import boto3
import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from moto.server import ThreadedMotoServer
from pyarrow import fs

from benchmarks.common import write_results
from icefloe.datafiles import encode_parquet
from icefloe.query.s3_access import S3Credentials, configure_s3

SCALES = {"small": {"files": 4, "rows": 200_000}, "full": {"files": 10, "rows": 400_000}}
RUNS = 5


def _files(s3: Any, *, files: int, rows: int) -> list[str]:
    keys = []
    for f in range(files):
        base = f * rows
        table = pa.table(
            {
                "user_id": pa.array([f"u{(base + i) // 1000:06d}" for i in range(rows)]),
                "payload": pa.array(
                    [f"payload text {(base + i) * 7919 % 100003}" for i in range(rows)]
                ),
                "n": pa.array(range(base, base + rows), pa.int64()),
            }
        )
        encoded = encode_parquet(table, row_group_sizes=[50_000] * (rows // 50_000))
        key = f"bench/f{f:03d}.parquet"
        s3.put_object(Bucket="bench", Key=key, Body=encoded.data)
        keys.append(key)
    return keys


def _measure(proxy: Any, fn: Callable[[], object]) -> dict[str, float]:
    seconds, fetched = [], []
    for _ in range(RUNS):
        proxy.reset()
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
        fetched.append(proxy.bytes_down)
    return {
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "bytes": int(statistics.median(fetched)),
    }


def main() -> None:
    from tests.support.byte_counter import CountingProxy  # the same counter the tests use

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        s3.create_bucket(Bucket="bench")
        keys = _files(s3, files=scale["files"], rows=scale["rows"])
        proxy = CountingProxy(host=str(urlparse(endpoint).hostname), port=port)
        uris = [f"s3://bench/{k}" for k in keys]
        target = f"u{(scale['rows'] * scale['files'] // 2) // 1000:06d}"

        def duck(sql: str) -> Callable[[], object]:
            def run() -> object:
                con = duckdb.connect()
                configure_s3(
                    con,
                    region="us-east-1",
                    endpoint_url=proxy.endpoint,
                    credentials=S3Credentials("testing", "testing"),
                )
                rows = con.execute(sql.format(src=f"read_parquet({uris!r})")).fetchall()
                con.close()
                return rows

            return run

        def arrow(columns: list[str] | None, filt: Any) -> Callable[[], object]:
            def run() -> object:
                s3fs = fs.S3FileSystem(
                    access_key="testing",
                    secret_key="testing",
                    region="us-east-1",
                    endpoint_override=f"127.0.0.1:{proxy.port}",
                    scheme="http",
                )
                dataset = ds.dataset(
                    [u[len("s3://") :] for u in uris], format="parquet", filesystem=s3fs
                )
                return dataset.to_table(columns=columns, filter=filt)

            return run

        results = {
            "full_scan_one_column": {
                "duckdb_httpfs": _measure(proxy, duck("SELECT sum(n) FROM {src}")),
                "pyarrow_s3fs": _measure(proxy, arrow(["n"], None)),
            },
            "point_query_on_sort_key": {
                "duckdb_httpfs": _measure(
                    proxy, duck("SELECT sum(n) FROM {src} WHERE user_id = '" + target + "'")
                ),
                "pyarrow_s3fs": _measure(proxy, arrow(["n"], pc.field("user_id") == target)),
            },
            "all_columns": {
                "duckdb_httpfs": _measure(
                    proxy, duck("SELECT count(*), max(payload), sum(n), max(user_id) FROM {src}")
                ),
                "pyarrow_s3fs": _measure(proxy, arrow(None, None)),
            },
        }
        for row in results.values():
            row["ratio_pyarrow_to_duckdb_time"] = round(
                row["pyarrow_s3fs"]["median_ms"] / row["duckdb_httpfs"]["median_ms"], 2
            )
        total = sum(len(s3.get_object(Bucket="bench", Key=k)["Body"].read()) for k in keys)
        proxy.close()
    finally:
        server.stop()
    path = write_results(
        "s3_read",
        {"scale": args.scale, "files": len(keys), "total_bytes": total, "results": results},
    )
    print(f"wrote {path}; {len(keys)} files, {total:,} bytes")
    for name, row in results.items():
        d, a = row["duckdb_httpfs"], row["pyarrow_s3fs"]
        print(
            f"{name:>24}: duckdb {d['median_ms']} ms / {d['bytes']:,} B;"
            f" pyarrow {a['median_ms']} ms / {a['bytes']:,} B"
        )


if __name__ == "__main__":
    main()
