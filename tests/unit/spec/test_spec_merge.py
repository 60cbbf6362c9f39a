"""Merge modes: one unambiguous text grammar that round-trips through ``to_text``."""

from __future__ import annotations

import pytest

from icefloe.errors import InvalidNameError, SpecError
from icefloe.spec import (
    AggregateMode,
    AppendMode,
    CustomMode,
    MergeMode,
    ReplaceMode,
    parse_merge_mode,
)


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("append", AppendMode()),
        (" APPEND ", AppendMode()),
        ("replace(messageId)", ReplaceMode(("messageId",))),
        ("replace(a, b; version=ts)", ReplaceMode(("a", "b"), "ts")),
        ("Replace ( a ,b ;  VERSION = ts )", ReplaceMode(("a", "b"), "ts")),
        ("aggregate(day, event; n:sum, seen:max)", AggregateMode(("day", "event"), (("n", "sum"), ("seen", "max")))),
        ("aggregate(k; a:MIN, b:count, c:any)", AggregateMode(("k",), (("a", "min"), ("b", "count"), ("c", "any")))),
        ("sql:SELECT * FROM rows", CustomMode("SELECT * FROM rows")),
        ("SQL:  select 1  ", CustomMode("select 1")),
    ],
)  # fmt: skip
def test_parse_merge_mode_reads_each_form(text: str, mode: MergeMode) -> None:
    assert parse_merge_mode(text) == mode


@pytest.mark.parametrize(
    "mode",
    [
        AppendMode(),
        ReplaceMode(("messageId",)),
        ReplaceMode(("a", "b"), "ts"),
        AggregateMode(("k",), (("n", "sum"),)),
        AggregateMode(("a", "b"), (("n", "count"), ("x", "any"))),
        CustomMode("SELECT a, max(b) AS b FROM rows GROUP BY a; -- ; ( )"),
    ],
)
def test_to_text_round_trips_through_parse(mode: MergeMode) -> None:
    assert parse_merge_mode(mode.to_text()) == mode


def test_to_text_is_the_documented_spelling() -> None:
    assert ReplaceMode(("a", "b"), "ts").to_text() == "replace(a, b; version=ts)"
    assert AggregateMode(("k",), (("n", "sum"),)).to_text() == "aggregate(k; n:sum)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "cannot parse"),
        ("upsert(a)", "cannot parse"),
        ("replace", "cannot parse"),
        ("replace()", "at least one key"),
        ("replace(a, a)", "twice"),
        ("replace(a; ts)", "version=COL"),
        ("replace(a; order=ts)", "version=COL"),
        ("replace(a; version=a)", "also a key"),
        ("aggregate(a)", "COL:FN"),
        ("aggregate(a;)", "at least one COL:FN"),
        ("aggregate(a; n)", "COL:FN"),
        ("aggregate(a; n:avg)", "unknown function 'avg'"),
        ("aggregate(a; a:sum)", "also a group key"),
        ("aggregate(a; n:sum, n:max)", "twice"),
        ("sql:", "non-empty"),
        ("sql:   ", "non-empty"),
    ],
)
def test_malformed_merge_modes_raise_spec_error(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_merge_mode(text)


@pytest.mark.parametrize("text", ["replace(a; version=b; c)", "replace(_row_id)", "replace(a b)"])
def test_bad_names_in_merge_modes_raise_invalid_name_error(text: str) -> None:
    with pytest.raises(InvalidNameError, match="merge"):
        parse_merge_mode(text)
