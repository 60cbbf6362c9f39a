"""icefloe beside its peers (issue 37): DuckLake, delta-rs and pyiceberg, in one run, on the
local filesystem, each at its defaults.

The same Segment-like events (a flat table: message id, time, type, event, user, anonymous id,
page url, JSON properties) go through four phases:

- **W1**: ``w1_commits`` commits of ``w1_rows`` rows each, from Arrow; rows per second over
  the whole phase, and the median commit.
- **W2**: ``w2_rows`` rows in one commit, from Arrow; the median of ``w2_repeat`` fresh tables.
- **W3**: compacting W1's table (icefloe ``lake.merge()``, DuckLake
  ``ducklake_merge_adjacent_files``, delta-rs ``optimize.compact()``; pyiceberg 0.12 has no
  compaction); the median of ``w3_repeat`` tables: W1's own and fresh copies of it loaded
  the same way (the loads not timed), the systems in rotation. icefloe's time includes
  planning, claims and its commits.
- **Queries** over W1's table before and after W3, all through DuckDB: a full-range
  aggregate, a point lookup by message id, and one day of events. icefloe answers through
  ``lake.query`` in process (pinning, pruning); DuckLake through its catalog; delta-rs through
  ``delta_scan``; Iceberg through ``iceberg_scan``. Every system must give the same answers.

Every table is partitioned by day of ``ts``. Delta partitions by a column, so its input carries
a ``day`` column computed before the clock starts. The peers are optional: ``pip install
-e '.[peers]'`` (``make bench`` installs them); a peer that is not installed is skipped and
listed as such.
"""

from __future__ import annotations

import json
import random
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import run_scaled
from icefloe import duck
from support.engines import load_offline_extension

SCALES: dict[str, dict[str, int]] = {
    "small": {
        "w1_commits": 40,
        "w1_rows": 1_000,
        "w2_rows": 100_000,
        "w2_repeat": 3,
        "w3_repeat": 3,
        "repeat": 7,
    },
    "full": {
        "w1_commits": 200,
        "w1_rows": 1_000,
        "w2_rows": 1_000_000,
        "w2_repeat": 3,
        "w3_repeat": 5,
        "repeat": 11,
    },
}
DAYS = 7
START = datetime(2026, 11, 1)
EVENTS = ("page", "track:Product Viewed", "track:Checkout Started", "identify", "screen")
URLS = tuple(
    f"https://shop.example/{p}" for p in ("", "pricing", "docs", "cart", "blog/a", "blog/b")
)
# The events' columns: name, DuckDB type, Arrow type, nullable.
COLUMNS: tuple[tuple[str, str, pa.DataType, bool], ...] = (
    ("message_id", "VARCHAR", pa.string(), False),
    ("ts", "TIMESTAMP", pa.timestamp("us"), False),
    ("type", "VARCHAR", pa.string(), False),
    ("event", "VARCHAR", pa.string(), True),
    ("user_id", "VARCHAR", pa.string(), True),
    ("anonymous_id", "VARCHAR", pa.string(), True),
    ("page_url", "VARCHAR", pa.string(), True),
    ("properties", "JSON", pa.string(), True),
)
SCHEMA_SQL = ", ".join(f"{n} {t}{'' if null else ' NOT NULL'}" for n, t, _, null in COLUMNS)
ARROW_SCHEMA = pa.schema([pa.field(n, a, nullable=null) for n, _, a, null in COLUMNS])
# read_json's columns: every column at its DuckDB type.
JSON_COLUMNS = "{" + ", ".join(f"'{n}': '{t}'" for n, t, _, _ in COLUMNS) + "}"


def events(rows: int, *, seed: int, spread: int = DAYS) -> pa.Table:
    """``rows`` Segment-like events over ``spread`` days from :data:`START`, in time order,
    reproducible."""
    rng = random.Random(seed)
    span = spread * 86_400
    columns: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
    for i in range(rows):
        kind = rng.choice(EVENTS)
        user = rng.randrange(20_000)
        columns["message_id"].append(f"m-{seed}-{i}-{rng.getrandbits(40):010x}")
        columns["ts"].append(START + timedelta(seconds=(i * span) // rows + rng.random()))
        columns["type"].append(kind.split(":")[0])
        columns["event"].append(kind.split(":")[1] if ":" in kind else None)
        columns["user_id"].append(f"u{user}" if user % 5 else None)
        columns["anonymous_id"].append(f"a{rng.getrandbits(32):08x}")
        columns["page_url"].append(rng.choice(URLS))
        columns["properties"].append(
            json.dumps({"price": rng.randrange(1, 500), "qty": rng.randrange(1, 5)})
        )
    return pa.table(columns, schema=ARROW_SCHEMA)


def queries(sample_id: str) -> dict[str, str]:
    """Per kind, the SQL, where ``{t}`` stands for the table."""
    return {
        "full_range": (
            "SELECT type, count(*) AS n, count(DISTINCT user_id) AS users,"
            " sum(length(page_url)) AS url_chars FROM {t} GROUP BY type ORDER BY type"
        ),
        "point": "SELECT message_id, ts, type, user_id FROM {t} WHERE message_id = "
        + f"'{sample_id}'",
        "one_day": (
            "SELECT event, count(*) AS n FROM {t} WHERE ts >= TIMESTAMP '2026-11-03'"
            " AND ts < TIMESTAMP '2026-11-04' GROUP BY event ORDER BY event NULLS FIRST"
        ),
    }


class System(Protocol):
    name: str

    def create(self, table: str) -> None: ...
    def append(self, table: str, data: pa.Table) -> None: ...
    def append_ndjson(self, table: str, path: Path) -> None: ...
    def compact(self, table: str) -> None: ...
    def query(self, table: str, sql: str) -> list[tuple[Any, ...]]: ...
    def files(self, table: str) -> int: ...
    def close(self) -> None: ...


class Icefloe:
    name = "icefloe"

    def __init__(self, root: Path, dsn: str, schema: str) -> None:
        import icefloe

        self.lake = icefloe.connect(
            home=root / "icefloe",
            warehouse=str(root / "icefloe" / "warehouse"),
            database_url=dsn,
            database_schema=schema,
            query_isolation="in_process",
        )

    def create(self, table: str) -> None:
        self.lake.create_table(table, schema=SCHEMA_SQL, partition_by="day(ts)", sort_by="type, ts")

    def append(self, table: str, data: pa.Table) -> None:
        self.lake.insert(table, data)

    def append_ndjson(self, table: str, path: Path) -> None:
        self.lake.insert(table, path)

    def compact(self, table: str) -> None:
        self.lake.merge(table)

    def query(self, table: str, sql: str) -> list[tuple[Any, ...]]:
        rows = self.lake.query(sql.format(t=table))
        return [tuple(r.values()) for r in rows.to_pylist()]

    def files(self, table: str) -> int:
        return len(self.lake.meta.files(table))

    def close(self) -> None:
        self.lake.close()


class DuckLake:
    def __init__(self, root: Path, *, catalog: str, dsn: str) -> None:
        self.name = f"ducklake_{catalog}"
        self.con = duck.connect()
        load_offline_extension(self.con, "ducklake")
        data = root / self.name
        data.mkdir()
        if catalog == "postgres":
            load_offline_extension(self.con, "postgres_scanner")
            schema = f"ducklake_{uuid.uuid4().hex[:8]}"
            with duckdb.connect() as setup:
                load_offline_extension(setup, "postgres_scanner")
                setup.execute(f"ATTACH '{dsn}' AS pg (TYPE postgres)")
                setup.execute(f"CALL postgres_execute('pg', 'CREATE SCHEMA {schema}')")
            target = f"ducklake:postgres:{dsn}"
            options = f"DATA_PATH '{data}/', METADATA_SCHEMA '{schema}'"
        else:
            target = f"ducklake:{root / 'ducklake.db'}"
            options = f"DATA_PATH '{data}/'"
        self.con.execute(f"ATTACH '{target}' AS lake ({options})")

    def create(self, table: str) -> None:
        self.con.execute(f"CREATE TABLE lake.{table} ({SCHEMA_SQL})")
        self.con.execute(
            f"ALTER TABLE lake.{table} SET PARTITIONED BY (year(ts), month(ts), day(ts))"
        )

    def append(self, table: str, data: pa.Table) -> None:
        self.con.register("incoming", data)
        self.con.execute(f"INSERT INTO lake.{table} SELECT * FROM incoming")
        self.con.unregister("incoming")

    def append_ndjson(self, table: str, path: Path) -> None:
        self.con.execute(
            f"INSERT INTO lake.{table} SELECT * FROM read_json('{path}',"
            f" format = 'newline_delimited', columns = {JSON_COLUMNS})"
        )

    def compact(self, table: str) -> None:
        self.con.execute(f"CALL ducklake_merge_adjacent_files('lake', '{table}')")

    def query(self, table: str, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql.format(t=f"lake.{table}")).fetchall()

    def files(self, table: str) -> int:
        found = self.con.execute(f"SELECT count(*) FROM ducklake_list_files('lake', '{table}')")
        return int(found.fetchone()[0])  # type: ignore[index]

    def close(self) -> None:
        self.con.close()


class Delta:
    name = "delta_rs"

    def __init__(self, root: Path) -> None:
        import deltalake  # noqa: F401

        self.root = root / "delta"
        self.root.mkdir()
        self.con = duck.connect()
        load_offline_extension(self.con, "delta")

    def create(self, table: str) -> None:
        pass

    def append(self, table: str, data: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.root / table, data, mode="append", partition_by=["day"])

    def append_ndjson(self, table: str, path: Path) -> None:
        self.append(table, with_day(read_ndjson(path)))

    def compact(self, table: str) -> None:
        from deltalake import DeltaTable

        DeltaTable(self.root / table).optimize.compact()

    def query(self, table: str, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql.format(t=f"delta_scan('{self.root / table}')")).fetchall()

    def files(self, table: str) -> int:
        from deltalake import DeltaTable

        return len(DeltaTable(self.root / table).file_uris())

    def close(self) -> None:
        self.con.close()


class Iceberg:
    name = "pyiceberg"

    def __init__(self, root: Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        warehouse = root / "iceberg"
        warehouse.mkdir()
        self.catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}"
        )
        self.catalog.create_namespace("bench")
        self.con = duck.connect()
        load_offline_extension(self.con, "avro")
        load_offline_extension(self.con, "iceberg")

    def create(self, table: str) -> None:
        from pyiceberg.transforms import DayTransform

        created = self.catalog.create_table(f"bench.{table}", schema=ARROW_SCHEMA)
        with created.update_spec() as update:
            update.add_field("ts", DayTransform(), "ts_day")

    def append(self, table: str, data: pa.Table) -> None:
        self.catalog.load_table(f"bench.{table}").append(data)

    def append_ndjson(self, table: str, path: Path) -> None:
        self.append(table, read_ndjson(path))

    def compact(self, table: str) -> None:
        raise NotImplementedError("pyiceberg 0.12 has no compaction")

    def query(self, table: str, sql: str) -> list[tuple[Any, ...]]:
        location = self.catalog.load_table(f"bench.{table}").metadata_location
        return self.con.execute(sql.format(t=f"iceberg_scan('{location}')")).fetchall()

    def files(self, table: str) -> int:
        return len(list(self.catalog.load_table(f"bench.{table}").scan().plan_files()))

    def close(self) -> None:
        self.con.close()


def read_ndjson(path: Path) -> pa.Table:
    """How a delta-rs or pyiceberg user reads NDJSON whose ``properties`` are objects:
    DuckDB's reader (pyarrow's cannot read an object into a string column), into Arrow."""
    with duck.connect() as con:
        rows = con.execute(
            f"SELECT * REPLACE (CAST(properties AS VARCHAR) AS properties) FROM read_json("
            f"'{path}', format = 'newline_delimited', columns = {JSON_COLUMNS})"
        ).to_arrow_table()
    return rows.cast(ARROW_SCHEMA)


def write_ndjson(data: pa.Table, path: Path) -> None:
    """The rows as NDJSON, ``properties`` as a nested object (as events arrive)."""
    with path.open("wb") as out:
        for row in data.to_pylist():
            row["ts"] = row["ts"].isoformat()
            row["properties"] = json.loads(row["properties"])
            out.write(json.dumps(row).encode() + b"\n")


def with_day(data: pa.Table) -> pa.Table:
    return data.append_column("day", pc.strftime(data["ts"], format="%Y-%m-%d"))


def open_systems(root: Path, dsn: str, schema: str) -> tuple[list[System], list[str]]:
    """Every system that can run here, and the names of the peers that are not installed."""
    makers: dict[str, Callable[[], System]] = {
        "icefloe": lambda: Icefloe(root, dsn, schema),
        "ducklake_duckdb": lambda: DuckLake(root, catalog="duckdb", dsn=dsn),
        "ducklake_postgres": lambda: DuckLake(root, catalog="postgres", dsn=dsn),
        "delta_rs": lambda: Delta(root),
        "pyiceberg": lambda: Iceberg(root),
    }
    systems, missing = [], []
    for name, make in makers.items():
        try:
            systems.append(make())
        except ImportError as exc:
            missing.append(f"{name}: {exc!r}")
    return systems, missing


def input_for(system: System, data: pa.Table) -> pa.Table:
    return with_day(data) if system.name == "delta_rs" else data


def w1_batches(scale: dict[str, int]) -> list[pa.Table]:
    """W1's commits, in order."""
    stream = events(scale["w1_commits"] * scale["w1_rows"], seed=1)
    return [
        stream.slice(n * scale["w1_rows"], scale["w1_rows"]) for n in range(scale["w1_commits"])
    ]


def w1(systems: list[System], scale: dict[str, int]) -> dict[str, Any]:
    """Small commits, the systems in rotation commit by commit."""
    batches = w1_batches(scale)
    inputs = {s.name: [input_for(s, b) for b in batches] for s in systems}
    samples: dict[str, list[float]] = {s.name: [] for s in systems}
    for system in systems:
        system.create("w1")
    for n in range(scale["w1_commits"]):
        for system in systems[n % len(systems) :] + systems[: n % len(systems)]:
            started = time.perf_counter()
            system.append("w1", inputs[system.name][n])
            samples[system.name].append(time.perf_counter() - started)
    rows = scale["w1_commits"] * scale["w1_rows"]
    return {
        name: {
            "rows_per_s": round(rows / sum(times)),
            "commit_p50_ms": round(statistics.median(times) * 1000, 2),
            "commit_p90_ms": round(statistics.quantiles(times, n=10)[-1] * 1000, 2),
        }
        for name, times in samples.items()
    }


def w2(
    systems: list[System], scale: dict[str, int], *, ndjson: Path | None = None
) -> dict[str, Any]:
    """One big commit from Arrow, or with ``ndjson`` from that file of the same rows."""
    data = events(scale["w2_rows"], seed=2)
    inputs = {s.name: input_for(s, data) for s in systems}
    if ndjson is not None:
        write_ndjson(data, ndjson)
    samples: dict[str, list[float]] = {s.name: [] for s in systems}
    for attempt in range(scale["w2_repeat"]):
        for system in systems:
            table = f"w2_{'ndjson' if ndjson else 'arrow'}_{attempt}"
            system.create(table)
            started = time.perf_counter()
            if ndjson is None:
                system.append(table, inputs[system.name])
            else:
                system.append_ndjson(table, ndjson)
            samples[system.name].append(time.perf_counter() - started)
            if attempt == 0:
                rows = system.query(table, "SELECT count(*) FROM {t}")
                if rows != [(scale["w2_rows"],)]:
                    raise AssertionError(f"{system.name} holds {rows} rows after W2")
    return {
        name: {
            "median_s": round(statistics.median(times), 3),
            "rows_per_s": round(scale["w2_rows"] / statistics.median(times)),
        }
        for name, times in samples.items()
    }


def ask(systems: list[System], sqls: dict[str, str], repeat: int) -> dict[str, Any]:
    """Each query on each system: answers checked equal, then the median of ``repeat`` rounds
    in rotation after one warm-up round."""
    answers = {kind: {s.name: s.query("w1", sql) for s in systems} for kind, sql in sqls.items()}
    for kind, by_system in answers.items():
        first = next(iter(by_system.values()))
        for name, rows in by_system.items():
            if rows != first:
                raise AssertionError(f"{kind}: {name} answered {rows[:3]} ... not {first[:3]}")
    samples: dict[str, dict[str, list[float]]] = {k: {s.name: [] for s in systems} for k in sqls}
    for n in range(repeat):
        for system in systems[n % len(systems) :] + systems[: n % len(systems)]:
            for kind, sql in sqls.items():
                started = time.perf_counter()
                system.query("w1", sql)
                samples[kind][system.name].append(time.perf_counter() - started)
    return {
        kind: {name: round(statistics.median(t) * 1000, 2) for name, t in by_name.items()}
        for kind, by_name in samples.items()
    }


def w3(systems: list[System], scale: dict[str, int]) -> dict[str, Any]:
    """Compaction of W1's table, then of ``w3_repeat - 1`` fresh copies loaded as W1 loads
    (untimed), the systems in rotation: the median time of each system that compacts."""
    batches = w1_batches(scale)
    samples: dict[str, list[float]] = {}
    out: dict[str, Any] = {}
    for attempt in range(scale["w3_repeat"]):
        table = "w1" if attempt == 0 else f"w3_{attempt}"
        turn = systems[attempt % len(systems) :] + systems[: attempt % len(systems)]
        for system in turn:
            if attempt and system.name not in samples:
                continue  # it does not compact
            if attempt:
                system.create(table)
                for batch in batches:
                    system.append(table, input_for(system, batch))
            before = system.files(table)
            started = time.perf_counter()
            try:
                system.compact(table)
            except NotImplementedError as exc:
                out[system.name] = {"skipped": str(exc), "files": before}
                continue
            samples.setdefault(system.name, []).append(time.perf_counter() - started)
            out[system.name] = {"files_before": before, "files_after": system.files(table)}
    for name, times in samples.items():
        out[name] = {
            "seconds": round(statistics.median(times), 3),
            "runs_s": [round(t, 3) for t in times],
            **out[name],
        }
    return out


def ratios(result: dict[str, Any]) -> dict[str, Any]:
    """icefloe against the best peer of each phase (above 1: icefloe is faster); phases no
    peer ran are left out."""
    out: dict[str, Any] = {}

    def compare(phase: str, values: dict[str, float], *, higher: bool) -> None:
        peers = {k: v for k, v in values.items() if k != "icefloe"}
        if not peers:
            return
        name = (max if higher else min)(peers, key=peers.__getitem__)
        ratio = values["icefloe"] / peers[name] if higher else peers[name] / values["icefloe"]
        out[phase] = {"best_peer": name, "icefloe_vs_peer": round(ratio, 2)}

    for phase in ("w1", "w2", "w2_ndjson"):
        compare(phase, {k: v["rows_per_s"] for k, v in result[phase].items()}, higher=True)
    merged = {k: v["seconds"] for k, v in result["w3"].items() if "seconds" in v}
    compare("w3", merged, higher=False)
    for stage in ("queries_before_compaction", "queries_after_compaction"):
        for kind, times in result[stage].items():
            compare(f"{stage}.{kind}", times, higher=False)
    return out


def bench(dsn: str, schema: str, scale: dict[str, int], root: Path) -> dict[str, Any]:
    """Every phase on every system installed (icefloe in ``schema``)."""
    systems, missing = open_systems(root, dsn, schema)
    try:
        result: dict[str, Any] = {**scale, "not_installed": missing}
        result["w1"] = w1(systems, scale)
        w1_rows = scale["w1_commits"] * scale["w1_rows"]
        sample_id = str(events(w1_rows, seed=1)["message_id"][w1_rows // 2])
        sqls = queries(sample_id)
        result["queries_before_compaction"] = ask(systems, sqls, scale["repeat"])
        result["w3"] = w3(systems, scale)
        result["queries_after_compaction"] = ask(systems, sqls, scale["repeat"])
        result["w2"] = w2(systems, scale)
        result["w2_ndjson"] = w2(systems, scale, ndjson=root / "w2.ndjson")
    finally:
        for system in systems:
            system.close()
    result["icefloe_vs_best_peer"] = ratios(result)
    print(json.dumps(result["icefloe_vs_best_peer"], indent=1), flush=True)
    return result


def main() -> None:
    run_scaled("peers_bench", __doc__, SCALES, bench)


if __name__ == "__main__":
    main()
