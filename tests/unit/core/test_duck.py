"""Every icefloe DuckDB connection keeps its home, extensions, secrets and spill files under the
temporary directory (``/tmp`` in Lambda, the only writable path there) and never downloads an
extension."""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb
import pytest

from icefloe import duck


def _setting(con: duckdb.DuckDBPyConnection, name: str) -> object:
    row = con.execute("SELECT current_setting(?)", [name]).fetchone()
    assert row is not None
    return row[0]


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # What TMPDIR does; Lambda has none, so tempfile answers /tmp there.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_home_extensions_secrets_and_spill_live_under_the_temporary_directory(
    temp_root: Path,
) -> None:
    con = duck.connect()
    try:
        home = temp_root / "icefloe-duckdb"
        assert _setting(con, "home_directory") == str(home)
        assert _setting(con, "extension_directory") == str(home / "extensions")
        assert _setting(con, "secret_directory") == str(home / "secrets")
        assert Path(str(_setting(con, "temp_directory"))).parent == home
        assert _setting(con, "TimeZone") == "UTC"
    finally:
        con.close()


def test_extensions_are_never_installed_or_loaded_on_their_own(temp_root: Path) -> None:
    con = duck.connect()
    try:
        assert _setting(con, "autoinstall_known_extensions") is False
        assert _setting(con, "autoload_known_extensions") is False
        # A function of an extension that is not loaded is unknown: DuckDB does not try to
        # fetch it (an attempted download fails with a different error, naming the URL).
        with pytest.raises(duckdb.CatalogException, match="excel extension"):
            con.execute("SELECT * FROM read_xlsx('missing.xlsx')")
        assert not (temp_root / "icefloe-duckdb" / "extensions").exists()
    finally:
        con.close()


def test_each_connection_spills_into_its_own_directory_removed_on_close(temp_root: Path) -> None:
    first, second = duck.connect(), duck.connect()
    spill_dirs = [Path(str(_setting(c, "temp_directory"))) for c in (first, second)]
    assert spill_dirs[0] != spill_dirs[1]
    first.execute("SET memory_limit = '40MB'")
    first.execute("SET threads = 1")
    (count,) = first.execute(
        "SELECT count(*) FROM (SELECT md5(i::VARCHAR) AS m FROM range(1500000) t(i) ORDER BY m)"
    ).fetchone() or (None,)
    assert count == 1_500_000
    assert spill_dirs[0].is_dir()  # the sort spilled here, not into the working directory
    first.close()
    second.close()
    assert not spill_dirs[0].exists()
    assert not (Path.cwd() / ".tmp").exists()
