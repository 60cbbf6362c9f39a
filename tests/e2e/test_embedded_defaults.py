"""With no configuration at all, the CLI starts its own Postgres under ICEFLOE_HOME and shares it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def icefloe(home: Path, *argv: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEFLOE_")}
    env["ICEFLOE_HOME"] = str(home)
    return subprocess.Popen(
        [sys.executable, "-m", "icefloe.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


def test_embedded_meta_store_is_started_on_demand_shared_and_stopped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # Two processes at once: both succeed against one server, one of them applies the schema.
    outs = [finish(p) for p in [icefloe(home, "init"), icefloe(home, "init")]]
    assert sum("applied now: none" in out for out in outs) == 1
    finish(
        icefloe(home, "table", "create", "events", "--schema", "ts TIMESTAMP NOT NULL, event VARCHAR",
                "--partition-by", "day(ts)")
    )  # fmt: skip
    status = json.loads(finish(icefloe(home, "status", "--format", "json")))
    assert status[0]["table"] == "events" and status[0]["live_files"] == 0
    # The data survives a restart, and the last process out stopped the server.
    data_dir = home / "postgres"
    assert (data_dir / "PG_VERSION").exists()
    assert not (data_dir / "postmaster.pid").exists()
    assert finish(icefloe(home, "db", "stop")).strip() == "not running"
