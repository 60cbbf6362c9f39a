"""Poison isolation in queue ingestion: a crash is pinned on the messages that cause it."""

from __future__ import annotations

import math
import random

import pytest

from icefloe.errors import MetaStoreUnavailableError, TableNotFoundError
from icefloe.ingest.queue import isolate_crashes


class Attempts:
    """An attempt that fails whenever its group holds a poison item, recording what went
    through (every item of a successful attempt) and how many attempts were made."""

    def __init__(self, poison: set[int], error: Exception | None = None) -> None:
        self.poison = poison
        self.error = error
        self.through: list[int] = []
        self.calls = 0

    def __call__(self, group: list[int]) -> None:
        self.calls += 1
        if self.poison & set(group):
            raise self.error or OverflowError(f"poison in {len(group)} items")
        self.through.extend(group)


@pytest.mark.parametrize("seed", range(40))
def test_every_good_item_goes_through_once_and_only_the_poison_items_are_blamed(
    seed: int,
) -> None:
    # Given n items of which k crash any attempt that holds them
    rng = random.Random(seed)
    n = rng.randint(1, 300)
    poison = set(rng.sample(range(n), rng.randint(0, min(n, 4))))
    attempt = Attempts(poison)

    # When the crashes are isolated
    crashed = isolate_crashes(list(range(n)), attempt)

    # Then exactly the poison items are blamed, each with the error, and every other item went
    # through one successful attempt
    assert sorted(item for item, _ in crashed) == sorted(poison)
    assert all(isinstance(error, OverflowError) for _, error in crashed)
    assert sorted(attempt.through) == sorted(set(range(n)) - poison)
    # And it took about 2k*log2(n) attempts, not n
    bound = 1 + 2 * len(poison) * (math.ceil(math.log2(n)) + 1)
    assert attempt.calls <= bound


def test_a_clean_group_takes_one_attempt() -> None:
    attempt = Attempts(set())
    assert isolate_crashes(list(range(1000)), attempt) == []
    assert attempt.calls == 1 and attempt.through == list(range(1000))


@pytest.mark.parametrize(
    "error",
    [MetaStoreUnavailableError("meta store down"), OSError("disk full"), TableNotFoundError("x")],
    ids=["meta store down", "local disk", "no such table"],
)
def test_a_failure_of_the_system_or_of_the_whole_group_is_raised_at_once(
    error: Exception,
) -> None:
    # Given an attempt that fails for a reason no message causes
    attempt = Attempts({3}, error=error)

    # Then it is raised after one attempt, not blamed on messages
    with pytest.raises(type(error)):
        isolate_crashes(list(range(10)), attempt)
    assert attempt.calls == 1
