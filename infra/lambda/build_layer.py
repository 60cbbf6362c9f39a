"""Build the core Lambda layer: icefloe and its runtime dependencies for python3.12 on x86_64.

    python infra/lambda/build_layer.py --output DIR [--dry-run]

``sam build`` runs this through the Makefile's ``build-CoreLayer`` target with ``DIR`` set to
the layer's artifacts directory; it writes ``DIR/python/`` (what Lambda puts on ``sys.path``
from ``/opt/python``). No Docker and no python3.12 are needed for the layer itself:

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
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

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


class LayerBuildError(Exception):
    """The layer could not be built."""


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

    @property
    def site_packages(self) -> Path:
        return self.output / "python"

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


def _pruned_paths(site_packages: Path) -> Iterator[Path]:
    for pattern, _why in PRUNED:
        yield from sorted(site_packages.glob(pattern))
    models = site_packages / "botocore" / "data"
    if models.is_dir():
        for service in sorted(models.iterdir()):
            if service.is_dir() and service.name not in BOTOCORE_SERVICES:
                yield service


def prune(site_packages: Path) -> Pruned:
    """Remove the :data:`PRUNED` paths and unused botocore models from ``site_packages``."""
    count = size = 0
    for path in _pruned_paths(site_packages):
        if not path.exists():
            continue  # inside a directory removed before it
        size += tree_bytes(path)
        count += 1
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return Pruned(paths=count, bytes=size)


def is_pruned(relative: str) -> bool:
    """Whether a path relative to python/ matches a :data:`PRUNED` pattern (for tests)."""
    return any(fnmatch.fnmatch(relative, pattern) for pattern, _why in PRUNED)


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


Runner = Callable[[Sequence[str]], None]


def _run(command: Sequence[str]) -> None:
    print(f"+ {shlex.join(command)}", flush=True)
    try:
        subprocess.run(list(command), check=True)
    except subprocess.CalledProcessError as e:
        raise LayerBuildError(
            f"{shlex.join(command[1:5])} failed with status {e.returncode}"
        ) from e


def build(plan: LayerPlan, *, run: Runner = _run) -> int:
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
        run(plan.pip_install(wheels[0]))
    if not (plan.site_packages / "icefloe" / "__init__.py").is_file():
        raise LayerBuildError(f"icefloe was not installed into {plan.site_packages}")
    pruned = prune(plan.site_packages)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="build_layer.py", description="Build icefloe's core Lambda layer (python3.12)."
    )
    parser.add_argument("--output", type=Path, required=True, help="writes OUTPUT/python/")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument(
        "--no-bytecode", action="store_true", help="ship no .pyc files (smaller, slower starts)"
    )
    args = parser.parse_args(argv)
    plan = LayerPlan(
        output=args.output.resolve(),
        bytecode_python=None if args.no_bytecode else find_python(),
    )
    if args.dry_run:
        wheel = Path("<wheel-dir>/icefloe-<version>-py3-none-any.whl")
        print(shlex.join(plan.pip_wheel(wheel.parent)))
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
