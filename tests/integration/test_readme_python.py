"""The README's Python example runs as written, against a fresh lake (its own ICEFLOE_HOME
and meta store schema), and does what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

import icefloe

pytestmark = pytest.mark.integration


def readme_python(repo_root: Path) -> str:
    text = (repo_root / "README.md").read_text()
    section = text.split("## Using it from Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's Python section has no python block"
    return match.group(1)


def test_the_readme_python_example_runs_as_written(
    repo_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    postgres_dsn: str,
    schema_name: str,
) -> None:
    monkeypatch.setenv("ICEFLOE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ICEFLOE_WAREHOUSE", raising=False)
    # The run's Postgres stands in for the embedded one the example would start.
    monkeypatch.setenv("ICEFLOE_DATABASE_URL", postgres_dsn)
    monkeypatch.setenv("ICEFLOE_DATABASE_SCHEMA", schema_name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(readme_python(repo_root), "README.md", "exec"), {})
    printed = out.getvalue()
    assert "page: string" in printed and "n: int64" in printed  # the pyarrow Table
    assert '["/","/docs","/pricing"]' in printed.replace(" ", "").replace("\n", "")
    assert printed.strip().endswith("delete")
    # And the lake it left behind holds exactly the two rows of u1
    with icefloe.connect() as lake:
        users = lake.query("SELECT user_id, count(*) AS n FROM clicks GROUP BY 1").to_pylist()
        assert users == [{"user_id": "u1", "n": 2}]
