"""Name rules: table and column names are safe in S3 keys, Hive paths and SQL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefloe.errors import InvalidNameError
from icefloe.spec import SYSTEM_COLUMNS, validate_column_name, validate_table_name

NASTY_NAMES = [
    "",
    " ",
    "../etc",
    "..",
    ".",
    "events/../x",
    "a/b",
    "a\\b",
    "a;drop table x",
    'a"b',
    "a'b",
    "a b",
    "a-b",
    "a--b",
    "a\x00b",
    "a\nb",
    "events\n",
    "évents",
    "\u0435vents",  # Cyrillic "e"
    "\uff45vents",  # full-width "e"
    "x" * 64,
    "1abc",
    "a.b",
    "a%2Fb",
    "a=b",
    "*",
]

# Characters that must never appear in a name: separators, quoting, comments, control characters.
FORBIDDEN_CHARS = ["/", "\\", ".", '"', "'", ";", "-", " ", "\x00", "\t", "\n", "=", "%", "`", "*"]


@pytest.mark.parametrize("name", NASTY_NAMES)
def test_table_name_refuses_traversal_quoting_and_lookalikes(name: str) -> None:
    with pytest.raises(InvalidNameError, match="table name"):
        validate_table_name(name)


@pytest.mark.parametrize("name", NASTY_NAMES)
def test_column_name_refuses_traversal_quoting_and_lookalikes(name: str) -> None:
    with pytest.raises(InvalidNameError, match="column name"):
        validate_column_name(name)


@settings(derandomize=True, max_examples=300)
@given(
    prefix=st.text(alphabet="abcxyz_0123", max_size=10),
    bad=st.sampled_from(FORBIDDEN_CHARS),
    suffix=st.text(max_size=10),
)
def test_any_name_containing_a_forbidden_character_is_refused(
    prefix: str, bad: str, suffix: str
) -> None:
    # Given a name with one forbidden character anywhere in it
    name = "a" + prefix + bad + suffix
    # When / then: neither a table nor a column may take it
    with pytest.raises(InvalidNameError):
        validate_table_name(name)
    with pytest.raises(InvalidNameError):
        validate_column_name(name)


@settings(derandomize=True, max_examples=300)
@given(name=st.text(max_size=70))
def test_accepted_names_are_plain_ascii_identifiers(name: str) -> None:
    # Given any text; when it is accepted as a column name, then it is a plain identifier
    try:
        validate_column_name(name)
    except InvalidNameError:
        return
    assert name.isascii() and name.replace("_", "").isalnum() and name[0].isalpha()
    assert 1 <= len(name) <= 63


@pytest.mark.parametrize("name", ["events", "e", "page_views_2", "a" * 63])
def test_table_name_accepts_lower_case_identifiers(name: str) -> None:
    assert validate_table_name(name) == name


@pytest.mark.parametrize("name", ["Events", "eventS"])
def test_table_name_refuses_upper_case(name: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_table_name(name)


@pytest.mark.parametrize("name", ["messageId", "ts", "user_id", "A1", "x" * 63])
def test_column_name_accepts_mixed_case_identifiers(name: str) -> None:
    assert validate_column_name(name) == name


@pytest.mark.parametrize("name", ["_row_id", "_ROW_ID", "_Row_Id"])
def test_column_name_refuses_system_column_names_in_any_case(name: str) -> None:
    assert SYSTEM_COLUMNS == ("_row_id",)
    with pytest.raises(InvalidNameError, match="reserved"):
        validate_column_name(name)


def test_column_name_explains_leading_underscore_is_reserved() -> None:
    with pytest.raises(InvalidNameError, match="reserved for system columns"):
        validate_column_name("_private")


@pytest.mark.parametrize("value", [None, 3, b"events", ["events"]])
def test_non_string_names_are_refused(value: object) -> None:
    with pytest.raises(InvalidNameError):
        validate_table_name(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidNameError):
        validate_column_name(value)  # type: ignore[arg-type]


def test_error_message_truncates_a_long_offending_value() -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_table_name("x" * 500)
    assert len(str(info.value)) < 250
