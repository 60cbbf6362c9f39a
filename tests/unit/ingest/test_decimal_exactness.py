"""A DECIMAL takes every number that fits it exactly, whatever its spelling (trailing zeros,
an exponent, DuckDB's printing of a double), from NDJSON text, CSV text and Python rows; and
refuses, by row and field, every number with a digit past its scale or past its integer
digits (DuckDB's casts round or shift them instead: 1.5 to 2, 0.001234e4 to 12.00)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from decimal import Decimal

import duckdb
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.ingest.load import load_batch
from icefloe.ingest.sources import InsertLimits, StagedBatch, rows_batch, stage_bytes
from icefloe.spec import TableSpec

LIMITS = InsertLimits()
# (precision, scale) of each column: no integer digits, no fraction, 64 bits and past them.
TYPES = ((38, 38), (38, 0), (19, 0), (20, 3), (10, 2), (38, 10), (18, 6), (4, 2))
NAMES = tuple(f"d{p}_{s}" for p, s in TYPES)
DECIMALS = [f"{n} DECIMAL({p},{s})" for n, (p, s) in zip(NAMES, TYPES, strict=True)]
SPEC = TableSpec.create(name="t", schema=", ".join(["id INTEGER", *DECIMALS]))
FORMATS = ("ndjson", "csv", "rows")
FITS = "expected a number that fits"


def load(
    con: duckdb.DuckDBPyConnection, rows: Sequence[dict[str, str]], fmt: str
) -> list[dict[str, object]]:
    """The rows (each field the text of a number) loaded as NDJSON text, CSV text, or Python
    rows of ``Decimal`` values (of that text)."""
    staged: StagedBatch
    if fmt == "rows":
        staged = rows_batch(
            [{"id": i} | {k: Decimal(v) for k, v in row.items()} for i, row in enumerate(rows)],
            limits=LIMITS,
        )
    elif fmt == "ndjson":
        lines = [
            "{" + ", ".join([f'"id": {i}'] + [f'"{k}": {v}' for k, v in row.items()]) + "}"
            for i, row in enumerate(rows)
        ]
        staged = stage_bytes("\n".join(lines).encode(), fmt="ndjson", limits=LIMITS)
    else:
        lines = [",".join(("id", *NAMES))] + [
            ",".join([str(i)] + [row.get(n, "") for n in NAMES]) for i, row in enumerate(rows)
        ]
        staged = stage_bytes("\n".join(lines).encode(), fmt="csv", limits=LIMITS)
    try:
        return load_batch(con, SPEC, staged, limits=LIMITS).to_pylist()
    finally:
        staged.discard()


def refused(
    con: duckdb.DuckDBPyConnection, rows: Sequence[dict[str, str]], fmt: str
) -> tuple[list[tuple[int | None, str | None]], int]:
    """The (row, field) of the first problems of the refused batch, and how many it had."""
    with pytest.raises(BatchRejectedError, match=FITS) as caught:
        load(con, rows, fmt)
    return [(p.row, p.field) for p in caught.value.problems], caught.value.total


def stored(loaded: list[dict[str, object]], rows: Sequence[dict[str, str]]) -> list[object]:
    """Each loaded value that differs from the number its text spells, with that text."""
    return [
        (i, name, text, loaded[i][name])
        for i, row in enumerate(rows)
        for name, text in row.items()
        if loaded[i][name] != Decimal(text)
    ]


# Numbers that fit, and the column: those refused before (a comparison as doubles, which
# DuckDB's DECIMAL to DOUBLE cast got wrong), each form of the text, at the type's bounds.
FITTING = (
    ("26867699942251898.592", "d20_3"),
    ("-9553345535229718", "d19_0"),
    ("0.43673605269034704076629399072126634527", "d38_38"),
    ("-0.99999999999999999999999999999999999999", "d38_38"),
    ("99999999999999999999999999999999999999", "d38_0"),
    ("-9999999999999999999", "d19_0"),
    ("99999999999999999.999", "d20_3"),
    ("-99999999999999999.999", "d20_3"),
    ("1.2300", "d10_2"),
    ("1.2300000000000000000000000000000000000000000000", "d4_2"),
    ("12.340000", "d4_2"),
    ("0.000", "d38_38"),
    ("-0", "d19_0"),
    ("-0.0", "d20_3"),
    ("0e-400", "d10_2"),
    ("-0.000e-99", "d38_38"),
    ("1e2", "d19_0"),
    ("1E+2", "d38_0"),
    ("1e-7", "d38_38"),
    ("1e-38", "d38_38"),
    ("1e21", "d38_0"),
    ("1e+16", "d19_0"),
    ("1.2345678901234567e+19", "d38_10"),
    ("12345678901234567800e-2", "d38_10"),
    ("1234567890123456780e-2", "d20_3"),
    ("12345678901234567800e-2", "d38_0"),
    ("0.001234e4", "d4_2"),
    ("0.0000000000000000000000000000000000000000001234e44", "d4_2"),
    ("1234e-2", "d4_2"),
    ("-99.99e0", "d4_2"),
    ("9.9999999999999999999999999999999999999e37", "d38_0"),
    ("26867699942251898592e-3", "d20_3"),
    ("2.6867699942251898592E16", "d20_3"),
)
# Numbers that do not fit, and the column: a digit past the scale (DuckDB's cast rounds it
# away, 1.5 to 2 at a scale of 0), past the integer digits, not a number at all.
NOT_FITTING = (
    ("1.5", "d38_0"),
    ("-2.5", "d19_0"),
    ("1.5e0", "d38_0"),
    ("15e-1", "d19_0"),
    ("1.23001", "d10_2"),
    ("0.0012345e4", "d4_2"),
    ("1e-400", "d38_38"),
    ("1E-39", "d38_38"),
    ("100000000000000000.000", "d20_3"),
    ("1e17", "d20_3"),
    ("12345678901234567800e-2", "d20_3"),
    ("1e38", "d38_0"),
    ("1", "d38_38"),
    ("99.995", "d4_2"),
    ("99.999e0", "d4_2"),
    ("10000000000000000000", "d19_0"),
    ("1e400", "d38_0"),
)
# Exponents past 64 bits: no Decimal holds them, and the JSON reading of them is
# exact_numbers' (tests/unit/ingest/test_exact_numbers.py): CSV text only here.
HUGE_EXPONENTS = (("1e99999999999999999999", "d10_2"), ("1e-99999999999999999999", "d10_2"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_numbers_that_fit_are_stored_exactly(con: duckdb.DuckDBPyConnection, fmt: str) -> None:
    rows = [{name: text} for text, name in FITTING]
    assert stored(load(con, rows, fmt), rows) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_numbers_that_do_not_fit_are_refused_by_row_and_field(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    cases = NOT_FITTING + (HUGE_EXPONENTS if fmt == "csv" else ())
    rows = [{name: text} for text, name in cases]
    problems, total = refused(con, rows, fmt)
    assert total == len(rows)
    assert problems == [(i, name) for i, (_, name) in enumerate(cases)][: len(problems)]


@pytest.mark.parametrize("text", ["abc", "e5", "1.2.3", "0x10", "1_000", " 5", "+1", "inf", "NaN"])
def test_text_that_is_no_number_is_refused(con: duckdb.DuckDBPyConnection, text: str) -> None:
    problems, total = refused(con, [{"d10_2": "1.5"}, {"d10_2": text}], "csv")
    assert (problems, total) == ([(1, "d10_2")], 1)


def _digits(rng: random.Random, count: int, *, first_nonzero: bool = False) -> str:
    if count == 0:
        return ""
    first = rng.choice("123456789" if first_nonzero else "0123456789")
    return first + "".join(rng.choice("0123456789") for _ in range(count - 1))


def _number(rng: random.Random, integer: int, fraction: int, *, last_nonzero: bool) -> Decimal:
    """A number of ``integer`` digits before the point (the first not 0) and ``fraction``
    after it (the last not 0 when ``last_nonzero``), of either sign."""
    whole = _digits(rng, integer, first_nonzero=True) or "0"
    part = _digits(rng, fraction)
    if last_nonzero and fraction:
        part = part[:-1] + rng.choice("123456789")
    sign = "-" if rng.random() < 0.4 else ""
    return Decimal(f"{sign}{whole}.{part}" if part else f"{sign}{whole}")


def _fitting(rng: random.Random, precision: int, scale: int) -> Decimal:
    """Often all the digits the type holds (where doubles lose them), else fewer."""
    full = rng.random() < 0.5
    integer = precision - scale if full else rng.randint(0, precision - scale)
    fraction = scale if full else rng.randint(0, scale)
    return _number(rng, integer, fraction, last_nonzero=False)


def _not_fitting(rng: random.Random, precision: int, scale: int) -> Decimal:
    """One digit past the scale (not 0), or one integer digit past the type's."""
    if rng.random() < 0.5:
        return _number(rng, rng.randint(0, precision - scale), scale + 1, last_nonzero=True)
    return _number(rng, precision - scale + 1, rng.randint(0, scale), last_nonzero=False)


def _spelled(rng: random.Random, number: Decimal) -> str:
    """The number in one of JSON's forms: plain, or with an exponent (of either case, with
    or without '+'), with or without trailing zeros."""
    exponent = rng.randint(-12, 45) if rng.random() < 0.4 else 0
    sign, digits, places = number.as_tuple()
    assert isinstance(places, int)
    mantissa = format(Decimal((sign, digits, places - exponent)), "f")  # (exact: no context)
    zeros = "0" * rng.choice((0, 0, 1, 3, 12))
    if zeros:
        mantissa += zeros if "." in mantissa else "." + zeros
    if exponent == 0 and rng.random() < 0.8:
        return mantissa
    plus = "+" if exponent >= 0 and rng.random() < 0.5 else ""
    return f"{mantissa}{rng.choice('eE')}{plus}{exponent}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_random_numbers_that_fit_are_stored_exactly(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    # Given 2,000 numbers that fit their column, in each form, beside others in a row
    rng = random.Random(f"fit-{fmt}")
    rows = [
        {n: _spelled(rng, _fitting(rng, p, s)) for n, (p, s) in zip(NAMES, TYPES, strict=True)}
        for _ in range(250)
    ]
    # When loaded, then each is stored as the number its text spells
    assert stored(load(con, rows, fmt), rows) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_random_numbers_that_do_not_fit_are_refused_by_row_and_field(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    # Given 1,000 rows each of one number that does not fit its column
    rng = random.Random(f"not-{fmt}")
    columns = [rng.randrange(len(TYPES)) for _ in range(1000)]
    rows = [{NAMES[c]: _spelled(rng, _not_fitting(rng, *TYPES[c]))} for c in columns]
    # When loaded, then the batch is refused, once for each row (its only field)
    problems, total = refused(con, rows, fmt)
    assert total == len(rows)
    assert problems == [(i, NAMES[c]) for i, c in enumerate(columns)][: len(problems)]


def test_python_rows_take_decimals_of_any_exponent(con: duckdb.DuckDBPyConnection) -> None:
    # Python writes a Decimal's own digits, an exponent where it keeps one (1E+2, 0E-7)
    values = ["1E+2", "0E-7", "-0E+3", "1.2300E+1", "123456789012345678.90E-1"]
    rows = [{"d20_3": v} for v in values]
    assert stored(load(con, rows, "rows"), rows) == []
