"""The deployable package: a real ``sam build`` (no Docker), each function's unzipped size with
its layers against Lambda's limit, and every handler imported by python3.12 from nothing but
what was built, as Lambda would (``/opt/python`` and the function's code on the path).

The build itself needs no python3.12: the layer is manylinux wheels fetched for CPython 3.12 by
any pip, and the functions have no requirements of their own. Importing the built package does;
where no python3.12 runs, those tests skip and say so. The SAM CLI comes from ``.venv-sam``
(``make validate`` installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from support.infra_scripts import load_script
from support.template import REPO_ROOT, load_template

FUNCTIONS = load_template().functions()
build_layer = load_script("build_layer", "lambda")
package_report = load_script("package_report", "lambda")


PYTHON312 = build_layer.find_python("3.12")
# sam build downloads the layer's wheels (about 100 MB with an empty pip cache): more than the
# suite's 300 s per test may be needed on a slow link.
pytestmark = pytest.mark.timeout(1200)
needs_python312 = pytest.mark.skipif(
    PYTHON312 is None,
    reason="no python3.12 on PATH (nor under pyenv): the built Lambda package is measured, but"
    " its handlers are not imported under the functions' Python on this machine",
)


def _sam() -> str:
    for candidate in (REPO_ROOT / ".venv-sam" / "bin" / "sam", shutil.which("sam")):
        if candidate is not None and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("no SAM CLI: run `make validate` (it installs one into .venv-sam)")


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sam") / "build"
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0"}
    result = subprocess.run(
        [_sam(), "build", "--template-file", "template.yaml", "--build-dir", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return out


def _lambda_python(code: str, *, path: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` under python3.12 seeing only ``path`` (``-S``: not even the interpreter's
    own site-packages, which could hide a package missing from the layer), with no HOME and a
    fake role's credentials, as in a Lambda container."""
    assert PYTHON312 is not None
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join(str(p) for p in path),
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "3008",
        "POWERTOOLS_SERVICE_NAME": "icefloe-package-test",
    }
    return subprocess.run(
        [PYTHON312, "-S", "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def test_every_function_with_its_layers_fits_lambdas_unzipped_limit(build_dir: Path) -> None:
    sizes = package_report.measure(template=REPO_ROOT / "template.yaml", build_dir=build_dir)
    assert {s.logical_id for s in sizes} == set(FUNCTIONS)
    report = "\n".join(s.line() for s in sizes)
    print(report)  # shown with -s; the same lines `make package` prints
    assert all(s.fits for s in sizes), report
    # Every function carries the core layer: a size without it would measure nothing.
    assert all("CoreLayer" in s.layer_bytes for s in sizes), report


@needs_python312
def test_the_layer_ships_python312_bytecode(build_dir: Path) -> None:
    # sam build finds python3.12 as this test does; without .pyc files every cold start would
    # compile its imports (/opt is read-only).
    site = build_dir / "CoreLayer" / "python"
    for package in ("icefloe", "pyarrow", "duckdb", "boto3", "aws_lambda_powertools"):
        assert (site / package / "__pycache__" / "__init__.cpython-312.pyc").is_file(), package


def test_the_layer_holds_icefloe_with_its_migrations_and_nothing_pruned(build_dir: Path) -> None:
    site = build_dir / "CoreLayer" / "python"
    assert (site / "icefloe" / "metastore" / "migrations" / "0001_initial.sql").is_file()
    assert (site / "duckdb_extension_httpfs").is_dir()
    kept_models = {p.name for p in (site / "botocore" / "data").iterdir() if p.is_dir()}
    assert kept_models == build_layer.BOTOCORE_SERVICES
    leftovers = [
        str(p.relative_to(site))
        for p in site.rglob("*")
        if build_layer.is_pruned(str(p.relative_to(site)))
    ]
    assert not leftovers, leftovers[:10]


@needs_python312
@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_every_handler_imports_from_the_built_package_alone(
    build_dir: Path, logical_id: str, tmp_path: Path
) -> None:
    function = FUNCTIONS[logical_id]
    module, _, handler = function.handler.rpartition(".")
    code = textwrap.dedent(f"""
        import sys, importlib
        module = importlib.import_module({module!r})
        assert callable(getattr(module, {handler!r})), "no handler {function.handler}"
        outside = [
            name for name, m in sys.modules.items()
            if getattr(m, "__file__", None) and "site-packages" in m.__file__
        ]
        assert not outside, outside
        print("ok")
    """)
    result = _lambda_python(
        code, path=[build_dir / logical_id, build_dir / "CoreLayer" / "python"], cwd=tmp_path
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


@needs_python312
def test_the_layer_reads_and_writes_parquet_through_duckdb_and_pyarrow(
    build_dir: Path, tmp_path: Path
) -> None:
    # What the functions do once imported: AWS clients for every kept model, pyarrow writing
    # Parquet, DuckDB (home and spill under /tmp) loading httpfs from the package and reading it
    # back, psycopg's compiled binding.
    code = textwrap.dedent(f"""
        import boto3, psycopg, pyarrow as pa, pyarrow.parquet as pq, pyarrow.fs
        from icefloe import duck
        from icefloe.query.s3_access import httpfs_extension_path
        for service in {sorted(build_layer.BOTOCORE_SERVICES)!r}:
            boto3.client(service, region_name="us-east-1")
        pyarrow.fs.S3FileSystem(region="us-east-1")
        pq.write_table(pa.table({{"n": [1, 2, 3]}}), "events.parquet")
        con = duck.connect(threads=1, memory_limit="256MB")
        con.execute(f"LOAD '{{httpfs_extension_path()}}'")
        (total,) = con.execute("SELECT sum(n) FROM 'events.parquet'").fetchone()
        home = con.execute("SELECT current_setting('home_directory')").fetchone()[0]
        assert total == 6, total
        assert psycopg.pq.__impl__ == "binary", psycopg.pq.__impl__
        print(home)
    """)
    result = _lambda_python(code, path=[build_dir / "CoreLayer" / "python"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("icefloe-duckdb"), result.stdout
