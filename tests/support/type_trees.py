"""Random column types, nested ones included, for tests of the type grammar and field ids."""

from __future__ import annotations

import random

LEAVES = ["INTEGER", "BIGINT", "VARCHAR", "DOUBLE", "BOOLEAN", "DATE", "TIMESTAMP", "TIMESTAMPTZ",
          "DECIMAL(10,2)", "UUID", "BLOB", "JSON"]  # fmt: skip


def random_type(rng: random.Random, depth: int = 0) -> str:
    """A type's text: a leaf, or a STRUCT, MAP or list nested up to four levels."""
    kind = rng.choice(["leaf", "leaf", "struct", "map", "list"] if depth < 4 else ["leaf"])
    if kind == "leaf":
        return rng.choice(LEAVES)
    if kind == "list":
        return random_type(rng, depth + 1) + "[]"
    if kind == "map":
        return f"MAP({rng.choice(['VARCHAR', 'BIGINT'])}, {random_type(rng, depth + 1)})"
    names = rng.sample(
        ["a", "userId", "page_url", "x9", "name", "order", "Value"], rng.randint(1, 4)
    )
    return "STRUCT(" + ", ".join(f"{n} {random_type(rng, depth + 1)}" for n in names) + ")"
