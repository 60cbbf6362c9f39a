"""EMR job settings from the orchestrator's environment."""

from __future__ import annotations

import pytest

from icefloe.compaction.emr import EmrJobConfig
from icefloe.errors import ConfigError

BASE = {
    "ICEFLOE_EMR_APPLICATION_ID": "app",
    "ICEFLOE_EMR_JOB_ROLE_ARN": "arn:aws:iam::123456789012:role/job",
    "ICEFLOE_EMR_ENTRY_POINT": "s3://a/compact_job.py",
    "ICEFLOE_EMR_ENVIRONMENT_ARCHIVE": "s3://a/env.tar.gz",
}


def test_no_application_means_no_heavy_compaction() -> None:
    assert EmrJobConfig.from_env({}) is None


def test_a_complete_environment_gives_the_config() -> None:
    config = EmrJobConfig.from_env({**BASE, "ICEFLOE_EMR_JOB_TIMEOUT_MINUTES": "120"})
    assert config is not None and config.job_timeout_minutes == 120


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ICEFLOE_EMR_ENTRY_POINT": ""}, "ICEFLOE_EMR_ENTRY_POINT is not"),
        ({"ICEFLOE_EMR_JOB_TIMEOUT_MINUTES": "soon"}, "not a positive integer"),
        ({"ICEFLOE_EMR_JOB_TIMEOUT_MINUTES": "360"}, "must stay below the compaction lease"),
    ],
)
def test_a_bad_environment_is_refused_naming_the_variable(
    change: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        EmrJobConfig.from_env({**BASE, **change})
