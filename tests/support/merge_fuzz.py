"""Random tables and batches for the differential merge test, and its oracle.

A case is a table spec drawn at random (partitioned by day, by an identity column, by both, or
not at all; merged by ``append``, ``replace`` on one or two keys with or without a version, or
``aggregate`` with a random function per value column over INTEGER, BIGINT, DOUBLE and DECIMAL
columns) and a few batches for it: small key domains (so keys repeat across batches), NULLs in
keys, versions and values, versions that tie, and in some tables values near their type's
limits, so that sums leave the type (and sometimes come back).

The oracle applies docs/usage.md's rules ("Merging") to rows read back from the table's files
with their ``_row_id``, in plain DuckDB SQL per partition; sums are finished in Python, exactly
(``int`` and ``Decimal``), and checked against the column's type there.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal, localcontext
from typing import Literal

import duckdb
import pyarrow as pa

from icefloe.duck import ident
from icefloe.metastore.models import DataFile
from icefloe.spec import SizeTargets, TableSpec
from icefloe.storage import ObjectStore

START = datetime(2026, 5, 1)
ROW_ID = "_row_id"
PART = "__part"
FILE = "__file"
Kind = Literal["append", "replace", "aggregate"]
# A DOUBLE sum is kept while its magnitudes add up below this (docs/decisions.md).
DOUBLE_SUM_LIMIT = Decimal(2) ** 1023
# Digits of every Decimal computation here: exact for sums of DECIMAL(38) values, and for
# doubles (a double's exact decimal expansion has at most 767 significant digits).
EXACT_DIGITS = 2000
VALUE_TYPES = (
    "INTEGER",
    "BIGINT",
    "DOUBLE",
    "DECIMAL(9,2)",
    "DECIMAL(18,4)",
    "DECIMAL(20,4)",
    "DECIMAL(38,0)",
    "DECIMAL(38,10)",
)
KEY_TYPES = ("VARCHAR", "INTEGER", "BIGINT", "DECIMAL(9,2)", "DATE")
VERSION_TYPES = ("INTEGER", "BIGINT", "DOUBLE", "DECIMAL(18,4)", "TIMESTAMP", "VARCHAR")
INTEGER_RANGES = {"INTEGER": 31, "BIGINT": 63}


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    not_null: bool = False

    @property
    def ddl(self) -> str:
        return f"{self.name} {self.type}{' NOT NULL' if self.not_null else ''}"


@dataclass
class Case:
    """One random table and the batches inserted into it, one commit each."""

    name: str
    columns: list[Column]
    partition_by: str
    kind: Kind
    keys: tuple[str, ...] = ()
    version: str | None = None
    functions: dict[str, str] = field(default_factory=dict)  # aggregate: column -> function
    sort_by: str = ""
    row_group_by: str | None = None
    sizes: SizeTargets = field(default_factory=SizeTargets)
    extreme: bool = False
    batches: list[list[dict[str, object]]] = field(default_factory=list)
    # merge_locally once before the last batch (which gives every partition one more file:
    # compaction takes partitions of two files or more)
    merge_between: bool = False

    @property
    def merge_text(self) -> str:
        if self.kind == "append":
            return "append"
        if self.kind == "replace":
            version = f"; version={self.version}" if self.version else ""
            return f"replace({', '.join(self.keys)}{version})"
        items = ", ".join(f"{c}:{f}" for c, f in self.functions.items())
        return f"aggregate({', '.join(self.keys)}; {items})"

    def spec(self) -> TableSpec:
        return TableSpec.create(
            name=self.name,
            schema=", ".join(c.ddl for c in self.columns),
            partition_by=self.partition_by,
            sort_by=self.sort_by,
            row_group_by=self.row_group_by,
            merge=self.merge_text,
            sizes=self.sizes,
        )

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def describe(self) -> str:
        return (
            f"{self.name}: ({', '.join(c.ddl for c in self.columns)})"
            f" partition_by={self.partition_by!r} merge={self.merge_text!r}"
            f" sort_by={self.sort_by!r} row_group_by={self.row_group_by!r}"
            f" extreme={self.extreme} merge_between={self.merge_between}"
            f" batches={[len(b) for b in self.batches]}"
        )

    def arrow(self, rows: Sequence[Mapping[str, object]]) -> pa.Table:
        """``rows`` as an Arrow table of the columns' exact types."""
        return pa.table(
            {
                c.name: pa.array([r[c.name] for r in rows], type=arrow_type(c.type))
                for c in self.columns
            }
        )


def arrow_type(column_type: str) -> pa.DataType:
    if column_type.startswith("DECIMAL"):
        precision, scale = _decimal(column_type)
        return pa.decimal128(precision, scale)
    return {
        "INTEGER": pa.int32(),
        "BIGINT": pa.int64(),
        "DOUBLE": pa.float64(),
        "VARCHAR": pa.string(),
        "DATE": pa.date32(),
        "TIMESTAMP": pa.timestamp("us"),
    }[column_type]


def _decimal(column_type: str) -> tuple[int, int]:
    precision, scale = column_type[len("DECIMAL(") : -1].split(",")
    return int(precision), int(scale)


def decimal_max(column_type: str) -> Decimal:
    precision, scale = _decimal(column_type)
    with localcontext(prec=EXACT_DIGITS):
        return Decimal(10**precision - 1).scaleb(-scale)


def fits(column_type: str, value: object) -> bool:
    """Whether an exact sum is a value of ``column_type``."""
    if value is None:
        return True
    if column_type in INTEGER_RANGES:
        bits = INTEGER_RANGES[column_type]
        assert isinstance(value, int)
        return bool(-(2**bits) <= value < 2**bits)
    assert isinstance(value, Decimal)
    return bool(abs(value) <= decimal_max(column_type))


# --- generation -------------------------------------------------------------------------


def random_case(rng: random.Random, name: str, *, extra_rows: int = 12) -> Case:
    """A random table spec, its batches (each a row per partition and up to ``extra_rows``
    more) and whether a merge runs between them."""
    kind: Kind = rng.choice(("append", "replace", "replace", "aggregate", "aggregate", "aggregate"))
    partitioning = rng.choice(("day", "region", "both", "none", "day", "both"))
    partition_by = {"day": "day(ts)", "region": "region", "both": "day(ts), region", "none": ""}[
        partitioning
    ]
    columns = [Column("ts", "TIMESTAMP", not_null=True), Column("region", "VARCHAR")]
    columns.append(Column("k1", rng.choice(KEY_TYPES)))
    two_keys = rng.random() < 0.5
    if two_keys:
        columns.append(Column("k2", rng.choice(KEY_TYPES)))
    case = Case(name=name, columns=columns, partition_by=partition_by, kind=kind)
    case.extreme = rng.random() < 0.5
    if kind == "replace":
        case.keys = tuple(rng.sample(["k1", "k2"] if two_keys else ["k1"], 2 if two_keys else 1))
        if rng.random() < 0.25:  # a partition source in the key now and then
            case.keys = (*case.keys, rng.choice(("region", "ts")))
        if rng.random() < 0.7:
            columns.append(Column("ver", rng.choice(VERSION_TYPES)))
            case.version = "ver"
    values = [Column(f"v{i}", rng.choice(VALUE_TYPES)) for i in range(rng.randint(1, 4))]
    columns.extend(values)
    if kind == "aggregate":
        keys = ["k1", "k2"] if two_keys else ["k1"]
        for source in ("ts", "region"):
            # A partition source is a group key or min/max/any; ts as a key has few values.
            if rng.random() < 0.5:
                keys.append(source)
            else:
                case.functions[source] = rng.choice(("min", "max", "any"))
        rng.shuffle(keys)
        case.keys = tuple(keys)
        for value in values:
            choices = ["sum", "sum", "min", "max", "any"]
            if value.type in INTEGER_RANGES:
                choices += ["count", "count"]
            case.functions[value.name] = rng.choice(choices)
        if rng.random() < 0.3:
            # Sorted by a column that is no key: a group's rows lie apart in the sort order
            others = [c.name for c in columns if c.name not in case.keys]
            case.sort_by = rng.choice(others)
    else:
        case.sort_by = rng.choice(("", "k1", "v0", "ts"))
    if rng.random() < 0.4:
        case.row_group_by = rng.choice(("k1", "v0", "region"))
    if rng.random() < 0.4:
        # Small files and row groups: the merge's output is several files of several groups
        case.sizes = SizeTargets(
            target_file_bytes=rng.choice((2048, 8192)),
            row_group_target_bytes=1024,
            row_group_max_rows=rng.choice((2, 5, 50)),
            min_files_to_merge=2,
        )
    else:
        case.sizes = SizeTargets(min_files_to_merge=2)
    days = rng.randint(1, 3) if partitioning in ("day", "both") else rng.randint(1, 2)
    regions: list[str | None] = ["n", "s", None][: rng.randint(1, 3)]
    domain = rng.randint(2, 5) + extra_rows // 25  # distinct values per key column
    for _ in range(rng.randint(2, 5)):
        rows = [
            _row(rng, case, day=d, region=r, domain=domain)
            for d in range(days)
            for r in regions  # every partition in every batch: each has a file per commit
        ]
        rows += [
            _row(rng, case, day=rng.randrange(days), region=rng.choice(regions), domain=domain)
            for _ in range(rng.randint(0, extra_rows))
        ]
        rng.shuffle(rows)
        case.batches.append(rows)
    case.merge_between = len(case.batches) > 2 and rng.random() < 0.5
    return case


def _row(
    rng: random.Random, case: Case, *, day: int, region: str | None, domain: int
) -> dict[str, object]:
    row: dict[str, object] = {}
    hours = (0, 7, 13) if "ts" in case.keys else range(24)
    row["ts"] = START + timedelta(
        days=day, hours=rng.choice(hours), seconds=0 if "ts" in case.keys else rng.randrange(3600)
    )
    row["region"] = region
    for column in case.columns:
        if column.name in ("ts", "region"):
            continue
        if column.name.startswith("k"):
            row[column.name] = _key(rng, column.type, domain)
        elif column.name == "ver":
            row[column.name] = _version(rng, column.type)
        else:
            function = case.functions.get(column.name)
            row[column.name] = _value(
                rng, column.type, extreme=case.extreme, count=function == "count"
            )
    return row


def _key(rng: random.Random, column_type: str, domain: int) -> object:
    if rng.random() < 0.1:
        return None
    n = rng.randrange(domain)
    if column_type == "VARCHAR":
        return "abcdefg"[n % 7] * (1 + n // 7) if n else ""
    if column_type == "DATE":
        return date(2026, 1, 1) + timedelta(days=n)
    if column_type.startswith("DECIMAL"):
        return Decimal(n * 25 - 50) / 100
    return n - domain // 2


def _version(rng: random.Random, column_type: str) -> object:
    """Few values, so versions tie; NULL now and then (NULL sorts last)."""
    if rng.random() < 0.15:
        return None
    n = rng.randrange(4)
    if column_type == "TIMESTAMP":
        return START + timedelta(minutes=n)
    if column_type == "VARCHAR":
        return ("", "a", "b", "ba")[n]
    if column_type == "DOUBLE":
        return rng.choice((-0.0, 0.0)) if n == 0 else n / 2
    if column_type.startswith("DECIMAL"):
        return Decimal(n).scaleb(-1)
    return n - 1


def _value(rng: random.Random, column_type: str, *, extreme: bool, count: bool) -> object:
    if rng.random() < 0.15:
        return None
    big = extreme and rng.random() < 0.35
    if column_type in INTEGER_RANGES:
        top = 2 ** INTEGER_RANGES[column_type]
        if big:
            return rng.choice(
                (
                    top - 1,
                    top - 1 - rng.randrange(4),
                    top // 2 + rng.randrange(10),
                    top // 3,
                    *(() if count else (-top, -top + rng.randrange(4), -(top // 2))),
                )
            )
        return rng.randint(0, 20) if count else rng.randint(-30, 30)
    if column_type == "DOUBLE":
        if big:
            return rng.choice((1.7976931348623157e308, 1e308, 5e307, 3e307, 1e300)) * rng.choice(
                (1, -1)
            )
        return rng.choice((-0.0, 0.0)) if rng.random() < 0.05 else rng.randint(-400, 400) / 8
    _, scale = _decimal(column_type)
    top = decimal_max(column_type)
    if big:
        with localcontext(prec=EXACT_DIGITS):
            value = rng.choice((top, top, top / 2, top / 3, top - 1))
            return (value * rng.choice((1, -1))).quantize(Decimal(1).scaleb(-scale))
    return Decimal(rng.randint(-3000, 3000)).scaleb(-min(scale, 2))


# --- reading -----------------------------------------------------------------------------


def create_rows_table(con: duckdb.DuckDBPyConnection, case: Case, table: str) -> None:
    """An empty ``table`` for :func:`load_files`."""
    columns = ", ".join(f"{ident(c.name)} {c.type}" for c in case.columns)
    con.execute(
        f"CREATE OR REPLACE TABLE {table} ({columns}, {ROW_ID} BLOB, {PART} VARCHAR, {FILE} BIGINT)"
    )


def load_files(
    con: duckdb.DuckDBPyConnection,
    objects: ObjectStore,
    case: Case,
    files: Sequence[DataFile],
    table: str,
) -> list[str]:
    """Add every row of ``files`` to ``table`` (see :func:`create_rows_table`): the table's
    columns, its row id, the file's partition path and id. Returns how the meta store's row
    counts of the files differ from the rows read."""
    names = ", ".join(ident(c.name) for c in case.columns)
    problems = []
    for f in files:
        con.execute(
            f"INSERT INTO {table} SELECT {names}, {ROW_ID}, ?, ? FROM read_parquet(?)",
            [f.partition_path, f.file_id, objects.uri(f.path)],
        )
        row = con.execute(f"SELECT count(*) FROM {table} WHERE {FILE} = ?", [f.file_id]).fetchone()
        read = int(row[0]) if row else 0
        if read != f.row_count:
            problems.append(
                f"file {f.file_id} ({f.partition_path}): the meta store counts {f.row_count}"
                f" rows, {read} read"
            )
    return problems


def rows_by_id(con: duckdb.DuckDBPyConnection, case: Case, table: str) -> list[dict[str, object]]:
    """Every row of ``table`` (see :func:`load_files`) as a dict with its partition path."""
    names = ", ".join([*(ident(c.name) for c in case.columns), ROW_ID, PART])
    return list(con.execute(f"SELECT {names} FROM {table}").to_arrow_table().to_pylist())


# --- the oracle -------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """What one output row must hold: exact values, candidate sets for ``any`` columns, and
    DOUBLE sums with the tolerance their rounding needs."""

    values: dict[str, object]
    candidates: dict[str, list[object]] = field(default_factory=dict)
    approximate: dict[str, tuple[Decimal, Decimal]] = field(default_factory=dict)  # sum, |sum|
    kept_whole: bool = False  # a row of an aggregate group whose sum did not fit


def oracle(con: duckdb.DuckDBPyConnection, case: Case, table: str) -> dict[bytes, Expected]:
    """The rows a whole-partition merge of ``table`` must leave, by row id."""
    if case.kind == "append":
        return _as_they_are(rows_by_id(con, case, table))
    if case.kind == "replace":
        return _replace_oracle(con, case, table)
    return _aggregate_oracle(con, case, table)


def _as_they_are(rows: Sequence[dict[str, object]]) -> dict[bytes, Expected]:
    found = {}
    for row in rows:
        row_id = row[ROW_ID]
        assert isinstance(row_id, bytes)
        found[row_id] = Expected(row)
    return found


def _replace_oracle(
    con: duckdb.DuckDBPyConnection, case: Case, table: str
) -> dict[bytes, Expected]:
    """Keep a row unless a row of its partition with the same (non-NULL) key is better: a
    higher version (a non-NULL one beats NULL), or the same version and a higher row id."""
    same_key = " AND ".join(f"s.{ident(k)} = r.{ident(k)}" for k in case.keys)
    unkeyed = " OR ".join(f"r.{ident(k)} IS NULL" for k in case.keys)
    later = f"s.{ROW_ID} > r.{ROW_ID}"
    if case.version is None:
        better = later
    else:
        v = ident(case.version)
        better = (
            f"(s.{v} IS NOT NULL AND (r.{v} IS NULL OR s.{v} > r.{v}))"
            f" OR ((s.{v} = r.{v} OR (s.{v} IS NULL AND r.{v} IS NULL)) AND {later})"
        )
    names = ", ".join([*(f"r.{ident(c.name)}" for c in case.columns), f"r.{ROW_ID}", f"r.{PART}"])
    kept = con.execute(
        f"SELECT {names} FROM {table} r WHERE ({unkeyed}) OR NOT EXISTS ("
        f"SELECT 1 FROM {table} s WHERE s.{PART} = r.{PART} AND {same_key} AND ({better}))"
    ).to_arrow_table()
    return _as_they_are(kept.to_pylist())


def _aggregate_oracle(
    con: duckdb.DuckDBPyConnection, case: Case, table: str
) -> dict[bytes, Expected]:
    """One row per (partition, group keys NULL-equal): sums and counts added up, min, max, any
    one of the group's values, the highest row id; the group's rows as they are when a sum or
    count does not fit its column (a DOUBLE: when its magnitudes reach 2^1023)."""
    with localcontext(prec=EXACT_DIGITS):
        return _aggregate_groups(con, case, table)


def _aggregate_groups(
    con: duckdb.DuckDBPyConnection, case: Case, table: str
) -> dict[bytes, Expected]:
    keys = [ident(k) for k in case.keys]
    lists = ", ".join(f"list({ident(c)} ORDER BY {ROW_ID}) AS {ident(c)}" for c in case.functions)
    groups = con.execute(
        f"SELECT {PART}, {', '.join(keys)}, {lists}, list({ROW_ID} ORDER BY {ROW_ID}) AS __ids"
        f" FROM {table} GROUP BY {PART}, {', '.join(keys)}"
    ).to_arrow_table()
    rows = rows_by_id(con, case, table)
    by_id = {r[ROW_ID]: r for r in rows}
    expected: dict[bytes, Expected] = {}
    for group in groups.to_pylist():
        values: dict[str, object] = {k: group[k] for k in case.keys}
        values[PART] = group[PART]
        candidates: dict[str, list[object]] = {}
        approximate: dict[str, tuple[Decimal, Decimal]] = {}
        unfit = False
        for name, function in case.functions.items():
            column_type = case.column(name).type
            present = [v for v in group[name] if v is not None]
            if function == "any":
                candidates[name] = list(group[name])
            elif function == "min":
                values[name] = min(present) if present else None
            elif function == "max":
                values[name] = max(present) if present else None
            elif column_type == "DOUBLE":
                total = sum((Decimal(v) for v in present), Decimal(0))
                magnitude = sum((abs(Decimal(v)) for v in present), Decimal(0))
                unfit = unfit or magnitude >= DOUBLE_SUM_LIMIT
                if present:
                    approximate[name] = (total, magnitude)
                else:
                    values[name] = None
            else:
                exact: object = (
                    sum(present, Decimal(0) if column_type.startswith("DECIMAL") else 0)
                    if present
                    else None
                )
                unfit = unfit or not fits(column_type, exact)
                values[name] = exact
        if unfit:
            for row_id in group["__ids"]:
                expected[row_id] = Expected(by_id[row_id], kept_whole=True)
        else:
            row_id = max(group["__ids"])
            values[ROW_ID] = row_id
            expected[row_id] = Expected(values, candidates, approximate)
    return expected


def differences(want: Mapping[bytes, Expected], got: Sequence[Mapping[str, object]]) -> list[str]:
    """Every way ``got`` (the merged table's rows) differs from ``want``."""
    problems: list[str] = []
    by_id: dict[bytes, Mapping[str, object]] = {}
    for row in got:
        row_id = row[ROW_ID]
        assert isinstance(row_id, bytes)
        if row_id in by_id:
            problems.append(f"row id {row_id.hex()} twice: {dict(row)} and {dict(by_id[row_id])}")
        by_id[row_id] = row
    for row_id in sorted(set(want) - set(by_id)):
        problems.append(f"missing {row_id.hex()}: {want[row_id].values}")
    for row_id in sorted(set(by_id) - set(want)):
        problems.append(f"unexpected {row_id.hex()}: {dict(by_id[row_id])}")
    with localcontext(prec=EXACT_DIGITS):
        for row_id in sorted(set(want) & set(by_id)):
            problems += _row_differences(want[row_id], by_id[row_id])
    return problems


def _row_differences(expected: Expected, row: Mapping[str, object]) -> list[str]:
    bad = []
    for name, value in expected.values.items():
        if not _same(row[name], value):
            bad.append(f"{name}={row[name]!r}, want {value!r}")
    for name, options in expected.candidates.items():
        if not any(_same(row[name], o) for o in options):
            bad.append(f"{name}={row[name]!r}, want one of {options!r}")
    for name, (total, magnitude) in expected.approximate.items():
        value = row[name]
        tolerance = magnitude * Decimal("1e-12") + Decimal("1e-9")
        if not isinstance(value, float) or abs(Decimal(value) - total) > tolerance:
            bad.append(f"{name}={value!r}, want about {float(total)!r}")
    row_id = row[ROW_ID]
    assert isinstance(row_id, bytes)
    return [f"row {row_id.hex()} ({row.get(PART)}): {'; '.join(bad)}"] if bad else []


def _same(got: object, want: object) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return type(got) is type(want) and got == want


# --- the totals any number of merges keeps ----------------------------------------------


@dataclass(frozen=True)
class Rollup:
    """An aggregate table's group re-aggregated: what merging its rows in any way keeps."""

    exact: dict[str, object]  # min, max, integer and DECIMAL sums, the highest row id
    doubles: dict[str, tuple[Decimal, Decimal]]  # DOUBLE sums: exact total, magnitudes
    anys: dict[str, list[object]]  # every value of an ``any`` column


def rollups(
    con: duckdb.DuckDBPyConnection, case: Case, table: str
) -> dict[tuple[object, ...], Rollup]:
    """Each (partition, group) of ``table`` re-aggregated exactly."""
    keys = [ident(k) for k in case.keys]
    lists = ", ".join(f"list({ident(c)}) AS {ident(c)}" for c in case.functions)
    groups = con.execute(
        f"SELECT {PART}, {', '.join(keys)}, {lists}, max({ROW_ID}) AS __id"
        f" FROM {table} GROUP BY ALL"
    ).to_arrow_table()
    found: dict[tuple[object, ...], Rollup] = {}
    with localcontext(prec=EXACT_DIGITS):
        for group in groups.to_pylist():
            rollup = Rollup({ROW_ID: group["__id"]}, {}, {})
            for name, function in case.functions.items():
                present = [v for v in group[name] if v is not None]
                if function == "any":
                    rollup.anys[name] = group[name]
                elif function == "min":
                    rollup.exact[name] = min(present) if present else None
                elif function == "max":
                    rollup.exact[name] = max(present) if present else None
                elif present and case.column(name).type == "DOUBLE":
                    rollup.doubles[name] = (
                        sum((Decimal(v) for v in present), Decimal(0)),
                        sum((abs(Decimal(v)) for v in present), Decimal(0)),
                    )
                else:
                    rollup.exact[name] = sum(present) if present else None
            found[(group[PART], *(group[k] for k in case.keys))] = rollup
    return found


def rollup_differences(
    want: Mapping[tuple[object, ...], Rollup], got: Mapping[tuple[object, ...], Rollup]
) -> list[str]:
    """How the merged table's groups re-aggregate differently from the inserted rows'.
    A DOUBLE sum may differ by rounding: within a millionth of the inserted magnitudes."""
    problems = [f"group {g!r} lost" for g in want if g not in got]
    problems += [f"group {g!r} appeared" for g in got if g not in want]
    with localcontext(prec=EXACT_DIGITS):
        for group in want.keys() & got.keys():
            w, g = want[group], got[group]
            bad = [
                f"{n}={g.exact.get(n)!r}, want {v!r}"
                for n, v in w.exact.items()
                if not _same(g.exact.get(n), v)
            ]
            for name, (total, magnitude) in w.doubles.items():
                value = g.doubles.get(name, (None, None))[0]
                if value is None or abs(value - total) > magnitude * Decimal("1e-6") + 1:
                    bad.append(f"{name} sums to {value}, want about {total}")
            for name, values in g.anys.items():
                strays = [v for v in values if not any(_same(v, o) for o in w.anys[name])]
                if strays:
                    bad.append(f"{name} holds {strays!r}, none of the inserted {w.anys[name]!r}")
            if bad:
                problems.append(f"group {group!r}: {'; '.join(bad)}")
    return problems
