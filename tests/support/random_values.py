"""Random field values for the insert differentials: good ones of each column of
``MIXED_SPEC``, and bad ones (wrong JSON kind, out of range, doubtful timestamp forms)."""

from __future__ import annotations

import random

from icefloe.spec import TableSpec

MIXED_SPEC = TableSpec.create(
    name="t",
    schema=(
        "ts TIMESTAMP NOT NULL, d DATE, flag BOOLEAN, tiny TINYINT, n INTEGER NOT NULL,"
        " big UBIGINT, x DOUBLE, s VARCHAR, k VARCHAR, j JSON"
    ),
    partition_by="day(ts), k",
)


def _digits(rng: random.Random, width: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(width))


def timestamp_text(rng: random.Random) -> str:
    """Mostly well-formed ISO-8601, in every form either parser might read, sometimes odd."""
    year = rng.choice(("2026", "1969", "0001", "9999", "0000", _digits(rng, 4)))
    month = rng.choice(("01", "02", "12", "13", "00", _digits(rng, 2)))
    day = rng.choice(("01", "28", "29", "30", "31", "00", _digits(rng, 2)))
    text = f"{year}-{month}-{day}"
    if rng.random() < 0.85:
        hour = rng.choice(("00", "10", "23", "24", _digits(rng, 2)))
        text += rng.choice(("T", " ", "t", "_")) + hour
        if rng.random() < 0.75:  # else the hour alone, which only pyarrow reads
            text += ":" + rng.choice(("00", "59", "60", _digits(rng, 2)))
            if rng.random() < 0.8:
                text += ":" + rng.choice(("00", "59", "60", _digits(rng, 2)))
                if rng.random() < 0.5:
                    text += "." + _digits(rng, rng.choice((1, 3, 6, 7, 9)))
    if rng.random() < 0.6:
        text += rng.choice(
            ("Z", "z", "+02:00", "-05:30", "+0230", "+02", "-00:00", "+24:00", " UTC", "+2")
        )
    if rng.random() < 0.03:
        text = rng.choice((" ", "")) + text + rng.choice((" ", ""))
    return text


def good_value(name: str, rng: random.Random, *, local: bool = False) -> object:
    if name == "ts":
        zone = "" if local else "Z"
        return f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T{rng.randint(10, 23)}:00:00{zone}"
    if name == "d":
        return f"20{rng.randint(10, 40)}-0{rng.randint(1, 9)}-{rng.randint(10, 28)}"
    if name == "flag":
        return rng.random() < 0.5
    if name == "tiny":
        return rng.randint(-128, 127)
    if name == "n":
        return rng.randint(-(2**31), 2**31 - 1)
    if name == "big":
        return rng.randrange(2**64)
    if name == "x":
        return rng.choice((-0.0, 1e308, rng.gauss(0, 1e9), 5, 0.1, 1e-300))
    if name in ("s", "k"):
        return rng.choice(("", "a", "Zürich", "日本", "x" * 40, "\u00e9\u0301", "tab\there"))
    return rng.choice(
        ({"a": 1}, [1, [2]], "s", 3.5, {"b": {"c": None}}, [], {}, {"w": "finance"}, "Info")
    )


# Forms at the edge of what one parser or the other reads (each valid as a date and time).
DOUBTFUL_FORMS = (
    "2026-01-01T10",
    "2026-01-01 10",
    "2026-01-01T10Z",
    "2026-01-01T10+02",
    "2026-01-01T10:59",
    "2026-01-01T10:59Z",
    "2026-01-01T10:59+0230",
    "2026-01-01T10:59:00+0230",
    "2026-01-01T10:59:00.1234567",
    "2026-01-01",
    "2026-01-01Z",
    "2026-01-01T24:00:00",
    "2026-01-01t10:00:00",
)


def bad_value(name: str, rng: random.Random) -> object:
    """A value of the wrong JSON type, out of range, or in a doubtful form."""
    if name in ("ts", "d"):
        if rng.random() < 0.5:
            return rng.choice(DOUBTFUL_FORMS)
        return rng.choice((timestamp_text(rng), timestamp_text(rng), 1_700_000_000_000, True))
    if name in ("tiny", "n", "big"):
        return rng.choice(("5", 2.0, 1e2, 300, -1, 2**64, True, 2**31))
    if name == "x":
        return rng.choice(("1.5", True, 2**70, 10**400))
    if name in ("s", "k"):
        return rng.choice((5, True, {"a": 1}, "y" * 41, "a\x00b"))
    if name == "flag":
        return rng.choice(("true", 1, 0))
    return rng.choice(("z" * 45, [[[[[1]]]]]))
