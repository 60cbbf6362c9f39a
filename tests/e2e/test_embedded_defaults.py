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
    assert finish(icefloe(home, "db", "status")).startswith("not running")


def test_a_list_of_users_left_empty_by_a_killed_writer_is_repaired(tmp_path: Path) -> None:
    # Given a server that was set up and stopped, whose list of user processes a writer killed
    # mid-write left empty (the wheel rewrote it in place)
    home = tmp_path / "home"
    finish(icefloe(home, "init"))
    handles = home / "postgres" / ".handle_pids.json"
    handles.write_text("")
    # When any command runs, it works, and the last one out still stops the server
    status = json.loads(finish(icefloe(home, "status", "--format", "json")))
    assert status == []
    assert not (home / "postgres" / "postmaster.pid").exists()
    assert json.loads(handles.read_text()) == []
    # And db status works on such a list too
    handles.write_text("[")
    assert finish(icefloe(home, "db", "status")).startswith("not running")


def test_the_server_stops_after_its_last_live_user_even_when_a_user_was_killed(
    tmp_path: Path,
) -> None:
    # Given a process using the embedded server, killed outright (its exit hook never ran)
    home = tmp_path / "home"
    finish(icefloe(home, "init"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEFLOE_")}
    env["ICEFLOE_HOME"] = str(home)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from icefloe.settings import load_settings\n"
            "from icefloe.metastore.embedded import embedded_database_url\n"
            "embedded_database_url(load_settings().core.embedded_database_dir)\n"
            "print('ready', flush=True)\n"
            "time.sleep(600)\n",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    data_dir = home / "postgres"
    assert holder.pid in json.loads((data_dir / ".handle_pids.json").read_text())
    status = json.loads(finish(icefloe(home, "db", "status", "--format", "json")))
    assert status["running"] and holder.pid in status["users"]
    holder.kill()
    holder.wait()
    # db status works after the kill, and no longer counts the dead process
    status = json.loads(finish(icefloe(home, "db", "status", "--format", "json")))
    assert status["running"] and status["users"] == []
    # When the next command runs and exits
    finish(icefloe(home, "status"))
    # Then the dead user was dropped, and the server stopped with its last live user
    assert json.loads((data_dir / ".handle_pids.json").read_text()) == []
    assert not (data_dir / "postmaster.pid").exists()
    assert finish(icefloe(home, "db", "stop")).strip() == "not running"
    assert finish(icefloe(home, "db", "status")).startswith("not running")


# A process that starts (or joins) the embedded server, says so, and exits normally when its
# stdin ends, or never (``hold``: it waits to be killed).
USER = """
import sys, time
from icefloe.settings import load_settings
from icefloe.metastore.embedded import embedded_database_url
embedded_database_url(load_settings().core.embedded_database_dir)
print("ready", flush=True)
if sys.argv[1] == "hold":
    time.sleep(600)
sys.stdin.read()
"""


def user(home: Path, mode: str) -> subprocess.Popen[str]:
    """A process using the embedded server (see USER), once it is ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEFLOE_")}
    env["ICEFLOE_HOME"] = str(home)
    proc = subprocess.Popen(
        [sys.executable, "-c", USER, mode],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_the_last_live_user_stops_the_server_when_a_user_that_joined_after_it_was_killed(
    tmp_path: Path,
) -> None:
    # Given a server started by one process, and a second process that joined it and was
    # killed outright (its exit hook never ran; no start came after that to repair the list)
    home = tmp_path / "home"
    finish(icefloe(home, "init"))
    data_dir = home / "postgres"
    starter = user(home, "exit")
    try:
        killed = user(home, "hold")
        killed.kill()
        killed.wait()
        assert json.loads((data_dir / ".handle_pids.json").read_text()) == [
            starter.pid,
            killed.pid,
        ]
        assert (data_dir / "postmaster.pid").exists()

        # When the starter, the last live user, exits normally
        starter.communicate(input="", timeout=120)
        assert starter.returncode == 0

        # Then it stopped the server, leaving no user on the list
        assert not (data_dir / "postmaster.pid").exists()
        assert json.loads((data_dir / ".handle_pids.json").read_text()) == []
    finally:
        if starter.poll() is None:
            starter.kill()
        finish(icefloe(home, "db", "stop"))  # a server left running by a failure
    assert finish(icefloe(home, "db", "status")).startswith("not running")


def test_a_home_whose_path_holds_url_characters_runs_its_server(tmp_path: Path) -> None:
    # Given a home whose path a URL would read otherwise ('%41' is 'A', '=' and '#' break it)
    home = tmp_path / "pct%41a=b#1" / "home"
    # When commands run there, they reach the server started in that very directory
    finish(icefloe(home, "init"))
    status = json.loads(finish(icefloe(home, "status", "--format", "json")))
    assert status == []
    assert (home / "postgres" / "PG_VERSION").exists()
    assert not (tmp_path / "pctAa=b#1").exists()


@pytest.mark.parametrize("name", ["my lake", "it's", "a;b"])
def test_a_home_the_server_cannot_start_in_is_refused_naming_the_character(
    tmp_path: Path, name: str
) -> None:
    proc = icefloe(tmp_path / name / "home", "init")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "the embedded Postgres cannot run in" in err and "ICEFLOE_HOME" in err
    assert not (tmp_path / name / "home" / "postgres").exists()
