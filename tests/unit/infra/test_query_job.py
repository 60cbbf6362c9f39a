"""The big-scan query job's entry point: its argument, and the paths on which it refuses to
start (no network, no database, no Spark: the job itself runs against local Spark in
tests/integration/test_emr_query.py)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from icefloe.storage import LocalObjectStore

KEY = "events/jobs/query-0123456789abcdef0123.json"
UNUSED_DSN = "postgresql://icefloe@127.0.0.1:9/unused"  # every case stops before connecting


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    return {
        "ICEFLOE_HOME": str(tmp_path / "home"),
        "ICEFLOE_WAREHOUSE": str(tmp_path / "warehouse"),
        "ICEFLOE_DATABASE_URL": UNUSED_DSN,
    }


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("events/jobs/query-1", "not a request key"),
        ("/" + KEY, "object key"),
        ("events/../x.json", "object key"),
        ("s3://bucket/warehouse/" + KEY, "relative to ICEFLOE_WAREHOUSE"),
    ],
)
def test_a_request_key_that_is_not_a_warehouse_json_key_is_a_usage_error(
    query_job: ModuleType, capsys: pytest.CaptureFixture[str], value: str, words: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        query_job.parse_args(["--request", value])
    assert exit_.value.code == 2
    assert words in capsys.readouterr().err


def test_a_missing_request_is_exit_status_2_naming_where_it_looked(
    query_job: ModuleType, environ: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    assert query_job.main(["--request", KEY], environ) == 2
    assert "no query request under" in caplog.text and KEY in caplog.text


def test_a_request_stored_under_another_key_is_refused(
    query_job: ModuleType,
    environ: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A request copied by hand: its job record names the key it was written under.
    objects = LocalObjectStore(tmp_path / "warehouse")
    objects.put(
        KEY,
        b'{"job_id": "query-other", "sql": "SELECT 1 FROM events",'
        b' "snapshots": {"events": 3}, "result_uri": "/tmp/r"}',
    )
    assert query_job.main(["--request", KEY], environ) == 2
    assert "query-other" in caplog.text


def test_without_a_meta_store_the_job_does_not_start(
    query_job: ModuleType, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {"ICEFLOE_HOME": str(tmp_path), "ICEFLOE_WAREHOUSE": str(tmp_path / "w")}
    assert query_job.main(["--request", KEY], environ) == 2
    assert "no meta store configured" in caplog.text
