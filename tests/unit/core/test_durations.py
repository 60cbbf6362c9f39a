"""Durations as the CLI and the janitor function take them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefloe.errors import InvalidInputError
from icefloe.janitor import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0s", timedelta(0)),
        ("90m", timedelta(minutes=90)),
        ("3d", timedelta(days=3)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2w", timedelta(weeks=2)),
        (" 36H ", timedelta(hours=36)),
        ("36500d", timedelta(days=36_500)),
    ],
)
def test_durations_parse(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["", "3", "d", "-1d", "1.5h", "3 days", "1h 30m", "soon", "99999999999999d", "\uff11d"]
)
def test_malformed_durations_are_refused_naming_the_text(text: str) -> None:
    with pytest.raises(InvalidInputError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["36501d", "5215w", "3000000d", "999999999d"])
def test_durations_past_100_years_are_refused(text: str) -> None:
    # A cut-off that far back is before the dates Postgres and Python hold (gc crashed on it)
    with pytest.raises(InvalidInputError, match=f"duration '{text}' is too long .at most 36500d"):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**9))
def test_format_and_parse_round_trip(seconds: int) -> None:
    value = timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value
