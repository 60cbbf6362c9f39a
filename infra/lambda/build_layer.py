"""Build a Lambda layer: icefloe and its runtime dependencies for python3.12 on x86_64.

    python infra/lambda/build_layer.py --output DIR [--layer core|publisher-core|iceberg]
        [--dry-run]

``sam build`` runs this through the Makefile's ``build-<Layer>`` targets with ``DIR`` set to
the layer's artifacts directory; it writes ``DIR/python/`` (what Lambda puts on ``sys.path``
from ``/opt/python``). Three layers (:data:`LAYERS`):

- ``core`` (``CoreLayer``, every function but the publisher): the steps below;
- ``publisher-core`` (``PublisherCoreLayer``): the same, without DuckDB's httpfs extension
  (only queries, merges and deletes load it) and with Glue's botocore model;
- ``iceberg`` (``IcebergLayer``, beside ``PublisherCoreLayer``): pyiceberg at the version
  pyproject's ``iceberg`` extra pins, without that extra's SQL catalog (SQLAlchemy) and with
  only the dependencies the core lacks, resolved against the core's own versions (pip's
  resolution of the core is read with ``--dry-run --report`` and given as constraints), less
  what the Glue publication never imports (:data:`ICEBERG_PRUNED_DISTRIBUTIONS`).

No Docker and no python3.12 are needed for the layer itself:

1. builds icefloe as a wheel (``pip wheel --no-deps .``);
2. installs that wheel with its ``lambda`` extra as manylinux x86_64 wheels for CPython 3.12
   (``pip install --platform ... --only-binary=:all: --target``): the Lambda python3.12
   runtime is Amazon Linux 2023 (glibc 2.34), where manylinux2014 and manylinux_2_28 wheels run;
3. removes what the functions never load (``PRUNED``): pyarrow's Flight libraries, its tests, headers and Cython sources, and botocore's models of the services
   icefloe does not call. Lambda allows 250 MB unzipped for a function and its layers together;
   ``infra/lambda/package_report.py`` measures what this leaves (``make package``);
4. compiles the layer to python3.12 bytecode when a python3.12 is found (on PATH or under
   pyenv): Lambda's ``/opt`` is read-only, so without ``.pyc`` files every cold start compiles
   its imports again (measured: about half of a handler's import time; ``make bench``). The
   ``.pyc`` files are unchecked-hash ones: valid whatever the zip does to source times.
   ``--no-bytecode`` skips this; without a python3.12 it is skipped with a warning.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# infra/ (build_commands), found whether this runs as a script or is loaded by path.
_INFRA = str(Path(__file__).resolve().parents[1])
if _INFRA not in sys.path:
    sys.path.insert(0, _INFRA)
from build_commands import Runner, command_runner  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_VERSION = "3.12"  # the functions' Runtime in template.yaml
# Lambda python3.12 runs Amazon Linux 2023 (glibc 2.34): any manylinux wheel up to glibc 2.34
# runs there. pip does not widen an explicit --platform to older tags, so each is listed
# (pyarrow and duckdb publish manylinux_2_28; psycopg-binary and httpfs manylinux2014).
PLATFORMS = (
    "manylinux2014_x86_64",
    *(f"manylinux_2_{minor}_x86_64" for minor in range(17, 35)),
)
LAMBDA_EXTRA = "lambda"

# The AWS services the functions call through boto3 (a test checks the code names no other),
# plus X-Ray, whose SDK (Powertools' Tracer) makes a client for its sampling rules. botocore
# ships models of about 440 services (18 MiB); only these are kept.
BOTOCORE_SERVICES = frozenset({"s3", "sqs", "secretsmanager", "emr-serverless", "sts", "xray"})

# Glob patterns, relative to the layer's python/ directory, of what no function loads.
PRUNED: tuple[tuple[str, str], ...] = (
    # Arrow Flight (RPC), 32 MiB: icefloe never uses it and pyarrow.lib does not link it.
    # (Substrait stays: pyarrow.lib links libarrow_substrait.)
    ("pyarrow/libarrow_flight.so*", "Arrow Flight"),
    ("pyarrow/libarrow_python_flight.so*", "Arrow Flight"),
    ("pyarrow/_flight.*.so", "Arrow Flight"),
    ("pyarrow/flight.py", "Arrow Flight"),
    # Build-time and test files.
    ("pyarrow/tests", "pyarrow's own tests"),
    ("pyarrow/_pyarrow_cpp_tests.*.so", "pyarrow's own tests"),
    ("pyarrow/include", "C++ headers"),
    ("pyarrow/src", "C++ sources"),
    ("pyarrow/*.pxd", "Cython sources"),
    ("pyarrow/*.pxi", "Cython sources"),
    ("pyarrow/*.pyx", "Cython sources"),
    ("pyarrow/includes", "Cython declarations"),
)


LayerName = Literal["core", "publisher-core", "iceberg"]

# The publisher's core: it never loads DuckDB's httpfs extension (only the S3 set-up of queries,
# merges and deletes does: icefloe.query.s3_access), and its catalog is Glue (pyiceberg's
# GlueCatalog makes the client). DuckDB itself stays: the publication path imports it
# (icefloe.iceberg.mapping -> icefloe.ingest; icefloe.settings -> icefloe.merge.worker).
PUBLISHER_CORE_PRUNED: tuple[tuple[str, str], ...] = (
    ("duckdb_extension_httpfs", "DuckDB's httpfs extension (the publisher loads none)"),
    ("duckdb_extension_httpfs-*.dist-info", "DuckDB's httpfs extension"),
    ("duckdb/experimental", "DuckDB's Spark-style API"),
    # API Gateway routing; only Logger(log_event=True) of a pydantic event would reach it.
    ("aws_lambda_powertools/event_handler", "Powertools' HTTP routing (no function serves it)"),
)
PUBLISHER_BOTOCORE_SERVICES = BOTOCORE_SERVICES | {"glue"}

# pyiceberg's dependencies that publishing to Glue never imports: its CLI (click, rich and
# what rich pulls in), the fsspec FileIO (icefloe's is pyarrow's) and the REST catalog (requests
# and its own dependencies). tests/lambda/test_publisher_function.py runs a pass in a process
# where none of them (nor httpfs, nor zstandard's cffi backend) can be imported.
ICEBERG_PRUNED_DISTRIBUTIONS = frozenset(
    {
        "click",
        "rich",
        "pygments",
        "markdown-it-py",
        "mdurl",
        "fsspec",
        "requests",
        "charset-normalizer",
        "idna",
        "certifi",
    }
)
ICEBERG_PRUNED: tuple[tuple[str, str], ...] = (
    # zstandard's default import policy loads its C backend; the cffi one is a second copy.
    ("zstandard/_cffi.*.so", "zstandard's cffi backend"),
    ("pyiceberg/cli", "pyiceberg's command line"),
    # pyiceberg's wheel vendors the Thrift bindings of its Hive catalog (8 MiB).
    ("hive_metastore", "pyiceberg's Hive catalog"),
    ("fb303", "pyiceberg's Hive catalog"),
    ("bin", "console scripts"),
)


@dataclass(frozen=True)
class LayerKind:
    """What one layer holds: the core's dependencies (``core``) or pyiceberg's beside them,
    and what is removed."""

    pruned: tuple[tuple[str, str], ...]
    botocore_services: frozenset[str] | None  # None: the layer holds no botocore
    pruned_distributions: frozenset[str] = field(default_factory=frozenset)
    iceberg: bool = False


LAYERS: dict[str, LayerKind] = {
    "core": LayerKind(pruned=PRUNED, botocore_services=BOTOCORE_SERVICES),
    "publisher-core": LayerKind(
        pruned=PRUNED + PUBLISHER_CORE_PRUNED, botocore_services=PUBLISHER_BOTOCORE_SERVICES
    ),
    "iceberg": LayerKind(
        pruned=ICEBERG_PRUNED,
        botocore_services=None,
        pruned_distributions=ICEBERG_PRUNED_DISTRIBUTIONS,
        iceberg=True,
    ),
}
ICEBERG_EXTRA = "iceberg"
ICEBERG_PACKAGE = "pyiceberg"


class LayerBuildError(Exception):
    """The layer could not be built."""


run_command = command_runner(LayerBuildError)


def find_python(version: str = PYTHON_VERSION) -> str | None:
    """A ``python<version>`` that runs: on PATH, else one pyenv installed (a pyenv shim answers
    for its selected version only, so it may exist and still fail)."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = _pyenv_root()
    candidates += [
        str(p) for p in sorted(pyenv_root.glob(f"versions/{version}*/bin/python{version}"))
    ]
    for candidate in candidates:
        if candidate is None:
            continue
        probe = subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False)
        if probe.returncode == 0:
            return candidate
    return None


def _pyenv_root() -> Path:
    """Where pyenv keeps its versions: ``pyenv root`` (which honours ``PYENV_ROOT``) when pyenv
    is on PATH, else its default."""
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        answer = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)
        if answer.returncode == 0 and answer.stdout.strip():
            return Path(answer.stdout.strip())
    return Path.home() / ".pyenv"


@dataclass(frozen=True)
class LayerPlan:
    """Where the layer goes, the two pip commands that fill it, and the bytecode compiler."""

    output: Path
    source: Path = REPO_ROOT
    python: str = sys.executable  # the host's: pip only downloads wheels for the target
    bytecode_python: str | None = None  # a python3.12, or None for a layer without .pyc files
    layer: LayerName = "core"

    @property
    def site_packages(self) -> Path:
        return self.output / "python"

    @property
    def kind(self) -> LayerKind:
        return LAYERS[self.layer]

    def _platform_args(self) -> list[str]:
        return [
            "--only-binary=:all:",
            *("--implementation", "cp", "--python-version", PYTHON_VERSION),
            *[arg for platform in PLATFORMS for arg in ("--platform", platform)],
        ]

    def pip_report(self, wheel: Path, report: Path) -> list[str]:
        """What pip would install for the core (``--dry-run``), as a JSON report: the versions
        the iceberg layer's dependencies are constrained to."""
        return [
            self.python,
            *("-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed"),
            *("--report", str(report)),
            *self._platform_args(),
            f"{wheel}[{LAMBDA_EXTRA}]",
        ]

    def pip_install_iceberg(self, requirement: str, constraints: Path) -> list[str]:
        """pyiceberg and its dependencies, held to the core's versions."""
        return [
            self.python,
            *("-m", "pip", "install", "--quiet", "--no-compile"),
            *self._platform_args(),
            *("--constraint", str(constraints)),
            *("--target", str(self.site_packages)),
            requirement,
        ]

    def pip_wheel(self, wheel_dir: Path, source: Path | None = None) -> list[str]:
        return [
            self.python,
            *("-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--wheel-dir", str(wheel_dir), str(source or self.source)),
        ]

    def pip_install(self, wheel: Path) -> list[str]:
        platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
        return [
            self.python,
            *("-m", "pip", "install", "--quiet"),
            "--no-compile",  # the host's bytecode would be for the host's Python
            "--only-binary=:all:",
            *("--implementation", "cp", "--python-version", PYTHON_VERSION),
            *platforms,
            *("--target", str(self.site_packages)),
            f"{wheel}[{LAMBDA_EXTRA}]",
        ]

    def compile_bytecode(self) -> list[str]:
        assert self.bytecode_python is not None
        return [
            self.bytecode_python,
            *("-m", "compileall", "-q", "-j", "0"),
            *("--invalidation-mode", "unchecked-hash"),
            str(self.site_packages),
        ]


@dataclass(frozen=True, slots=True)
class Pruned:
    """What :func:`prune` removed."""

    paths: int
    bytes: int


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (what Lambda counts once unzipped)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _pruned_paths(site_packages: Path, kind: LayerKind) -> Iterator[Path]:
    for pattern, _why in kind.pruned:
        yield from sorted(site_packages.glob(pattern))
    models = site_packages / "botocore" / "data"
    if models.is_dir() and kind.botocore_services is not None:
        for service in sorted(models.iterdir()):
            if service.is_dir() and service.name not in kind.botocore_services:
                yield service


def prune(site_packages: Path, *, layer: LayerName = "core") -> Pruned:
    """Remove the layer's pruned paths (:data:`PRUNED` for the core) and unused botocore
    models from ``site_packages``."""
    count = size = 0
    for path in _pruned_paths(site_packages, LAYERS[layer]):
        if not path.exists():
            continue  # inside a directory removed before it
        size += tree_bytes(path)
        count += 1
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return Pruned(paths=count, bytes=size)


def is_pruned(relative: str, *, layer: LayerName = "core") -> bool:
    """Whether a path relative to python/ matches a pruned pattern of ``layer`` (for tests)."""
    return any(fnmatch.fnmatch(relative, pattern) for pattern, _why in LAYERS[layer].pruned)


def canonical_name(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions(site_packages: Path) -> dict[str, Path]:
    """Canonical name -> ``.dist-info`` directory of each distribution under ``site_packages``."""
    found = {}
    for dist_info in site_packages.glob("*.dist-info"):
        name = _metadata_field(dist_info / "METADATA", "Name")
        if name is not None:
            found[canonical_name(name)] = dist_info
    return found


def _metadata_field(metadata: Path, key: str) -> str | None:
    for line in metadata.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            return None  # the headers end at the first blank line
        if line.startswith(f"{key}:"):
            return line.split(":", 1)[1].strip()
    return None


def remove_distribution(site_packages: Path, dist_info: Path) -> int:
    """Delete every file a distribution's RECORD lists (and its ``.dist-info``); its bytes."""
    size = 0
    root = site_packages.resolve()
    for row in (dist_info / "RECORD").read_text(encoding="utf-8").splitlines():
        relative = row.rsplit(",", 2)[0] if row else ""
        path = (site_packages / relative).resolve()
        if not relative or not path.is_relative_to(root) or not path.is_file():
            continue
        size += path.stat().st_size
        path.unlink()
    if dist_info.exists():
        size += tree_bytes(dist_info)
        shutil.rmtree(dist_info)
    for directory in sorted(site_packages.rglob("*"), key=lambda p: -len(p.parts)):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()  # a package left empty
    return size


def iceberg_requirement(wheel_metadata: str) -> str:
    """pyiceberg as icefloe's ``iceberg`` extra pins it, without the extra's own extras (its
    SQL catalog: SQLAlchemy, which the Glue catalog never imports)."""
    pattern = re.compile(
        rf"^Requires-Dist:\s*{ICEBERG_PACKAGE}\s*(\[[^\]]*\])?\s*([^;]+?)\s*;"
        rf"\s*extra\s*==\s*[\"']{ICEBERG_EXTRA}[\"']\s*$",
        re.MULTILINE,
    )
    match = pattern.search(wheel_metadata)
    if match is None:
        raise LayerBuildError(f"icefloe's {ICEBERG_EXTRA!r} extra names no {ICEBERG_PACKAGE}")
    return f"{ICEBERG_PACKAGE}{match.group(2).replace(' ', '')}"


def core_constraints(report: Mapping[str, Any]) -> dict[str, str]:
    """Canonical name -> version of every distribution pip's report installs for the core."""
    pins = {}
    for item in report.get("install", []):
        metadata = item["metadata"]
        pins[canonical_name(metadata["name"])] = metadata["version"]
    pins.pop("icefloe", None)
    return pins


# What building the icefloe wheel reads (pyproject.toml names README.md as the readme).
SOURCE_FILES = ("pyproject.toml", "README.md")
SOURCE_PACKAGE_ROOT = "shared"


def copy_sources(source: Path, destination: Path) -> None:
    """Copy what the wheel is built from, without build leftovers or bytecode."""
    destination.mkdir(parents=True)
    for name in SOURCE_FILES:
        shutil.copy2(source / name, destination / name)
    shutil.copytree(
        source / SOURCE_PACKAGE_ROOT,
        destination / SOURCE_PACKAGE_ROOT,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
    )


def build(plan: LayerPlan, *, run: Runner = run_command) -> int:
    """Fill ``plan.output/python`` and return its size in bytes."""
    shutil.rmtree(plan.site_packages, ignore_errors=True)
    plan.site_packages.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="icefloe-layer-wheel-") as scratch:
        # From a clean copy of the sources: setuptools reuses a build/lib it finds, where a
        # module deleted since would live on in the wheel.
        source, wheel_dir = Path(scratch) / "source", Path(scratch) / "wheels"
        copy_sources(plan.source, source)
        run(plan.pip_wheel(wheel_dir, source))
        wheels = sorted(wheel_dir.glob("icefloe-*.whl"))
        if len(wheels) != 1:
            raise LayerBuildError(f"pip wheel wrote {len(wheels)} icefloe wheels, expected one")
        if plan.kind.iceberg:
            removed = _install_iceberg(plan, wheels[0], Path(scratch), run=run)
        else:
            run(plan.pip_install(wheels[0]))
            removed = 0
    if plan.kind.iceberg:
        if not (plan.site_packages / ICEBERG_PACKAGE / "__init__.py").is_file():
            raise LayerBuildError(f"{ICEBERG_PACKAGE} was not installed into {plan.site_packages}")
    elif not (plan.site_packages / "icefloe" / "__init__.py").is_file():
        raise LayerBuildError(f"icefloe was not installed into {plan.site_packages}")
    pruned = prune(plan.site_packages, layer=plan.layer)
    pruned = Pruned(paths=pruned.paths, bytes=pruned.bytes + removed)
    if plan.bytecode_python is not None:
        run(plan.compile_bytecode())
        bytecode = "with python3.12 bytecode"
    else:
        print(
            "warning: building without bytecode (no python3.12 found, or --no-bytecode): each"
            " cold start compiles its imports",
            file=sys.stderr,
            flush=True,
        )
        bytecode = "without bytecode"
    size = tree_bytes(plan.site_packages)
    print(
        f"layer {plan.site_packages}: {size / 2**20:.1f} MiB unzipped, {bytecode}"
        f" ({pruned.bytes / 2**20:.1f} MiB pruned from {pruned.paths} paths)",
        flush=True,
    )
    return size


def _install_iceberg(plan: LayerPlan, wheel: Path, scratch: Path, *, run: Runner) -> int:
    """Install pyiceberg held to the core's versions, then remove what the core layer holds
    already and what publication never imports; the bytes removed."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requirement = iceberg_requirement(archive.read(metadata).decode("utf-8"))
    report_path, constraints = scratch / "core-report.json", scratch / "core-constraints.txt"
    run(plan.pip_report(wheel, report_path))
    core = core_constraints(json.loads(report_path.read_text(encoding="utf-8")))
    constraints.write_text(
        "".join(f"{name}=={version}\n" for name, version in sorted(core.items()))
    )
    run(plan.pip_install_iceberg(requirement, constraints))
    removed = 0
    for name, dist_info in sorted(installed_distributions(plan.site_packages).items()):
        if name in core or name in plan.kind.pruned_distributions:
            removed += remove_distribution(plan.site_packages, dist_info)
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="build_layer.py", description="Build one of icefloe's Lambda layers (python3.12)."
    )
    parser.add_argument("--output", type=Path, required=True, help="writes OUTPUT/python/")
    parser.add_argument(
        "--layer", choices=sorted(LAYERS), default="core", help="which layer (default: core)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument(
        "--no-bytecode", action="store_true", help="ship no .pyc files (smaller, slower starts)"
    )
    args = parser.parse_args(argv)
    plan = LayerPlan(
        output=args.output.resolve(),
        bytecode_python=None if args.no_bytecode else find_python(),
        layer=args.layer,
    )
    if args.dry_run:
        wheel = Path("<wheel-dir>/icefloe-<version>-py3-none-any.whl")
        print(shlex.join(plan.pip_wheel(wheel.parent)))
        if plan.kind.iceberg:
            print(shlex.join(plan.pip_report(wheel, Path("<core-report.json>"))))
            requirement = f"{ICEBERG_PACKAGE}<pinned by the {ICEBERG_EXTRA} extra>"
            print(shlex.join(plan.pip_install_iceberg(requirement, Path("<constraints.txt>"))))
        else:
            print(shlex.join(plan.pip_install(wheel)))
        if plan.bytecode_python is not None:
            print(shlex.join(plan.compile_bytecode()))
        return 0
    try:
        build(plan)
    except LayerBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
