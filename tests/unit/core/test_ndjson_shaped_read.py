"""Reading NDJSON with the JSON columns' shape taken from the first lines never changes what
the typed columns hold: over random batches whose JSON columns mostly keep one shape (and
sometimes do not: an extra key, another type, a scalar, a null), with unknown fields mixed in,
the shaped read either gives up, or gives exactly the typed columns of a plain read, and never
for a batch with a field the table lacks."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa

from icefloe.ingest import json_input
from icefloe.spec import TableSpec
from support.random_values import good_value

SEED = int(os.environ.get("ICEFLOE_FUZZ_SEED", "20261126"))
BATCHES = 300
SPEC = TableSpec.create(
    name="t",
    schema="ts TIMESTAMP NOT NULL, n INTEGER NOT NULL, s VARCHAR, k VARCHAR, j JSON, props JSON",
)
TYPED = ("ts", "n", "s", "k")
SCALARS = (
    lambda r: r.randint(-5, 10**6),
    lambda r: round(r.uniform(-1, 1), 3),
    lambda r: r.choice(("a", "bé", "", "x" * 30)),
    lambda r: r.random() < 0.5,
    lambda r: None,
)


def _shape(rng: random.Random) -> dict[str, int]:
    """A JSON object's keys, each with the index of its value kind."""
    return {f"k{i}": rng.randrange(len(SCALARS)) for i in range(rng.randint(1, 5))}


def _value(rng: random.Random, shape: dict[str, int], odd: float) -> object:
    if rng.random() < odd:
        return rng.choice(
            (
                None,
                7,
                "text",
                [1, 2],
                {**_object(rng, shape), "extra": 1},
                {"nested": _object(rng, shape)},
            )
        )
    return _object(rng, shape)


def _object(rng: random.Random, shape: dict[str, int]) -> dict[str, object]:
    return {key: SCALARS[kind](rng) for key, kind in shape.items() if rng.random() < 0.95}


def _batch(rng: random.Random) -> tuple[list[str], bool]:
    """Lines of a batch, and whether one of them has a field the table lacks."""
    shapes = {"j": _shape(rng), "props": _shape(rng)}
    odd = rng.choice((0.0, 0.0, 0.002, 0.05))
    count = rng.choice((5, 100, 900))
    unknown_at = rng.randrange(count) if rng.random() < 0.2 else None
    lines = []
    for number in range(count):
        record: dict[str, object] = {
            name: good_value(name, rng) for name in TYPED if rng.random() < 0.97 or name in "tsn"
        }
        for name, shape in shapes.items():
            if rng.random() < 0.97:
                record[name] = _value(rng, shape, odd)
        if number == unknown_at:
            record[rng.choice(("zz", "J", "props2"))] = 1
        lines.append(json.dumps(record))
    return lines, unknown_at is not None


def test_a_shaped_read_gives_the_plain_reads_typed_columns_or_gives_up(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    shaped_reads = unknown_batches = 0
    for number in range(BATCHES):
        lines, has_unknown = _batch(rng)
        path = tmp_path / f"b{number}.ndjson"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        unknown_batches += has_unknown

        shaped = json_input._read_shaped(path, SPEC)

        if shaped is None:
            continue
        shaped_reads += 1
        assert not has_unknown, f"batch {number}: a field the table lacks was read past"
        plain = json_input.read_typed(path, SPEC, infer_rest=False)
        assert plain is not None, f"batch {number}"
        assert shaped.column_names == list(TYPED)
        assert shaped.equals(plain), f"batch {number}"
    # Both kinds of batch came up, and most batches of one shape were read shaped
    assert unknown_batches >= BATCHES // 10
    assert shaped_reads >= BATCHES // 3


def test_a_sample_without_a_json_columns_value_gives_up(tmp_path: Path) -> None:
    # Given a batch whose first 64 KiB never hold props (a later line does)
    first = {"ts": "2026-01-01T00:00:00Z", "j": {"a": "x" * 100}}
    lines = [json.dumps({**first, "n": i}) for i in range(700)]
    lines.append(json.dumps({"ts": "2026-01-01T00:00:00Z", "n": 9, "props": {"b": 1}}))
    path = tmp_path / "b.ndjson"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # Then the shaped read has no shape to declare
    assert json_input._read_shaped(path, SPEC) is None


def test_a_batch_of_stable_json_objects_is_read_shaped(tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {"ts": "2026-01-01T00:00:00Z", "n": i, "k": "x", "j": {"a": i}, "props": {"p": "v"}}
        )
        for i in range(50)
    ]
    path = tmp_path / "b.ndjson"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    shaped = json_input._read_shaped(path, SPEC)

    assert shaped is not None
    assert shaped.column("n").to_pylist() == list(range(50))
    assert shaped.schema.field("n").type == pa.int32()
