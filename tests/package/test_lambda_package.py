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

TEMPLATE = load_template()
FUNCTIONS = TEMPLATE.functions()
build_layer = load_script("build_layer", "lambda")
package_report = load_script("package_report", "lambda")
PUBLISHER = "PublisherFunction"
PUBLISHER_LAYERS = ["PublisherCoreLayer", "IcebergLayer"]


def layers_of(logical_id: str) -> list[str]:
    """The layers a function carries: its own ``Layers``, else the Globals'."""
    props = TEMPLATE.resources[logical_id]["Properties"]
    layers = props.get("Layers", TEMPLATE.raw["Globals"]["Function"]["Layers"])
    return [TEMPLATE.logical_id_of(layer) for layer in layers]


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
    # Every function carries the core layer, the publisher its own: a size without it would
    # measure nothing.
    for size in sizes:
        expected = PUBLISHER_LAYERS if size.logical_id == PUBLISHER else ["CoreLayer"]
        assert list(size.layer_bytes) == expected, report
    # What the publisher would weigh with CoreLayer itself (why it has a slimmer core)
    (publisher,) = [s for s in sizes if s.logical_id == PUBLISHER]
    core = next(s.layer_bytes["CoreLayer"] for s in sizes if "CoreLayer" in s.layer_bytes)
    with_core = publisher.code_bytes + core + publisher.layer_bytes["IcebergLayer"]
    print(f"{PUBLISHER} with CoreLayer instead: {with_core / 2**20:.1f} MiB")


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
    layers = [build_dir / layer / "python" for layer in layers_of(logical_id)]
    result = _lambda_python(code, path=[build_dir / logical_id, *layers], cwd=tmp_path)
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


# -- the publisher's layers ---------------------------------------------------------------------


def _distributions(site: Path) -> dict[str, str]:
    """Canonical name -> version of each distribution installed under ``site``."""
    from importlib.metadata import distributions

    return {
        build_layer.canonical_name(d.metadata["Name"]): d.version
        for d in distributions(path=[str(site)])
    }


def test_the_publisher_layers_hold_pyiceberg_beside_a_core_without_httpfs(build_dir: Path) -> None:
    from packaging.requirements import Requirement

    core, iceberg = (build_dir / layer / "python" for layer in PUBLISHER_LAYERS)
    core_dists, iceberg_dists = _distributions(core), _distributions(iceberg)
    # No distribution in both (one would shadow the other in /opt/python), none of the
    # full core's missing but httpfs, and no SQL catalog
    assert not set(core_dists) & set(iceberg_dists)
    full = _distributions(build_dir / "CoreLayer" / "python")
    assert set(full) - set(core_dists) == {"duckdb-extension-httpfs"}
    assert {name: full[name] for name in core_dists} == core_dists  # the same versions
    assert not (core / "duckdb_extension_httpfs").exists()
    assert "sqlalchemy" not in iceberg_dists and "pyiceberg" in iceberg_dists
    kept_models = {p.name for p in (core / "botocore" / "data").iterdir() if p.is_dir()}
    assert kept_models == build_layer.PUBLISHER_BOTOCORE_SERVICES
    # Every requirement of what the iceberg layer holds is met by the two layers, but for
    # what publication never imports (pruned on purpose)
    present = {**core_dists, **iceberg_dists}
    env = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}  # fmt: skip
    from importlib.metadata import distributions

    unmet = []
    for dist in distributions(path=[str(iceberg)]):
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(env):
                continue
            name = build_layer.canonical_name(requirement.name)
            if name in build_layer.ICEBERG_PRUNED_DISTRIBUTIONS:
                assert name not in present, name
                continue
            if name not in present or not requirement.specifier.contains(
                present[name], prereleases=True
            ):
                unmet.append(f"{dist.metadata['Name']} needs {text}, has {present.get(name)}")
    assert not unmet, unmet
    for layer in ("publisher-core", "iceberg"):
        site = core if layer == "publisher-core" else iceberg
        leftovers = [
            str(p.relative_to(site))
            for p in site.rglob("*")
            if build_layer.is_pruned(str(p.relative_to(site)), layer=layer)
        ]
        assert not leftovers, leftovers[:10]


@needs_python312
def test_the_publisher_layers_open_a_glue_catalog_and_write_iceberg_metadata(
    build_dir: Path, tmp_path: Path
) -> None:
    # What a pass needs once imported: pyiceberg's Glue catalog (its boto3 client from the
    # kept model), the compiled pieces pyiceberg imports (zstandard's C backend, pyroaring,
    # pydantic-core, mmh3 for bucket transforms), pyarrow reading a footer, and an Iceberg
    # table written with them (a SQL-free in-memory catalog is not shipped: a table's metadata
    # is written and read back through pyiceberg's own serializers instead).
    code = textwrap.dedent("""
        import boto3, mmh3, pyroaring, zstandard, pyarrow as pa, pyarrow.parquet as pq
        from pyiceberg.catalog.glue import GlueCatalog
        from pyiceberg.schema import Schema
        from pyiceberg.types import NestedField, LongType
        from pyiceberg.table.metadata import new_table_metadata
        from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
        from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
        from pyiceberg.serializers import FromByteStream
        from icefloe.iceberg.glue import glue_catalog
        from icefloe.aws.functions import publisher
        catalog = glue_catalog(warehouse="s3://b/wh/iceberg", region="us-east-1")
        assert isinstance(catalog, GlueCatalog)
        assert zstandard.backend == "cext", zstandard.backend
        data = zstandard.ZstdCompressor().compress(b"x" * 1000)
        assert zstandard.ZstdDecompressor().decompress(data) == b"x" * 1000
        assert len(pyroaring.BitMap([1, 2, 3])) == 3 and mmh3.hash(b"a") is not None
        schema = Schema(NestedField(1, "n", LongType(), required=False))
        metadata = new_table_metadata(
            schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "s3://b/t", {}
        )
        import io
        again = FromByteStream.table_metadata(io.BytesIO(metadata.model_dump_json().encode()))
        assert again.schemas[0].fields[0].name == "n"
        pq.write_table(pa.table({"n": [1, 2]}), "f.parquet")
        assert pq.read_metadata("f.parquet").num_rows == 2
        print("ok")
    """)
    layers = [build_dir / layer / "python" for layer in PUBLISHER_LAYERS]
    result = _lambda_python(code, path=[build_dir / PUBLISHER, *layers], cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


# -- the layer builder's publisher parts, without pip --------------------------------------------


def test_the_iceberg_layer_takes_pyiceberg_as_the_extra_pins_it_without_its_sql_catalog() -> None:
    metadata = (
        "Name: icefloe\n"
        'Requires-Dist: duckdb-extension-iceberg==1.5.5; extra == "iceberg"\n'
        'Requires-Dist: pyiceberg[sql-sqlite]==0.12.0; extra == "iceberg"\n'
        'Requires-Dist: icefloe[iceberg]; extra == "dev"\n'
    )
    assert build_layer.iceberg_requirement(metadata) == "pyiceberg==0.12.0"
    with pytest.raises(build_layer.LayerBuildError, match="names no pyiceberg"):
        build_layer.iceberg_requirement("Name: icefloe\n")
    report = {"install": [{"metadata": {"name": "Typing_Extensions", "version": "4.16.0"}},
                          {"metadata": {"name": "icefloe", "version": "0.1.0"}}]}  # fmt: skip
    assert build_layer.core_constraints(report) == {"typing-extensions": "4.16.0"}


def test_a_distribution_is_removed_by_its_record(tmp_path: Path) -> None:
    site = tmp_path / "python"
    for relative in ("rich/__init__.py", "rich/console.py", "pyiceberg/__init__.py"):
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text("x")
    for name, files in (("rich", ["rich/__init__.py", "rich/console.py"]),
                        ("pyiceberg", ["pyiceberg/__init__.py"])):  # fmt: skip
        dist_info = site / f"{name}-1.0.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Name: {name}\nVersion: 1.0\n\nbody: Name: x\n")
        (dist_info / "RECORD").write_text("".join(f"{f},sha256=x,1\n" for f in files))
    found = build_layer.installed_distributions(site)
    assert set(found) == {"rich", "pyiceberg"}
    assert build_layer.remove_distribution(site, found["rich"]) > 0
    assert not (site / "rich").exists() and not (site / "rich-1.0.dist-info").exists()
    assert (site / "pyiceberg" / "__init__.py").is_file()


def test_the_publisher_core_prunes_httpfs_and_keeps_glues_model(tmp_path: Path) -> None:
    for relative in ("duckdb_extension_httpfs/extensions/httpfs.duckdb_extension",
                     "duckdb/__init__.py", "botocore/data/glue/2017-03-31/service-2.json.gz",
                     "botocore/data/s3/2006-03-01/service-2.json.gz",
                     "botocore/data/ec2/2016-11-15/service-2.json.gz"):  # fmt: skip
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("x")
    build_layer.prune(tmp_path, layer="publisher-core")
    assert not (tmp_path / "duckdb_extension_httpfs").exists()
    assert (tmp_path / "duckdb" / "__init__.py").is_file()
    models = {p.name for p in (tmp_path / "botocore" / "data").iterdir()}
    assert models == {"glue", "s3"}


def test_the_iceberg_layers_dry_run_resolves_the_core_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--output", str(tmp_path), "--layer", "iceberg", "--dry-run", "--no-bytecode"]
    assert build_layer.main(argv) == 0
    wheel, report, install = capsys.readouterr().out.splitlines()
    assert " pip wheel " in wheel
    assert "--dry-run" in report and "--report" in report and "[lambda]" in report
    assert "--constraint" in install and "--target" in install
