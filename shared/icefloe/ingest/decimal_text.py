"""SQL of the exact DECIMAL a number's text spells: the value, or NULL when it does not fit
the type or has a digit but 0 past its scale (the caller refuses the row). Read from the
text alone, never through a double or DuckDB's cast of an exponent's form, neither of which
is exact (see :func:`exact_decimal`)."""

from __future__ import annotations

import re

_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def exact_decimal(text: str, kind: str) -> str:
    """SQL of the number spelled by the text ``text`` as a ``kind`` (a DECIMAL), NULL when it
    does not fit or has a digit but 0 past the scale: DuckDB's cast rounds (1.235 to 1.24,
    1.5 to 2 at a scale of 0), and a value is refused rather than altered, as an integer
    refuses 3.7. Whether a digit lies past the scale is read from the text (trailing zeros
    are none: 1.2300 fits a scale of 2); a number with none is the cast of its text without
    an exponent, which DuckDB reads exactly (NULL past the type's integer digits).

    ``text`` is JSON's form of a number: as sent, DuckDB's printing of a JSON integer or
    double (``1e21``, ``1e-7``, ``-0.0``), or CSV text. A number with an exponent is written
    without it first (:func:`_without_exponent`): DuckDB's cast of an exponent's form is not
    exact (``0.001234e4`` as 12.00 at a scale of 2, ``1.234e-44`` shifted back by 44 places
    as 0), nor takes a mantissa of more digits than the type (``12345678901234567800e-2``
    for a ``DECIMAL(20,2)``). Nor is a comparison as doubles a check: DuckDB's DECIMAL to
    DOUBLE cast is not correctly rounded (``-9553345535229718`` became
    ``-9553345535229716.0``), which refused values that fit."""
    decimal = _DECIMAL.fullmatch(kind)
    if decimal is None:
        return f"TRY_CAST({text} AS {kind})"
    scale = int(decimal.group(2))
    digits, point = _mantissa(text)
    significant = f"rtrim({digits}, '0')"
    # How many places after the point the last digit but 0 lies (0 or less: an integer).
    places = f"(length({significant}) - {point})"
    with_exponent = (
        f"CASE WHEN regexp_full_match({text}, '{_EXPONENT_TEXT}')"
        f" AND ({significant} = '' OR {places} <= {scale})"
        f" THEN TRY_CAST({_without_exponent(text)} AS {kind}) END"
    )
    plain = (
        f"CASE WHEN NOT regexp_matches({text}, '[.][0-9]{{{scale}}}[0-9]*[1-9]')"
        f" THEN TRY_CAST({text} AS {kind}) END"
    )
    return f"CASE WHEN regexp_matches({text}, '[eE]') THEN {with_exponent} ELSE {plain} END"


# A number with an exponent, as JSON spells it (and as DuckDB prints a double: 1e21, 1e-7).
_EXPONENT_TEXT = "-?[0-9]+([.][0-9]+)?[eE][-+]?[0-9]+"
# The most digits a DECIMAL holds.
_DECIMAL_DIGITS = 38


def _mantissa(text: str) -> tuple[str, str]:
    """SQL of the digits of the number the text ``text`` spells with an exponent (of
    :data:`_EXPONENT_TEXT`), those before its point and after, and of where the point lies
    once the exponent is applied: after that many of the digits (NULL for an exponent past
    64 bits; 0 or less: before them, past that many zeros)."""
    digits = f"regexp_replace({text}, '^-|[.]|[eE].*$', '', 'g')"
    exponent = f"TRY_CAST(regexp_extract({text}, '[eE]([-+]?[0-9]+)$', 1) AS BIGINT)"
    point = f"(length(regexp_extract({text}, '^-?([0-9]*)', 1)) + {exponent})"
    return digits, point


def _without_exponent(text: str) -> str:
    """SQL of the number the text ``text`` spells with an exponent (of :data:`_EXPONENT_TEXT`)
    written without one: its sign, its digits up to the last but 0 with the point placed
    among them, zeros before them or after them as it falls outside, and a 0 (1.234e-2 is
    ``0.012340``, 1.2e3 ``1200.0``); ``0`` for zero. NULL for a point more than a DECIMAL's
    digits past or before those digits, so that no text of ``1e999999999`` is built: such
    a number does not fit."""
    digits, point = _mantissa(text)
    significant = f"rtrim({digits}, '0')"
    padded = (
        f"repeat('0', 1 - {point}) || {significant} || repeat('0', {point} - length({significant}))"
    )
    whole = f"greatest({point}, 1)"
    sign = f"CASE WHEN starts_with({text}, '-') THEN '-' ELSE '' END"
    return (
        f"CASE WHEN {significant} = '' THEN '0'"
        f" WHEN {point} - length({significant}) <= {_DECIMAL_DIGITS}"
        f" AND length({significant}) - {point} <= {_DECIMAL_DIGITS}"
        f" THEN {sign} || left({padded}, {whole}) || '.' || substr({padded}, {whole} + 1) || '0'"
        " END"
    )
