"""The revision comparison's arithmetic: which figures it keeps and how it pairs them."""

from __future__ import annotations

import math

from benchmarks.revisions import compare, figures


def test_figures_are_the_numeric_leaves_by_path_without_runs_or_bookkeeping() -> None:
    document = {
        "benchmark": "query",
        "recorded_at": "2026-11-28T00:00:00+00:00",
        "machine": {"cpus": 2},
        "scale": "small",
        "ok": True,
        "latency": {"cold_ms": 12.5, "cold_ms_runs": [12.0, 13.0], "events": 300},
        "planning": [{"file_rows": 10, "median_ms": 3.5}, {"file_rows": 100, "median_ms": 30.0}],
        "labels": ["a", "b"],
    }
    assert dict(figures(document)) == {
        "latency.cold_ms": 12.5,
        "latency.events": 300.0,
        "planning.0.file_rows": 10.0,
        "planning.0.median_ms": 3.5,
        "planning.1.file_rows": 100.0,
        "planning.1.median_ms": 30.0,
    }


def test_the_ratio_is_the_median_of_pairwise_ratios_not_a_ratio_of_medians() -> None:
    # The machine slows down between pairs; head is 10% slower than base in every pair.
    pairs = [
        ({"ms": 11.0}, {"ms": 10.0}),
        ({"ms": 22.0}, {"ms": 20.0}),
        ({"ms": 44.0}, {"ms": 40.0}),
    ]
    table = compare(pairs)
    assert table["ms"] == {"head": 22.0, "base": 20.0, "ratio": 1.1}


def test_a_figure_missing_from_any_run_is_left_out_and_a_zero_base_has_no_ratio() -> None:
    pairs = [
        ({"a": 1.0, "b": 2.0, "z": 0.0}, {"a": 1.0, "z": 0.0}),
        ({"a": 3.0, "z": 0.0}, {"a": 1.5, "b": 2.0, "z": 0.0}),
    ]
    table = compare(pairs)
    assert set(table) == {"a", "z"}
    assert table["a"]["ratio"] == 1.5
    assert math.isnan(table["z"]["ratio"])
