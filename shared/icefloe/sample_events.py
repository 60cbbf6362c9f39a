"""Deterministic sample events for the demo, the benchmarks and the tests.

Page loads, clicks, sign-ups and purchases by a few thousand users over several days, with a
JSON ``properties`` object (``numtime`` is the number IceDB's write-up sums per user).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta

from icefloe.spec import SizeTargets, TableSpec

EVENTS_SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, user_id VARCHAR, properties JSON"
EVENT_TYPES = ("page_load", "click", "signup", "purchase")
_EVENT_WEIGHTS = (60, 30, 3, 7)
_PATHS = ("/", "/pricing", "/docs", "/blog", "/signup", "/checkout")


def sample_events_spec(name: str = "events", *, sizes: SizeTargets | None = None) -> TableSpec:
    """The table the sample events go in (the demo's and the benchmarks'): by day of ``ts``,
    sorted by event then time, one ``user_id`` per row group."""
    return TableSpec.create(
        name=name,
        schema=EVENTS_SCHEMA,
        partition_by="day(ts)",
        sort_by="event, ts",
        row_group_by="user_id",
        sizes=sizes,
    )


def sample_events(
    count: int,
    *,
    days: int = 7,
    start: datetime = datetime(2026, 11, 1),
    users: int = 5000,
    seed: int = 7,
) -> list[dict[str, object]]:
    """``count`` events spread evenly over ``days`` days from ``start``, reproducible by seed."""
    return list(iter_sample_events(count, days=days, start=start, users=users, seed=seed))


def iter_sample_events(
    count: int,
    *,
    days: int = 7,
    start: datetime = datetime(2026, 11, 1),
    users: int = 5000,
    seed: int = 7,
) -> Iterator[dict[str, object]]:
    rng = random.Random(seed)
    span = days * 86_400
    kinds = rng.choices(EVENT_TYPES, weights=_EVENT_WEIGHTS, k=count)
    for i, kind in enumerate(kinds):
        ts = start + timedelta(seconds=(i * span) // max(count, 1) + rng.random())
        properties: dict[str, object] = {
            "path": rng.choice(_PATHS),
            "numtime": rng.randint(1, 5000),
        }
        if kind == "purchase":
            properties["amount"] = round(rng.uniform(5, 500), 2)
        yield {
            "ts": ts.isoformat() + "Z",
            "event": kind,
            "user_id": f"u{int(rng.paretovariate(1.2)) % users}",
            "properties": properties,
        }
