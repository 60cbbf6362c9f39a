"""Per-column SQL that turns raw input values into the table's types, and flags bad ones.

Each column gets an inner expression for its typed value (NULL when the raw value is absent or
does not fit the type) and one telling whether a raw value was present at all. An outer query
derives the per-row error code from those two without recomputing anything: NULL when fine,
else ``missing``, ``type``, ``size``, or ``depth?`` (a JSON value that may be nested too deeply,
checked exactly afterwards). Everything runs vectorized in DuckDB; Python only words the
messages of a refused batch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from icefloe.duck import ident, string_literal
from icefloe.ingest.decimal_text import exact_decimal
from icefloe.ingest.exact_numbers import marked_leaf, unmarked
from icefloe.ingest.strict_json import JSON_STRING, NOT_STANDARD_SUSPECT
from icefloe.spec import Column
from icefloe.spec.types import is_integer, is_list

_INTEGER_JSON = "('BIGINT', 'UBIGINT')"
_NUMBER_JSON = "('BIGINT', 'UBIGINT', 'DOUBLE')"
# The forms text (CSV, Arrow and Parquet strings) must have to become a number, as JSON spells
# numbers: DuckDB's own casts take '3.7' as the integer 4, '0x10' as 16, '1_000' as 1000 and
# ' 5' as 5. NaN and infinities pass here, to be refused by name (value_checks).
_INTEGER_TEXT = "-?(0|[1-9][0-9]*)"
_NUMBER_TEXT = "-?(0|[1-9][0-9]*)([.][0-9]+)?([eE][-+]?[0-9]+)?|(?i:[-+]?(inf|infinity|nan))"
# A date alone: DuckDB's cast keeps the date of '2026-11-01 junk' or of a timestamp. Infinities
# pass here, to be refused by name (value_checks).
_DATE_TEXT = "-?[0-9]{4,}-[0-9]{1,2}-[0-9]{1,2}|-?infinity"
# A time of day alone, to the microsecond: no offset (DuckDB's cast drops it), no more digits
# (it rounds them away), nothing after it (it ignores that).
_TIME_TEXT = "[0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]{1,6})?)?"
# A numeric UTC offset ending a timestamp's text, in each form DuckDB's cast reads (+05,
# +0530, +05:30, +05:30:15, then a colon or spaces), after a time's seconds (so that the day
# of a date alone, -31 of 2026-05-31, is no offset). DuckDB takes any two digits there
# (+25:00, +23:99) and moves the instant by them.
_OFFSET_TEXT = r":[0-9]{1,2}([.][0-9]*)?[+-][0-9]{2}(:?[0-9]{2}(:[0-9]{2})?)?:?[\t\n\v\f\r ]*$"
# An offset in range: from -18:00 to +18:00, minutes and seconds 00 to 59.
_OFFSET_IN_RANGE = (
    r"[+-]((0[0-9]|1[0-7])(:?[0-5][0-9](:[0-5][0-9])?)?|18(:?00(:00)?)?):?[\t\n\v\f\r ]*$"
)
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")
# Epoch milliseconds accepted for timestamps: years 1677..2262, the range of int64 nanoseconds.
_EPOCH_MS_MIN, _EPOCH_MS_MAX = -9_223_372_036_854, 9_223_372_036_854


@dataclass(frozen=True, slots=True)
class ColumnSQL:
    """``value`` and ``present`` are evaluated over the raw input and the aliases of
    ``layers``; ``error`` over the inner query's output, where the typed value is the column's
    name and presence is ``present``."""

    column: Column
    value: str
    present: str
    error: str
    # Layers of (alias, expression) computed below ``value``, in order, each over the raw
    # input and the aliases of the layers before it, every alias carried up to ``error``: a
    # nested column parses its JSON in the first, takes each node met once per row out of
    # the parsed tree in the second and types each such node that is not a struct in the
    # third, so that ``value`` and ``error`` read them by name.
    layers: tuple[tuple[tuple[str, str], ...], ...] = ()
    # An expression over the raw input naming each bad part of a value (a nested column's
    # paths), run only over the rows whose ``error`` is ``nested``.
    diagnosis: str | None = None

    @property
    def present_alias(self) -> str:
        return present_ident(self.column.name)


def present_ident(name: str) -> str:
    """The quoted identifier of column ``name``'s presence flag. ``name`` is checked as an
    identifier; the flag's own name may pass the 63 characters a column name may have (DuckDB
    takes longer identifiers), so it is not checked again."""
    return '"__present_' + ident(name)[1:]


def _offset_ident(name: str) -> str:
    """The quoted identifier of column ``name``'s flag of a UTC offset out of range."""
    return '"__offset_' + ident(name)[1:]


def _zoned(kind: str) -> bool:
    """Whether a column of type ``kind`` holds timestamps, at any depth of lists."""
    return kind.rstrip("[]") in ("TIMESTAMP", "TIMESTAMPTZ")


def offset_out_of_range(text: str) -> str:
    """SQL true when the text ``text`` ends in a numeric UTC offset outside -18:00..+18:00 or
    with minutes or seconds past 59, which DuckDB's cast would read and move the instant by;
    false otherwise (no offset, a zone by name, NULL)."""
    return (
        f"CASE WHEN regexp_matches({text}, '{_OFFSET_TEXT}')"
        f" THEN NOT regexp_matches({text}, '{_OFFSET_IN_RANGE}') ELSE false END"
    )


def json_offset_out_of_range(r: str, kind: str) -> str | None:
    """SQL true when the JSON expression ``r``, typed as a leaf of type ``kind``, is a string
    ending in an offset out of range; None for a type that takes no offset."""
    if kind not in ("TIMESTAMP", "TIMESTAMPTZ"):
        return None
    inner = offset_out_of_range(f"({r} ->> '$')")
    return f"CASE WHEN json_type({r}) = 'VARCHAR' THEN {inner} ELSE false END"


def text_offset_out_of_range(r: str, kind: str, source: str) -> str | None:
    """SQL true when the typed expression ``r`` (DuckDB type ``source``) is text holding a
    timestamp (or, for a list type from text, an element) that ends in an offset out of
    range; None when no text becomes a timestamp."""
    if source != "VARCHAR" or not _zoned(kind):
        return None
    if not is_list(kind):
        return offset_out_of_range(r)
    depth = kind.count("[]")
    e = f"__o{depth}"
    bad = offset_out_of_range(e)
    for level in range(depth - 1, 0, -1):  # a list of lists: any element at any depth
        inner = f"__o{level}"
        bad = f"coalesce(list_bool_or(list_transform({inner}, lambda {e}: {bad})), false)"
        e = inner
    elements = f"TRY_CAST({r} AS VARCHAR{'[]' * depth})"
    return f"coalesce(list_bool_or(list_transform({elements}, lambda {e}: {bad})), false)"


EXPECTED: dict[str, str] = {
    "VARCHAR": "a string",
    "BOOLEAN": "true or false",
    "DATE": "an ISO-8601 date string",
    "TIME": "an ISO-8601 time of day before 24:00:00",
    "TIMESTAMP": "an ISO-8601 timestamp string or epoch milliseconds",
    "TIMESTAMPTZ": "an ISO-8601 timestamp string or epoch milliseconds",
    "UUID": "a UUID string",
    "BLOB": "a base64 string",
    "JSON": "any JSON value",
}


def expected(type_name: str) -> str:
    if type_name in EXPECTED:
        return EXPECTED[type_name]
    if is_integer(type_name):
        return f"an integer that fits {type_name}"
    if is_list(type_name):
        return f"a JSON array of {type_name[:-2]} values"
    decimal = _DECIMAL.fullmatch(type_name)
    if decimal is not None:
        return (
            f"a number that fits {type_name}, with at most {decimal.group(2)} digits after the"
            " point"
        )
    if type_name.startswith("STRUCT("):
        return "a JSON object"
    if type_name.startswith("MAP("):
        return "a JSON object (a map)"
    return f"a number that fits {type_name}"


# What a stored time may be: Python (and so every client library) reads years 1..9999 only.
_TIME_BOUNDS = {
    "DATE": ("DATE '0001-01-01'", "DATE '9999-12-31'"),
    "TIMESTAMP": ("TIMESTAMP '0001-01-01'", "TIMESTAMP '9999-12-31 23:59:59.999999'"),
    "TIMESTAMPTZ": (
        "TIMESTAMPTZ '0001-01-01 00:00:00+00'",
        "TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'",
    ),
}


def value_checks(
    kind: str,
    v: str,
    *,
    max_value_bytes: int,
    partition_source: bool = False,
    json_proven_standard: bool = False,
) -> list[tuple[str, str]]:
    """The checks of a typed value ``v`` of type ``kind`` that is not NULL: (condition, error
    code) pairs, in order, each condition true when ``v`` fails that check."""
    checks: list[tuple[str, str]] = []
    if is_list(kind):
        # A list parsed whole (from CSV text): each element gets its type's checks.
        e = f"__e{kind.count('[]')}"
        for condition, code in value_checks(
            kind[:-2],
            e,
            max_value_bytes=max_value_bytes,
            json_proven_standard=json_proven_standard,
        ):
            checks.append(
                (
                    f"coalesce(list_bool_or(list_transform({v},"
                    f" lambda {e}: {e} IS NOT NULL AND ({condition}))), false)",
                    code,
                )
            )
        return checks
    if kind in _TIME_BOUNDS:
        low, high = _TIME_BOUNDS[kind]
        checks.append((f"NOT isfinite({v}) OR {v} < {low} OR {v} > {high}", "range"))
    elif kind in ("FLOAT", "DOUBLE"):
        checks.append((f"isnan({v}) OR isinf({v})", "finite"))
    elif kind == "TIME":
        # DuckDB's TIME holds 24:00:00; Python's (and so every client's, the statistics' and
        # a partition path's) reads it as 00:00:00.
        checks.append((f"{v} >= TIME '24:00:00'", "type"))
    if kind == "VARCHAR" and partition_source:
        checks.append((f"contains({v}, chr(0))", "nul"))
    if kind == "JSON" and not json_proven_standard:
        # JSON text outside its strings: what is left of a standard JSON value has no letters
        # but those of true, false and null, and no comma before a closing bracket. DuckDB's
        # parser also takes NaN, Infinity and trailing commas; JSON does not (see strict_json).
        # Each string becomes "": an empty one would leave [,] of ["a", "b"].
        stripped = f"regexp_replace({v}, '{JSON_STRING}', '\"\"', 'g')"
        checks.append(
            (
                f"regexp_matches({v}, '{NOT_STANDARD_SUSPECT}')"
                f" AND regexp_matches({stripped}, '{NOT_STANDARD_SUSPECT}')",
                "json",
            )
        )
    if kind in ("VARCHAR", "JSON"):
        checks.append((f"strlen({v}) > {max_value_bytes}", "size"))
    elif kind == "BLOB":
        checks.append((f"octet_length({v}) > {max_value_bytes}", "size"))
    return checks


def _outer_error(
    col: Column,
    *,
    max_value_bytes: int,
    max_json_depth: int | None,
    partition_source: bool = False,
    json_proven_standard: bool = False,
    offset_flag: str | None = None,
) -> str:
    v = ident(col.name)
    present = present_ident(col.name)
    checks = [f"WHEN NOT {present} THEN {'NULL' if col.nullable else repr('missing')}"]
    if offset_flag is not None:
        checks.append(f"WHEN {offset_flag} THEN 'offset'")
    checks += [f"WHEN {v} IS NULL THEN 'type'"]
    checks += [
        f"WHEN {condition} THEN '{code}'"
        for condition, code in value_checks(
            col.type,
            v,
            max_value_bytes=max_value_bytes,
            partition_source=partition_source,
            json_proven_standard=json_proven_standard,
        )
    ]
    if col.type == "JSON" and max_json_depth is not None:
        # An upper bound of the depth, cheap to compute; suspects are checked exactly later.
        # A value of at most max_json_depth bytes cannot be nested deeper: most are skipped.
        checks.append(
            f"WHEN strlen({v}) > {max_json_depth}"
            f" AND strlen({v}) - strlen(replace(replace({v}, '[', ''), '{{', ''))"
            f" > {max_json_depth} THEN 'depth?'"
        )
    return "CASE " + " ".join(checks) + " END"


def json_column(
    col: Column,
    *,
    max_value_bytes: int,
    max_json_depth: int,
    partition_source: bool = False,
    marker: str | None = None,
) -> ColumnSQL:
    """SQL over a JSON-typed raw column (read from JSON records) named like the column. A
    timestamp's offset out of range is flagged once, below the value (a layer), for both the
    value and the error code. ``marker``: see :func:`json_leaf_value`."""
    r = ident(col.name)
    offset = json_offset_out_of_range(r, col.type)
    flag = None if offset is None else _offset_ident(col.name)
    value = json_leaf_value(r, col.type, offset_flag=flag, marker=marker)
    t = f"json_type({r})"
    return ColumnSQL(
        column=col,
        value=value,
        present=f"coalesce({t} <> 'NULL', false)",
        error=_outer_error(
            col,
            max_value_bytes=max_value_bytes,
            max_json_depth=max_json_depth,
            partition_source=partition_source,
            offset_flag=flag,
        ),
        layers=() if offset is None or flag is None else (((flag, offset),),),
    )


def json_member(json: str, key: str, *, under: Sequence[str] = ()) -> str:
    """SQL of the member whose name is the SQL string ``key`` in the object at the field path
    ``under`` of the JSON expression ``json``, through a JSON pointer: it names any key (the
    empty one, or one holding quotes, backslashes, ``/`` or ``~``), where a ``$."..."`` path
    cannot name the empty key and must escape the others."""
    prefix = "".join("/" + _pointer_token(name) for name in under) + "/"
    token = f"replace(replace({key}, '~', '~0'), '/', '~1')"
    return f"json_extract({json}, {string_literal(prefix)} || {token})"


def _pointer_token(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def json_leaf_value(
    r: str, kind: str, *, offset_flag: str | None = None, marker: str | None = None
) -> str:
    """SQL of the typed value of the JSON expression ``r`` as a column of type ``kind``, a
    leaf (not a STRUCT, MAP or list: those are typed part by part, see
    :mod:`~icefloe.ingest.nested_json`): NULL when ``r`` is absent, JSON null, or not strictly
    of the type (a string is never a number, nor a fraction an integer; out of range is
    NULL, a timestamp's UTC offset too). ``offset_flag``: SQL of
    :func:`json_offset_out_of_range` computed already, else it is computed here.
    ``marker``: the batch's numbers a double cannot hold are strings so marked, each read as
    the number its text spells (see :mod:`~icefloe.ingest.exact_numbers`)."""
    assert not is_list(kind), "a list is typed element by element (nested_json)"
    t = f"json_type({r})"
    text = f"({r} ->> '$')"
    if marker is not None:
        t, text = marked_leaf(r, marker)
    if kind == "VARCHAR":
        value = f"CASE WHEN {t} = 'VARCHAR' THEN {text} END"
    elif kind == "JSON":
        whole = f"CAST({r} AS VARCHAR)"
        if marker is not None:
            whole = unmarked(whole, marker)
        value = f"CASE WHEN {t} <> 'NULL' THEN {whole} END"
    elif kind == "BOOLEAN":
        value = f"CASE WHEN {t} = 'BOOLEAN' THEN TRY_CAST({text} AS BOOLEAN) END"
    elif kind == "HUGEINT":
        # A JSON integer past 64 bits is typed DOUBLE, and its text kept as written.
        value = (
            f"CASE WHEN {t} IN {_INTEGER_JSON} OR ({t} = 'DOUBLE'"
            f" AND regexp_full_match({text}, '-?[0-9]+')) THEN TRY_CAST({text} AS HUGEINT) END"
        )
    elif is_integer(kind):
        value = f"CASE WHEN {t} IN {_INTEGER_JSON} THEN TRY_CAST({text} AS {kind}) END"
    elif kind in ("FLOAT", "DOUBLE"):
        value = f"CASE WHEN {t} IN {_NUMBER_JSON} THEN TRY_CAST({text} AS {kind}) END"
    elif kind.startswith("DECIMAL"):
        value = f"CASE WHEN {t} IN {_NUMBER_JSON} THEN {exact_decimal(text, kind)} END"
    elif kind in ("TIMESTAMP", "TIMESTAMPTZ"):
        ms = f"TRY_CAST({text} AS BIGINT)"
        bad_offset = offset_flag or offset_out_of_range(text)
        tz_value = (
            f"CASE WHEN {t} = 'VARCHAR' THEN"
            f" CASE WHEN NOT ({bad_offset}) THEN TRY_CAST({text} AS TIMESTAMPTZ) END"
            f" WHEN {t} IN {_INTEGER_JSON} AND {ms} BETWEEN {_EPOCH_MS_MIN} AND {_EPOCH_MS_MAX}"
            f" THEN make_timestamptz({ms} * 1000) END"
        )
        value = tz_value if kind == "TIMESTAMPTZ" else f"(({tz_value}) AT TIME ZONE 'UTC')"
    elif kind == "BLOB":
        value = f"CASE WHEN {t} = 'VARCHAR' THEN TRY(from_base64({text})) END"
    elif kind == "DATE":
        value = f"CASE WHEN {t} = 'VARCHAR' THEN {_strict_date(text)} END"
    elif kind == "TIME":
        value = f"CASE WHEN {t} = 'VARCHAR' THEN {_strict_time(text)} END"
    else:  # UUID: text forms
        value = f"CASE WHEN {t} = 'VARCHAR' THEN TRY_CAST({text} AS {kind}) END"
    return value


def _strict_date(text: str) -> str:
    """SQL of the date the text ``text`` spells, NULL unless it is a date alone."""
    return f"CASE WHEN regexp_full_match({text}, '{_DATE_TEXT}') THEN TRY_CAST({text} AS DATE) END"


def _strict_time(text: str) -> str:
    """SQL of the time of day the text ``text`` spells, NULL unless it is a time alone."""
    return f"CASE WHEN regexp_full_match({text}, '{_TIME_TEXT}') THEN TRY_CAST({text} AS TIME) END"


def sql_column(
    col: Column,
    *,
    source_type: str | None,
    max_value_bytes: int,
    max_json_depth: int | None,
    partition_source: bool = False,
    json_proven_standard: bool = False,
) -> ColumnSQL:
    """SQL over a typed raw column (CSV: VARCHAR; Parquet: its own type), or an absent one.
    A typed source must be of the column's type family (see :func:`accepts`): a Parquet
    INTEGER is not text, and a DOUBLE is not an integer, whatever TRY_CAST would make of it.
    ``json_proven_standard`` leaves out the search for NaN and trailing commas in JSON text,
    for a caller that has searched the whole column already; ``max_json_depth=None`` leaves
    out the depth bound, for a caller that checks the depth itself
    (:mod:`~icefloe.ingest.json_depth`)."""
    error = _outer_error(
        col,
        max_value_bytes=max_value_bytes,
        max_json_depth=max_json_depth,
        partition_source=partition_source,
        json_proven_standard=json_proven_standard,
    )
    if source_type is None:
        return ColumnSQL(
            column=col,
            value=f"CAST(NULL AS {_storage_type(col.type)})",
            present="false",
            error=error,
        )
    r = ident(col.name)
    kind = col.type
    source = source_type.upper()
    if not accepts(kind, source):
        return ColumnSQL(
            column=col,
            value=f"CAST(NULL AS {_storage_type(kind)})",
            present=f"({r} IS NOT NULL)",
            error=error,
        )
    offset = text_offset_out_of_range(r, kind, source)
    if offset is None:
        value = typed_leaf_value(r, kind, source)
        return ColumnSQL(column=col, value=value, present=f"({r} IS NOT NULL)", error=error)
    # A timestamp's offset out of range, flagged once below the value (a layer), for both the
    # value and the error code.
    flag = _offset_ident(col.name)
    return ColumnSQL(
        column=col,
        value=typed_leaf_value(r, kind, source, offset_flag=flag),
        present=f"({r} IS NOT NULL)",
        error=_outer_error(
            col,
            max_value_bytes=max_value_bytes,
            max_json_depth=max_json_depth,
            partition_source=partition_source,
            json_proven_standard=json_proven_standard,
            offset_flag=flag,
        ),
        layers=(((flag, offset),),),
    )


# BLOB as a type in a DuckDB type's name (``BLOB``, ``STRUCT(a BLOB)``, ``MAP(BLOB, INTEGER)``),
# not a field so named (``STRUCT(BLOB INTEGER)``).
_BLOB_IN_TYPE = re.compile(r"(?:^|[ (])BLOB(?=$|[,)\[])")


def typed_leaf_value(r: str, kind: str, source: str, *, offset_flag: str | None = None) -> str:
    """SQL of the value of the typed expression ``r`` (DuckDB type ``source``, which
    :func:`accepts` for ``kind``) as a column of type ``kind``: NULL when it does not convert,
    or when it is text ending in a UTC offset out of range. ``offset_flag``: SQL of
    :func:`text_offset_out_of_range` computed already, else it is computed here."""
    bad_offset = offset_flag or text_offset_out_of_range(r, kind, source)
    if bad_offset is not None and is_list(kind):
        # Parsed whole, each element through TIMESTAMPTZ: a TIMESTAMP[] cast drops offsets.
        depth = kind.count("[]")
        zoned = f"TRY_CAST({r} AS TIMESTAMPTZ{'[]' * depth})"
        if kind.rstrip("[]") == "TIMESTAMP":
            e = f"__u{depth}"
            utc = f"{e} AT TIME ZONE 'UTC'"
            for level in range(depth - 1, 0, -1):
                inner = f"__u{level}"
                utc = f"list_transform({inner}, lambda {e}: {utc})"
                e = inner
            zoned = f"list_transform({zoned}, lambda {e}: {utc})"
        return f"CASE WHEN NOT ({bad_offset}) THEN {zoned} END"
    if kind == "JSON":
        if source in ("VARCHAR", "JSON"):
            # (JSON: Arrow's JSON extension type, text DuckDB would parse unchecked)
            value = f"CASE WHEN json_valid({r}) THEN CAST({r} AS VARCHAR) END"
        elif _BLOB_IN_TYPE.search(source):
            # Bytes have no JSON form (DuckDB's would be its escaped text of them, a string
            # never sent): refused as bytes into a VARCHAR column are.
            value = "CAST(NULL AS VARCHAR)"
        else:
            value = f"CAST(to_json({r}) AS VARCHAR)"
    elif kind in ("TIMESTAMP", "TIMESTAMPTZ"):
        if source == "VARCHAR":
            ms = f"TRY_CAST({r} AS BIGINT)"
            tz_value = (
                f"CASE WHEN regexp_full_match({r}, '-?[0-9]+') THEN"
                f" CASE WHEN {ms} BETWEEN {_EPOCH_MS_MIN} AND {_EPOCH_MS_MAX}"
                f" THEN make_timestamptz({ms} * 1000) END"
                f" WHEN NOT ({bad_offset}) THEN TRY_CAST({r} AS TIMESTAMPTZ) END"
            )
        elif source.startswith("TIMESTAMP WITH TIME ZONE") or source == "TIMESTAMPTZ":
            tz_value = r
        else:
            tz_value = f"TRY_CAST({r} AS TIMESTAMP) AT TIME ZONE 'UTC'"
        value = tz_value if kind == "TIMESTAMPTZ" else f"(({tz_value}) AT TIME ZONE 'UTC')"
    elif kind == "VARCHAR":
        value = r if source == "VARCHAR" else f"TRY_CAST({r} AS VARCHAR)"
    elif kind == "TIME" and source == "TIME_NS":
        # Whole microseconds, the finer digits dropped as a timestamp's are (DuckDB's cast
        # rounds: 23:59:59.9999999 became 24:00:00).
        value = f"TIME '00:00:00' + to_microseconds(epoch_ns({r}) // 1000)"
    elif source == "VARCHAR":
        value = _text_value(r, kind)
    elif kind.startswith("DECIMAL"):
        # From an integer or a DECIMAL: NULL when the cast rounds (a larger scale's digits).
        cast = f"TRY_CAST({r} AS {kind})"
        value = f"CASE WHEN {cast} = {r} THEN {cast} END"
    else:
        value = f"TRY_CAST({r} AS {_storage_type(kind)})"
    return value


def _text_value(r: str, kind: str) -> str:
    """SQL of the text ``r`` as a ``kind`` (not VARCHAR, JSON or a time): a number, a boolean
    or a date only in the form JSON would give it (a number spelled as JSON spells it, true or
    false, a date alone), bytes as base64; other types as DuckDB parses them."""
    if is_integer(kind):
        return (
            f"CASE WHEN regexp_full_match({r}, '{_INTEGER_TEXT}') THEN TRY_CAST({r} AS {kind}) END"
        )
    if kind in ("FLOAT", "DOUBLE"):
        return (
            f"CASE WHEN regexp_full_match({r}, '{_NUMBER_TEXT}') THEN TRY_CAST({r} AS {kind}) END"
        )
    if kind.startswith("DECIMAL"):
        return (
            f"CASE WHEN regexp_full_match({r}, '{_NUMBER_TEXT}') THEN {exact_decimal(r, kind)} END"
        )
    if kind == "BOOLEAN":
        # In any case: spreadsheets export TRUE and FALSE.
        return f"CASE WHEN lower({r}) IN ('true', 'false') THEN lower({r}) = 'true' END"
    if kind == "DATE":
        return _strict_date(r)
    if kind == "TIME":
        return _strict_time(r)
    if kind == "BLOB":
        # Base64, as a JSON field's: DuckDB's cast reads escapes (text \xff is one byte).
        return f"TRY(from_base64({r}))"
    return f"TRY_CAST({r} AS {_storage_type(kind)})"


_INTEGER_SOURCES = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
)


def accepts(kind: str, source: str) -> bool:
    """Whether a typed source column (DuckDB's name of its type) may fill a column of type
    ``kind``: the same family, converted without guessing (range is still checked by value)."""
    if source == "VARCHAR":
        return True  # text is parsed as the type (CSV, or strings in Parquet)
    if is_integer(kind):
        # A DECIMAL of scale 0 holds integers only: DuckDB and Arrow carry HUGEINT so.
        whole = _DECIMAL.fullmatch(source)
        return source in _INTEGER_SOURCES or (whole is not None and whole.group(2) == "0")
    if kind in ("FLOAT", "DOUBLE"):
        return source in (*_INTEGER_SOURCES, "FLOAT", "DOUBLE") or source.startswith("DECIMAL")
    if kind.startswith("DECIMAL"):
        return source in _INTEGER_SOURCES or source.startswith("DECIMAL")
    if kind in ("TIMESTAMP", "TIMESTAMPTZ"):
        return source.startswith("TIMESTAMP") or source == "DATE"
    if kind == "JSON":
        return True  # any value has a JSON form
    if is_list(kind):
        return source.endswith("[]")
    if kind == "TIME":
        return source in ("TIME", "TIME_NS")  # polars and pandas hold times in nanoseconds
    return source == kind  # VARCHAR, BOOLEAN, DATE, UUID, BLOB


def _storage_type(kind: str) -> str:
    return "VARCHAR" if kind == "JSON" else kind
