"""The EMR entry point's arguments, and the paths on which it refuses to start (no network,
no database, no Spark: the job itself runs against local Spark in
tests/integration/compaction)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from icefloe.compaction import CompactionManifest, CompactionResult, PartitionGroup
from icefloe.compaction.spark_job import PartitionOutcome
from icefloe.storage import LocalObjectStore

KEY = "events/jobs/compact-0123456789abcdef0123.json"
# Never connected to: every case here stops before the meta store is opened.
UNUSED_DSN = "postgresql://icefloe@127.0.0.1:9/unused"


def manifest(job_id: str = "compact-0123456789abcdef0123") -> CompactionManifest:
    return CompactionManifest(
        job_id=job_id,
        table="events",
        groups=(PartitionGroup("day=2026-05-01", (1, 2, 3), uuid.uuid4()),),
    )


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """A job's settings, with a local warehouse."""
    return {
        "ICEFLOE_HOME": str(tmp_path / "home"),
        "ICEFLOE_WAREHOUSE": str(tmp_path / "warehouse"),
        "ICEFLOE_DATABASE_URL": UNUSED_DSN,
    }


def test_the_manifest_key_is_parsed(compact_job: ModuleType) -> None:
    assert compact_job.parse_args(["--manifest", KEY]).manifest == KEY


def test_the_manifest_argument_is_required(
    compact_job: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        compact_job.parse_args([])
    assert exit_.value.code == 2
    assert "--manifest" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (f"s3://bucket/warehouse/{KEY}", "relative to ICEFLOE_WAREHOUSE"),
        (f"/{KEY}", "relative"),
        ("events/jobs/../../secrets.json", "'..'"),
        ("events/jobs/compact-1", "not a manifest key"),
    ],
    ids=["a URI", "an absolute key", "a key escaping the warehouse", "not a json file"],
)
def test_a_manifest_key_that_is_not_a_warehouse_key_is_a_usage_error(
    compact_job: ModuleType, capsys: pytest.CaptureFixture[str], value: str, words: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        compact_job.parse_args(["--manifest", value])
    assert exit_.value.code == 2
    assert words in capsys.readouterr().err


def test_a_missing_manifest_is_a_clear_error_and_exit_status_2(
    compact_job: ModuleType,
    environ: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a warehouse without the manifest
    # When the job starts
    status = compact_job.main(["--manifest", KEY], environ)

    # Then it refuses to start, naming where it looked, and prints no result
    assert status == compact_job.EXIT_CANNOT_START == 2
    (record,) = [r for r in caplog.records if r.name == "icefloe.compact_job"]
    assert record.levelname == "ERROR"
    assert f"no compaction manifest under {tmp_path / 'warehouse' / KEY}" in record.getMessage()
    assert capsys.readouterr().out == ""


def test_a_file_that_is_not_a_manifest_is_refused_with_exit_status_2(
    compact_job: ModuleType, environ: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    LocalObjectStore(Path(environ["ICEFLOE_WAREHOUSE"])).put(KEY, b"{not json")

    assert compact_job.main(["--manifest", KEY], environ) == 2
    assert "compaction manifest is not JSON" in caplog.text


def test_a_manifest_stored_under_another_jobs_key_is_refused_with_exit_status_2(
    compact_job: ModuleType, environ: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # A manifest copied by hand: its job record and output listings are under its own job id.
    other = manifest(job_id="compact-ffffffffffffffffffff")
    LocalObjectStore(Path(environ["ICEFLOE_WAREHOUSE"])).put(KEY, other.to_json().encode())

    assert compact_job.main(["--manifest", KEY], environ) == 2
    assert "compact-ffffffffffffffffffff" in caplog.text and other.key in caplog.text


def test_without_a_meta_store_the_job_refuses_to_start(
    compact_job: ModuleType, environ: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # Settings would fall back on an embedded Postgres: an empty database on EMR.
    del environ["ICEFLOE_DATABASE_URL"]
    LocalObjectStore(Path(environ["ICEFLOE_WAREHOUSE"])).put(KEY, manifest().to_json().encode())

    assert compact_job.main(["--manifest", KEY], environ) == 2
    assert "ICEFLOE_DATABASE_SECRET_ARN" in caplog.text
    assert not (Path(environ["ICEFLOE_HOME"]) / "postgres").exists()


def test_the_result_is_one_json_line_per_partition_and_a_summary(
    compact_job: ModuleType,
) -> None:
    result = CompactionResult(
        job_id="compact-1",
        table="events",
        partitions=(
            PartitionOutcome("day=2026-05-01", "committed", 7, 5, 1, 100, 100),
            PartitionOutcome("day=2026-05-02", "conflict", reason="file 9 is gone"),
        ),
    )

    lines = [json.loads(line) for line in compact_job.result_lines(result)]

    assert [line.get("partition") for line in lines] == ["day=2026-05-01", "day=2026-05-02", None]
    assert lines[0]["status"] == "committed" and lines[0]["snapshot_id"] == 7
    assert lines[1]["status"] == "conflict" and lines[1]["reason"] == "file 9 is gone"
    assert lines[2] == {
        "job_id": "compact-1",
        "table": "events",
        "partitions": 2,
        "committed": 1,
        "already_committed": 0,
        "claim_lost": 0,
        "conflict": 1,
    }
