"""The meta store's file pruning on struct leaves: conditions on dotted paths
(``ctx.page.url``) over files whose statistics are those icefloe keeps of real Parquet
footers of a STRUCT column (``footer_stats`` of the spec's tracked leaves), some files without
statistics for a leaf. A file holding a row that passes a scan's
filters is always listed; a file is skipped exactly when its leaf statistics prove no row
passes; leaves under a list, of a non-orderable type, or without statistics never skip one.

The catalog does not yet take nested tables: the files are committed to a flat table and the
conditions are made from a nested spec of the same name (pruning reads only its types), so
what runs is the same SQL over the same stored rows."""

from __future__ import annotations

import io
import random
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.datafiles import footer_stats
from icefloe.metastore.models import ColumnStats, NewFile
from icefloe.metastore.store import MetaStore
from icefloe.query.pruning import file_condition, stats_type
from icefloe.query.scan_filters import (
    AllOf,
    AnyOf,
    Compare,
    CompareOp,
    InList,
    IsNotNull,
    IsNull,
    ScanFilter,
    TableScans,
    float_key,
)
from icefloe.spec import TableSpec
from support.scan_filter_semantics import passes

SEED = 20261128
FILES = 90
CONDITIONS = 500
NAME = "nested_stats"
CTX = (
    "STRUCT(ip VARCHAR, page STRUCT(url VARCHAR, n INTEGER), d DATE, amount DECIMAL(9,2),"
    " score DOUBLE, ok BOOLEAN, j JSON)"
)
NESTED = TableSpec.create(
    name=NAME,
    schema=f"ts TIMESTAMP NOT NULL, ctx {CTX}, tags STRUCT(k VARCHAR)[]",
    partition_by="day(ts)",
)
FLAT = TableSpec.create(
    name=NAME, schema="ts TIMESTAMP NOT NULL, v INTEGER", partition_by="day(ts)"
)
EPOCH_DATE = date(1970, 1, 1)
ARROW_CTX = pa.struct(
    [
        ("ip", pa.string()),
        ("page", pa.struct([("url", pa.string()), ("n", pa.int32())])),
        ("d", pa.date32()),
        ("amount", pa.decimal128(9, 2)),
        ("score", pa.float64()),
        ("ok", pa.bool_()),
        ("j", pa.string()),
    ]
)


@dataclass(frozen=True)
class Leaf:
    path: str
    # A random value in the comparison domain, and that value as pyarrow takes it.
    draw: Any
    to_python: Any


LEAVES = [
    Leaf(
        "ctx.ip",
        lambda r: r.choice(["", "10.0.0.1", "10.0.0.2", "a", "é", "z"]),
        lambda v: v,
    ),
    Leaf("ctx.page.url", lambda r: r.choice(["/", "/a", "/a/b", "/b", "/p1", "/p10"]), lambda v: v),
    Leaf("ctx.page.n", lambda r: r.randint(-20, 20), lambda v: v),
    Leaf("ctx.d", lambda r: 20_400 + r.randint(0, 30), lambda v: EPOCH_DATE + timedelta(days=v)),
    Leaf("ctx.amount", lambda r: Decimal(r.randint(-500, 500)).scaleb(-2), lambda v: v),
    Leaf("ctx.score", lambda r: float_key(r.uniform(-4, 4)), lambda v: v[1]),
    Leaf("ctx.ok", lambda r: r.random() < 0.5, lambda v: v),
]
BY_PATH = {leaf.path: leaf for leaf in LEAVES}


def _row(rng: random.Random, pools: Mapping[str, list[Any]], shape: str) -> dict[str, Any] | None:
    """One row's ctx, in domain values: a NULL struct, a NULL page, NULL leaves, or values."""
    if shape == "null" or (shape == "mixed" and rng.random() < 0.2):
        return None

    def value(path: str) -> Any:
        return None if rng.random() < 0.15 else rng.choice(pools[path])

    page = None if rng.random() < 0.15 else {"url": value("ctx.page.url"), "n": value("ctx.page.n")}
    return {
        "ip": value("ctx.ip"),
        "page": page,
        "d": value("ctx.d"),
        "amount": value("ctx.amount"),
        "score": value("ctx.score"),
        "ok": value("ctx.ok"),
        "j": None if rng.random() < 0.5 else '{"x": 1}',
    }


def leaf_value(ctx: Mapping[str, Any] | None, path: str) -> Any:
    value: Any = ctx
    for name in path.split(".")[1:]:
        value = None if value is None else value[name]
    return value


def _python(ctx: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if ctx is None:
        return None
    out = {k: v for k, v in ctx.items() if k != "page"}
    for name in ("ip", "d", "amount", "score", "ok"):
        v = ctx[name]
        out[name] = None if v is None else BY_PATH[f"ctx.{name}"].to_python(v)
    out["page"] = ctx["page"]
    return out


@dataclass
class StoredFile:
    path: str
    rows: list[dict[str, Any] | None]
    stats: dict[str, ColumnStats]


def _files(rng: random.Random) -> list[StoredFile]:
    files = []
    for i in range(FILES):
        pools = {leaf.path: [leaf.draw(rng) for _ in range(rng.randint(1, 3))] for leaf in LEAVES}
        shape = rng.choice(["mixed", "mixed", "mixed", "null"])
        rows = [_row(rng, pools, shape) for _ in range(rng.randint(1, 10))]
        buffer = io.BytesIO()
        table = pa.table({"ctx": pa.array([_python(r) for r in rows], type=ARROW_CTX)})
        pq.write_table(table, buffer, row_group_size=4)
        metadata = pq.read_metadata(pa.BufferReader(buffer.getvalue()))
        # The statistics a data file's record keeps (its footer's, for the tracked leaves)...
        footer = footer_stats(metadata, leaves=NESTED.stats_leaves)
        assert footer.keys() == BY_PATH.keys()
        # ...but some files keep none of a leaf (written before it was tracked, or beyond the
        # table's cap): they prove nothing about it.
        stats = {path: s for path, s in footer.items() if rng.random() < 0.85}
        # Statistics no condition may use: a JSON leaf, and a leaf under a list.
        stats["ctx.j"] = ColumnStats(min="{", max="{", null_count=0)
        stats["tags.k"] = ColumnStats(min="m", max="m", null_count=0)
        # As a file written while ctx was called "old" would key them (see the rename test).
        if i % 3 == 0 and "ctx.page.n" in stats:
            stats["old.page.n"] = stats["ctx.page.n"]
        files.append(StoredFile(f"{NAME}/data/file-{i}.parquet", rows, stats))
    return files


@pytest.fixture(scope="module")
def stored(postgres_dsn: str) -> Iterator[tuple[MetaStore, list[StoredFile]]]:
    store = MetaStore(postgres_dsn, schema=f"t_{uuid.uuid4().hex[:12]}", max_connections=4)
    store.migrate()
    files = _files(random.Random(SEED))
    store.create_table(FLAT)
    store.commit_append(
        NAME,
        files=[
            NewFile(
                path=f.path,
                partition_path="",
                size_bytes=1000,
                row_count=len(f.rows),
                column_stats=f.stats,
                spec_version=FLAT.version,
            )
            for f in files
        ],
    )
    yield store, files
    store.close()


def _listed(meta: MetaStore, scans: tuple[dict[str, ScanFilter], ...]) -> set[str]:
    condition = file_condition(TableScans(NAME, scans), NESTED)
    with meta.read_tables([NAME]) as read:
        return set(read.pin(NAME).files(may_match=condition).paths)


def _filter(rng: random.Random, leaf: Leaf, depth: int = 0) -> ScanFilter:
    roll = rng.random()
    if depth < 2 and roll < 0.15:
        children = tuple(_filter(rng, leaf, depth + 1) for _ in range(rng.randint(1, 3)))
        return AllOf(children) if rng.random() < 0.5 else AnyOf(children)
    if roll < 0.25:
        return IsNull()
    if roll < 0.35:
        return IsNotNull()
    if roll < 0.5:
        return InList(tuple(leaf.draw(rng) for _ in range(rng.randint(1, 3))))
    return Compare(rng.choice(["=", "!=", "<", "<=", ">", ">="]), leaf.draw(rng))


def _holds_match(f: StoredFile, scan: Mapping[str, ScanFilter]) -> bool:
    return any(all(passes(leaf_value(row, path), c) for path, c in scan.items()) for row in f.rows)


def test_a_file_holding_a_matching_row_is_always_listed(
    stored: tuple[MetaStore, list[StoredFile]],
) -> None:
    meta, files = stored
    rng = random.Random(SEED + 1)
    pruned = 0
    for _ in range(CONDITIONS):
        scans = tuple(
            {leaf.path: _filter(rng, leaf) for leaf in rng.sample(LEAVES, rng.choice([1, 1, 2]))}
            for _ in range(rng.choice([1, 1, 2]))
        )
        listed = _listed(meta, scans)
        for f in files:
            if any(_holds_match(f, scan) for scan in scans):
                assert f.path in listed, (scans, f.rows, f.stats)
        pruned += len(files) - len(listed)
    # Sound and not trivially so: the leaves' statistics let most conditions skip files.
    assert pruned > CONDITIONS * FILES // 4


def _domain(leaf: Leaf, stat: Any) -> Any:
    """A statistic read back into the comparison domain."""
    if leaf.path == "ctx.d":
        return (date.fromisoformat(stat) - EPOCH_DATE).days
    if leaf.path == "ctx.amount":
        return Decimal(stat)
    if leaf.path == "ctx.score":
        return float_key(stat)
    return stat


def _may_hold(f: StoredFile, leaf: Leaf, condition: ScanFilter) -> bool:
    """Whether the file's statistics of the leaf leave room for a row passing ``condition``."""
    stats = f.stats.get(leaf.path)
    if stats is None:
        return True
    rows = len(f.rows)
    if isinstance(condition, IsNull):
        return stats.null_count > 0
    if isinstance(condition, IsNotNull):
        return stats.null_count < rows
    if isinstance(condition, InList):
        return any(_may_hold(f, leaf, Compare("=", v)) for v in condition.values)
    assert isinstance(condition, Compare)
    if stats.null_count >= rows:
        return False
    low = _domain(leaf, stats.min)
    # Float files have no upper bound (a NaN may lie above the recorded maximum).
    high = None if leaf.path == "ctx.score" else _domain(leaf, stats.max)
    v, op = condition.value, condition.op
    if op == "!=":
        return high is None or not low == v == high
    above_low = {"=": low <= v, "<": low < v, "<=": low <= v}.get(op, True)
    below_high = high is None or {"=": v <= high, ">": v < high, ">=": v <= high}.get(op, True)
    return above_low and below_high


@pytest.mark.parametrize("leaf", LEAVES, ids=[leaf.path for leaf in LEAVES])
def test_a_file_is_skipped_exactly_when_its_leaf_statistics_prove_no_match(
    stored: tuple[MetaStore, list[StoredFile]], leaf: Leaf
) -> None:
    meta, files = stored
    rng = random.Random(f"{SEED}:{leaf.path}")
    conditions: list[ScanFilter] = [IsNull(), IsNotNull()]
    ops: list[CompareOp] = ["=", "!=", "<", "<=", ">", ">="]
    conditions += [Compare(op, leaf.draw(rng)) for op in ops * 3]
    conditions += [InList((leaf.draw(rng), leaf.draw(rng)))]
    skipped = 0
    for condition in conditions:
        listed = _listed(meta, ({leaf.path: condition},))
        expected = {f.path for f in files if _may_hold(f, leaf, condition)}
        assert listed == expected, condition
        skipped += len(files) - len(listed)
    assert skipped > 0
    # A NULL struct above the leaf counts as the leaf's NULL (measured in the footers), so a
    # file whose rows all lack the struct is skipped by IS NOT NULL, and kept by IS NULL.
    no_struct = {f.path for f in files if all(r is None for r in f.rows) and leaf.path in f.stats}
    assert no_struct
    assert no_struct.isdisjoint(_listed(meta, ({leaf.path: IsNotNull()},)))
    assert no_struct <= _listed(meta, ({leaf.path: IsNull()},))


def test_leaves_without_usable_statistics_skip_nothing(
    stored: tuple[MetaStore, list[StoredFile]],
) -> None:
    meta, files = stored
    everything = {f.path for f in files}
    # Every file records ctx.j and tags.k as if nothing could match; neither is used: JSON
    # is not orderable, and a leaf under a list has a value per element, not per row.
    for path in ("ctx.j", "tags.k"):
        assert stats_type(NESTED, path) is None
        for condition in (Compare("=", "x"), IsNull(), IsNotNull()):
            assert _listed(meta, ({path: condition},)) == everything
    # A path that is no leaf of the spec (a whole struct, or no such field) skips nothing.
    for path in ("ctx.page", "ctx.nope", "ctx.page.url.deeper"):
        assert stats_type(NESTED, path) is None
        assert _listed(meta, ({path: IsNull()},)) == everything
    # The leaf's own type decides the comparison.
    assert stats_type(NESTED, "ctx.page.n") == "INTEGER"
    assert stats_type(NESTED, "ctx.amount") == "DECIMAL(9,2)"


def test_a_renamed_column_reads_its_leaves_under_the_old_name(
    stored: tuple[MetaStore, list[StoredFile]],
) -> None:
    meta, files = stored
    condition = file_condition(TableScans(NAME, ({"ctx.page.n": Compare(">", 10_000)},)), NESTED)
    # When version 1's files hold ctx as "old", its leaves' statistics are keyed old.page.n:
    # those are read for them (and ctx.page.n's are not).
    with meta.read_tables([NAME]) as read:
        pinned = read.pin(NAME)
        under_old = set(pinned.files(may_match=condition, renamed={"ctx": {1: "old"}}).paths)
        absent = set(pinned.files(may_match=condition, renamed={"ctx": {1: None}}).paths)
        current = set(pinned.files(may_match=condition).paths)
    everything = {f.path for f in files}
    with_old = {f.path for f in files if "old.page.n" in f.stats}
    assert with_old and under_old == everything - with_old
    assert absent == everything  # files of a version without the column prove nothing
    assert current == {f.path for f in files if "ctx.page.n" not in f.stats}
