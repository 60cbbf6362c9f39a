"""JSON numbers a double cannot hold exactly, kept as they were sent.

DuckDB's JSON reader holds a number with a fraction or an exponent as a double, and prints it
back from the double: ``1234567890123456.78`` is read as ``1234567890123456.8`` by a
``DECIMAL`` and stored so in a ``JSON`` value, ``-0`` as ``0``, ``1e-400`` as ``0.0``. (Integers
it keeps: 64 bits exactly, wider ones as their digits.) A number is one it changes
(:func:`inexact`) when it is ``-0`` (``-0.0`` is a double of its own), or when the double's
shortest digits, as DuckDB prints them, spell another number. A double holds every decimal of
at most 15 significant digits within its range, so the suspects are (:data:`INEXACT_SUSPECT`):

- more than 15 significant digits, with a fraction or an exponent;
- an exponent of 100 or more either way, or 200 zeros or more after the point (past a double's
  range, or into its subnormals, which hold fewer digits);
- ``-0``.

Most suspects are a double's own shortest digits (``0.30000000000000004``, as every JSON writer
prints a computed double), which DuckDB keeps. A batch's text is searched for the others
(:func:`file_holds_inexact`): a cheap RE2 pattern over the whole text first, which also
matches inside strings; then, in the lines it matched, every number of many digits is judged
at once in Arrow, and only the lines holding one that may be inexact are read in Python. A
batch holding none is read as ever. One holding some
is read from a copy (:func:`marked_copy`) in which each such number, outside strings, is a
JSON string of a marker and its text (``"icefloe-number-3f…#1234567890123456.78"``); the
conversion reads a marked string as the number its text spells (:func:`marked_leaf`): a
``JSON`` value holds the text as sent (:func:`unmarked`), a ``DECIMAL`` the exact decimal or a
refusal, a ``DOUBLE`` the nearest double, as for any number. The marker holds random bytes
drawn for the batch: no string sent can be taken for one.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import re
import secrets
import tempfile
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.errors import InvalidInputError
from icefloe.ingest.native_values import JsonNumber
from icefloe.ingest.strict_json import JSON_STRING, as_one_value, matches_anywhere
from icefloe.spec import TableSpec
from icefloe.spec.type_tree import Leaf, ListOf, MapOf, Struct, TypeNode
from icefloe.spec.types import type_tree

# A JSON number (RE2 and Python syntax), and its parts.
NUMBER = r"-?(?:0|[1-9][0-9]*)(?:[.][0-9]+)?(?:[eE][-+]?[0-9]+)?"
# More than 15 significant digits with a point or an exponent: a first digit that is not 0,
# then 15 more, a point among them or an exponent after them; or 16 after a point and zeros.
_MANY_INTEGER_DIGITS = (
    "[1-9](?:[0-9]{15,}[.eE]|"
    + "|".join(f"[0-9]{{{k}}}[.][0-9]{{{15 - k}}}" for k in range(15))
    + ")"
)
_MANY_FRACTION_DIGITS = "[.]0*[1-9][0-9]{15}"
_MANY_DIGITS = f"{_MANY_INTEGER_DIGITS}|{_MANY_FRACTION_DIGITS}"
# Past a double's normal range: an exponent of 100 or more, 200 zeros after the point.
_EXPONENT_PAST_99 = "[eE][-+]?0*[1-9][0-9]{2}"
_ZEROS_AFTER_POINT = "[.]0{200}"
_FAR_EXPONENT = f"[0-9]{_EXPONENT_PAST_99}|{_ZEROS_AFTER_POINT}"
# -0: not an exponent's sign (1e-05), nor a number's start (-0.5, -0e5); its neighbours may be
# on other lines (pretty-printed JSON).
_MINUS_ZERO = '(?:^|[^eE0-9"])-0(?:[^.0-9eE]|$)'
# Where a JSON number outside strings starts: at the text's start, or after whitespace, a comma,
# a colon or a bracket, and its sign. Text inside a string that spells part of a number mostly
# follows a letter or a digit (a hex id's "5c18e8598d" holds "18e8598", far past a double's
# exponents): only the number's first digit may follow these.
_NUMBER_START = r"(?:^|[\s,:\[])-?"
# What may be such a number in JSON text, from its first digit: many significant digits (from a
# first digit of 1 to 9, or after "0."), a far exponent, 200 zeros after the point; or -0. Also
# matches inside strings ('"at 0.12345678901234567"'), so a match is only a suspect; a string
# of digits alone ("12345678901234567890") is none.
INEXACT_SUSPECT = (
    f"{_NUMBER_START}(?:{_MANY_INTEGER_DIGITS}|0{_MANY_FRACTION_DIGITS}"
    f"|[0-9]+(?:[.][0-9]+)?{_EXPONENT_PAST_99}|[0-9]+{_ZEROS_AFTER_POINT})|{_MINUS_ZERO}"
)
# The same for Python's re, where a run of digits is tried from its start only: without the
# look-behind, each of a long run's digits would start a match scanning to its end
# (quadratic: a 32,000-digit string took 9 s).
_PY_MANY_DIGITS = f"(?<![0-9]){_MANY_INTEGER_DIGITS}|{_MANY_FRACTION_DIGITS}"
_PY_INEXACT_SUSPECT = f"{_PY_MANY_DIGITS}|{_FAR_EXPONENT}|{_MINUS_ZERO}"
_TOKEN_SUSPECT = re.compile(f"{_PY_MANY_DIGITS}|{_FAR_EXPONENT}")
_FRACTION_OR_EXPONENT = re.compile("[.eE]")
# A JSON number at the start (bytes), and one alone.
_NUMBER_AT = re.compile(NUMBER.encode())
# What splits a line into tokens each number is one of (RE2): outside strings a JSON number is
# delimited by whitespace, commas, colons and brackets.
_DELIMITERS = r"[\s,:\[\]{}]+"
_WHOLE_NUMBER = f"^{NUMBER}$"
_TOKEN_SUSPECT_RE2 = f"{_MANY_DIGITS}|{_FAR_EXPONENT}"
# A JSON string (kept), or a number (group 1).
_STRING_OR_NUMBER = re.compile(f"{JSON_STRING}|({NUMBER})".encode())
_SUSPECT = re.compile(_PY_INEXACT_SUSPECT.encode())
# What orjson reads inexactly in a message (RE2): such a number, or an integer past 64 bits
# (a float). Searched with RE2: Python's re took 3 ms for a message of 100 sample events,
# twice the rest of its insert.
_ORJSON_SUSPECT = f"{INEXACT_SUSPECT}|[0-9]{{19}}"
# What a number's text before a suspect may be.
_NUMBER_BYTES = frozenset(b"-.0123456789")
# The characters a marked number's text is made of, after its marker.
_NUMBER_CHARACTERS = "[-+.eE0-9]+"


def numbers_kept_exactly(spec: TableSpec) -> bool:
    """Whether a table could keep a number's digits where a double would lose them: it has a
    ``JSON`` or ``DECIMAL`` at any depth of a column, or keeps unknown fields (as JSON).
    Other types hold a double (or an integer, which DuckDB reads exactly) of any number."""
    return spec.extra_fields == "keep" or any(_exact(type_tree(c.type)) for c in spec.columns)


def _exact(node: TypeNode) -> bool:
    if isinstance(node, Leaf):
        return node.name == "JSON" or node.name.startswith("DECIMAL")
    if isinstance(node, Struct):
        return any(_exact(child) for _, child in node.fields)
    if isinstance(node, ListOf):
        return _exact(node.element)
    assert isinstance(node, MapOf)
    return _exact(node.value)


def inexact(token: str) -> bool:
    """Whether DuckDB's reader would not keep the value of the JSON number ``token``: ``-0``,
    or a fraction or exponent whose nearest double, printed back as its shortest digits (as
    DuckDB prints it), is another number (``1234567890123456.78``, ``1e-400``, ``1e400``).
    ``0.30000000000000004``, a double's own shortest digits as any JSON writer prints them,
    is kept; integers are."""
    if token == "-0":
        return True
    if not _FRACTION_OR_EXPONENT.search(token) or not _TOKEN_SUSPECT.search(token):
        return False  # an integer, or 15 significant digits at most within a double's range
    double = float(token)
    if not math.isfinite(double):
        return True
    try:
        return Decimal(repr(double)) != Decimal(token)
    except InvalidOperation:  # an exponent of 19 digits or more: 0 only if all its digits are
        # An exponent of 19 digits or more, which no Decimal holds: exact only as a 0.
        return token.startswith("-") or re.split("[eE]", token)[0].strip("-0.") != ""


def may_hold_inexact(data: bytes | mmap.mmap) -> bool:
    """Whether JSON text may hold a number a double cannot hold (False proves it holds none):
    RE2 over the bytes, in place. A suspect may be inside a string."""
    return bool(data) and matches_anywhere(data, INEXACT_SUSPECT)


def holds_inexact(data: bytes | mmap.mmap) -> bool:
    """Whether JSON text (whose strings are well formed) holds, outside its strings, a number
    DuckDB's reader would not keep (:func:`inexact`). The suspect search first; then, in the
    lines that hold a suspect, every number of many digits or a far exponent is judged at once
    in Arrow (most are a double's own shortest digits, ``0.30000000000000004``, which DuckDB
    keeps), and only a line holding one that may be inexact, or a ``-0``, is read in Python,
    where strings are told from numbers. (An RE2 pass for a suspect outside strings, from the
    text's start, ran at about 1 MB/s once a batch held one.)"""
    if not may_hold_inexact(data):
        return False
    lines = pc.split_pattern(as_one_value(data), b"\n").flatten()
    lines = lines.filter(pc.match_substring_regex(lines, INEXACT_SUSPECT))
    try:
        lines = lines.cast(pa.large_string())
    except pa.ArrowInvalid:  # not UTF-8: line by line (DuckDB refuses the batch anyway)
        return any(_inexact_in_line(line.as_py()) for line in lines)
    # Outside strings each number is a token of its own between JSON's delimiters; text in a
    # string is a number's token only where spaces or punctuation surround it, and then only
    # sends its line to the reading in Python.
    tokens = pc.split_pattern_regex(lines, _DELIMITERS)
    flat, line_of = pc.list_flatten(tokens), pc.list_parent_indices(tokens)
    numbers = pc.and_(
        pc.match_substring_regex(flat, _WHOLE_NUMBER),
        pc.match_substring_regex(flat, _TOKEN_SUSPECT_RE2),
    )
    flat, line_of = flat.filter(numbers), line_of.filter(numbers)
    doubtful = [n for n in _not_printed_back(pc.unique(flat)) if inexact(n)]
    holding = line_of.filter(pc.is_in(flat, pa.array(doubtful, pa.large_string())))
    minus_zero = pc.indices_nonzero(pc.match_substring_regex(lines, _MINUS_ZERO))
    rest = pc.unique(pa.concat_arrays([holding.cast(pa.uint64()), minus_zero.cast(pa.uint64())]))
    return any(_inexact_in_line(line.encode()) for line in lines.take(rest).to_pylist())


def _not_printed_back(numbers: pa.Array) -> list[str]:
    """The ``numbers`` (text) other than those Arrow prints back as they are from the double
    it reads them as (its shortest digits): a double's own digits, as JSON writers print
    them, are kept; the rest are judged one by one."""
    numbers = numbers.drop_null()
    try:
        printed = pc.cast(pc.cast(numbers, pa.float64()), numbers.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # not a number: "1.2.3"
        return list(numbers.to_pylist())
    differ = pc.invert(pc.equal(printed, numbers))
    return list(numbers.filter(differ).to_pylist())


def _inexact_in_line(line: bytes) -> bool:
    """Whether a line of JSON text holds a number of :func:`inexact` outside its strings. Each
    suspect is widened to the number it is part of and judged; the line is read token by
    token only for one that may be inexact (a line of JSON starts outside any string)."""
    for suspect in _SUSPECT.finditer(line):
        start = suspect.start()
        if line[start] in _NUMBER_BYTES:  # (not the -0 kind, which starts before its number)
            while start > 0 and line[start - 1] in _NUMBER_BYTES:
                start -= 1
            number = _NUMBER_AT.match(line, start)
            if number is not None and not inexact(number.group().decode()):
                continue
        return any(
            token.group(1) is not None and inexact(token.group(1).decode())
            for token in _STRING_OR_NUMBER.finditer(line)
        )
    return False


def file_holds_inexact(path: Path) -> bool:
    """:func:`holds_inexact` of a file's text, mapped rather than read."""
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return False
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as text:
            return holds_inexact(text)


def new_marker() -> str:
    """A marker for one batch's numbers: random, so no string sent spells it."""
    return f"icefloe-number-{secrets.token_hex(12)}#"


def marked_copy(path: Path, marker: str, *, directory: Path | None = None) -> Path:
    """A copy of the JSON file at ``path`` in which each number a double cannot hold exactly,
    outside strings, is a JSON string of ``marker`` and its text. Lines are copied as they
    are unless the suspect pattern matches them (a line of JSON starts outside any string:
    strings hold no raw newline). The caller deletes the copy."""
    prefix = b'"' + marker.encode()

    def mark(token: re.Match[bytes]) -> bytes:
        number = token.group(1)
        if number is None or not inexact(number.decode()):
            return token.group(0)
        return prefix + number + b'"'

    fd, name = tempfile.mkstemp(suffix=path.suffix, dir=directory)
    with os.fdopen(fd, "wb") as out, path.open("rb") as f:
        for line in f:
            out.write(_STRING_OR_NUMBER.sub(mark, line) if _SUSPECT.search(line) else line)
    return Path(name)


def unmarked(text: str, marker: str) -> str:
    """SQL of the JSON text ``text`` with each marked number written back as its text."""
    return f"regexp_replace({text}, '\"{marker}({_NUMBER_CHARACTERS})\"', '\\1', 'g')"


def marked_leaf(r: str, marker: str) -> tuple[str, str]:
    """SQL of the JSON type and the text of the JSON expression ``r`` of a batch marked with
    ``marker`` (see :func:`marked_copy`): a marked string is a number, of the type DuckDB
    would give it (``-0`` an integer, any other a double) and of the text sent (``-0`` as
    ``0``, as DuckDB reads it for a column of any type but ``JSON``)."""
    text = f"({r} ->> '$')"
    marked = f"(json_type({r}) = 'VARCHAR' AND starts_with({text}, '{marker}'))"
    number = f"substr({text}, {len(marker) + 1})"
    kind = (
        f"CASE WHEN {marked} THEN CASE WHEN {number} = '-0' THEN 'BIGINT' ELSE 'DOUBLE' END"
        f" ELSE json_type({r}) END"
    )
    value = (
        f"CASE WHEN {marked} THEN CASE WHEN {number} = '-0' THEN '0' ELSE {number} END"
        f" ELSE {text} END"
    )
    return kind, value


def orjson_suspects(texts: Sequence[str]) -> list[bool]:
    """For each JSON text, whether it may hold a number orjson reads inexactly: one RE2
    search over them all (compiling the pattern costs about as much as searching 100 KB)."""
    if not texts:
        return []
    values = pa.array([t.encode("utf-8", "surrogatepass") for t in texts], pa.binary())
    return [bool(m) for m in pc.match_substring_regex(values, _ORJSON_SUSPECT).to_pylist()]


def loads_exactly(text: str, parsed: object, *, suspect: bool | None = None) -> object:
    """``parsed``, orjson's value of the JSON text ``text``; or, when the text may hold a
    number orjson reads inexactly (one of :func:`inexact`, or an integer past 64 bits, which
    it reads as a float), the text parsed again with each such number kept: an integer as
    Python's, any other as a :class:`~icefloe.ingest.native_values.JsonNumber` of its text.
    ``suspect``: :func:`orjson_suspects`' answer for ``text``, if known."""
    if suspect is None:
        (suspect,) = orjson_suspects([text])
    if not suspect:
        return parsed
    try:
        return json.loads(text, parse_float=_float, parse_int=_integer)
    except RecursionError:  # deeper than Python's parser goes: refused for its depth anyway
        return parsed


def _float(token: str) -> object:
    if not inexact(token):
        return float(token)
    try:
        return JsonNumber(token)
    except InvalidOperation as e:
        shown = token if len(token) <= 40 else token[:40] + "..."
        raise InvalidInputError(
            f"message body holds the number {shown}, whose exponent no decimal holds"
        ) from e


def _integer(token: str) -> object:
    return JsonNumber(token) if token == "-0" else int(token)
