"""Build the Python environment of the heavy compaction job, and optionally upload it.

    python infra/emr/build_environment.py [--python-version 3.11] [--output dist/emr]
                                          [--upload s3://bucket/prefix/] [--dry-run]

EMR Serverless (release ``emr-spark-8.0.0``: Spark 4.0, Amazon Linux 2023, x86_64) brings
Spark and a CPython; the job needs the icefloe package and its runtime dependencies beside it.
This script:

1. builds icefloe as a wheel (``pip wheel --no-deps .``);
2. installs that wheel and its runtime dependencies (``[project.dependencies]``, plus the
   ``spark`` extra without pyspark: EMR provides Spark, pyspark's Arrow UDFs need pandas) as
   manylinux x86_64 wheels for the image's Python into ``environment/lib/python3.X/site-packages``
   (``pip install --platform ... --only-binary=:all: --target``: no compiler, no Docker, any host);
3. writes ``environment/bin/python``: a shell script that runs the image's own ``python3.X`` with
   that site-packages first on ``PYTHONPATH`` (the job's ``PYSPARK_PYTHON``);
4. packs the environment into ``dist/emr/icefloe-env.tar.gz`` and copies ``compact_job.py``
   beside it;
5. with ``--upload s3://bucket/prefix/``, uploads both and prints the ``ICEFLOE_EMR_ENTRY_POINT``
   and ``ICEFLOE_EMR_ENVIRONMENT_ARCHIVE`` values that point at them.

``--dry-run`` prints what it would run (shell equivalents) and changes nothing. Why a wrapper
and not venv-pack: see ``infra/emr/README.md``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import sys
import tarfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# infra/ (build_commands), found whether this runs as a script or is loaded by path.
_INFRA = str(Path(__file__).resolve().parents[1])
if _INFRA not in sys.path:
    sys.path.insert(0, _INFRA)
from build_commands import Runner, command_runner  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = REPO_ROOT / "pyproject.toml"
ENTRY_POINT_SOURCE = Path(__file__).resolve().with_name("compact_job.py")
ENTRY_POINT_NAME = "compact_job.py"
# The big-scan query job's entry point, uploaded beside the compaction job's (the launcher
# finds it there: icefloe.emr_query).
QUERY_ENTRY_POINT_SOURCE = Path(__file__).resolve().with_name("query_job.py")
QUERY_ENTRY_POINT_NAME = "query_job.py"
ARCHIVE_NAME = "icefloe-env.tar.gz"
DEFAULT_OUTPUT = REPO_ROOT / "dist" / "emr"

# The Pythons of emr-spark-8.0.0 (its release notes list 3.11, 3.12 and 3.13); the environment
# must be built for the one the job's wrapper runs.
PYTHON_VERSIONS = ("3.11", "3.12", "3.13")
DEFAULT_PYTHON_VERSION = "3.11"
# Amazon Linux 2023 has glibc 2.34: manylinux2014 (glibc 2.17, with manylinux2010 and
# manylinux1) and manylinux_2_28 wheels both run on it. pyarrow, numpy and duckdb publish
# x86_64 wheels only as manylinux_2_28 (or newer), so manylinux2014 alone cannot resolve them.
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")
# EMR provides Spark; a second pyspark on the path would shadow the image's.
PROVIDED_BY_EMR = frozenset({"pyspark"})
SPARK_EXTRA = "spark"

WRAPPER = """\
#!/bin/sh
# The EMR image's own CPython {version}, with this environment's packages first on its path.
# (A venv's bin/python links to the interpreter that built it, so venv-pack needs a build host
# with the image's OS and Python; this wrapper needs neither. See infra/emr/README.md.)
env_dir=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
PYTHONPATH="$env_dir/lib/python{version}/site-packages${{PYTHONPATH:+:$PYTHONPATH}}"
export PYTHONPATH
for candidate in python{version} /usr/bin/python{version} /usr/local/bin/python{version}; do
    if command -v "$candidate" >/dev/null 2>&1; then
        exec "$candidate" "$@"
    fi
done
echo "icefloe job environment: no python{version} on this image" >&2
exit 127
"""


class BuildError(Exception):
    """The environment could not be built or uploaded."""


run_command = command_runner(BuildError)


@dataclass(frozen=True)
class Project:
    """What the build needs from ``pyproject.toml``."""

    name: str
    version: str
    extra_requirements: tuple[str, ...]  # installed beside the wheel's own dependencies

    @classmethod
    def from_pyproject(cls, path: Path = PYPROJECT) -> Project:
        with open(path, "rb") as f:
            project = tomllib.load(f)["project"]
        extras = project.get("optional-dependencies", {}).get(SPARK_EXTRA, [])
        return cls(
            name=str(project["name"]),
            version=str(project["version"]),
            extra_requirements=tuple(
                r for r in extras if _requirement_name(r) not in PROVIDED_BY_EMR
            ),
        )

    @property
    def wheel_name(self) -> str:
        """The file ``pip wheel`` writes for this pure-Python project."""
        return f"{re.sub(r'[-_.]+', '_', self.name).lower()}-{self.version}-py3-none-any.whl"


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


@dataclass(frozen=True)
class BuildPlan:
    """Where everything goes, and the two pip commands."""

    project: Project
    python_version: str
    output: Path
    source: Path = REPO_ROOT
    python: str = sys.executable  # the host's: pip only downloads wheels for the target

    @property
    def build_dir(self) -> Path:
        return self.output / "build"

    @property
    def wheels(self) -> Path:
        return self.build_dir / "wheels"

    @property
    def environment(self) -> Path:
        return self.build_dir / "environment"

    @property
    def site_packages(self) -> Path:
        return self.environment / "lib" / f"python{self.python_version}" / "site-packages"

    @property
    def wrapper(self) -> Path:
        return self.environment / "bin" / "python"

    @property
    def archive(self) -> Path:
        return self.output / ARCHIVE_NAME

    @property
    def entry_point(self) -> Path:
        return self.output / ENTRY_POINT_NAME

    @property
    def query_entry_point(self) -> Path:
        return self.output / QUERY_ENTRY_POINT_NAME

    def pip_wheel(self) -> list[str]:
        return [
            self.python,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--wheel-dir",
            str(self.wheels),
            str(self.source),
        ]

    def pip_install(self) -> list[str]:
        platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
        return [
            self.python,
            "-m",
            "pip",
            "install",
            "--no-compile",  # the host's bytecode would be for the host's Python
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            self.python_version,
            *platforms,
            "--target",
            str(self.site_packages),
            str(self.wheels / self.project.wheel_name),
            *self.project.extra_requirements,
        ]


@dataclass(frozen=True)
class S3Destination:
    """``s3://bucket/prefix/``: where the entry point and the archive are uploaded."""

    bucket: str
    prefix: str  # "" or ending with "/"

    @classmethod
    def parse(cls, value: str) -> S3Destination:
        if not value.startswith("s3://"):
            raise BuildError(f"--upload {value!r}: expected s3://bucket/prefix/")
        bucket, _, prefix = value[len("s3://") :].partition("/")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", bucket):
            raise BuildError(f"--upload {value!r}: {bucket!r} is not an S3 bucket name")
        prefix = prefix.strip("/")
        return cls(bucket=bucket, prefix=f"{prefix}/" if prefix else "")

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{self.key(name)}"


def job_settings(destination: S3Destination) -> dict[str, str]:
    """The orchestrator's variables that point at the uploaded artifacts."""
    return {
        "ICEFLOE_EMR_ENTRY_POINT": destination.uri(ENTRY_POINT_NAME),
        "ICEFLOE_EMR_ENVIRONMENT_ARCHIVE": destination.uri(ARCHIVE_NAME),
    }


def describe(plan: BuildPlan, destination: S3Destination | None) -> list[str]:
    """The build as shell commands (what ``--dry-run`` prints)."""
    lines = [
        shlex.join(["rm", "-rf", str(plan.build_dir)]),
        shlex.join(plan.pip_wheel()),
        shlex.join(plan.pip_install()),
        f"# write {plan.wrapper} (runs python{plan.python_version} with {plan.site_packages}"
        " first on PYTHONPATH), mode 0755",
        shlex.join(["tar", "-czf", str(plan.archive), "-C", str(plan.environment), "."]),
        shlex.join(["cp", str(ENTRY_POINT_SOURCE), str(plan.entry_point)]),
        shlex.join(["cp", str(QUERY_ENTRY_POINT_SOURCE), str(plan.query_entry_point)]),
    ]
    if destination is not None:
        lines += [
            shlex.join(["aws", "s3", "cp", str(path), destination.uri(path.name)])
            for path in (plan.entry_point, plan.archive)
        ]
        lines += [f"{name}={value}" for name, value in job_settings(destination).items()]
    return lines


def build(plan: BuildPlan, *, run: Runner = run_command) -> None:
    """Build the archive and copy the entry point into ``plan.output``."""
    shutil.rmtree(plan.build_dir, ignore_errors=True)
    plan.output.mkdir(parents=True, exist_ok=True)
    # setuptools reuses a build/lib it finds, where a module deleted since would live on.
    shutil.rmtree(plan.source / "build" / "lib", ignore_errors=True)
    run(plan.pip_wheel())
    if not (plan.wheels / plan.project.wheel_name).is_file():
        raise BuildError(f"pip wheel did not write {plan.wheels / plan.project.wheel_name}")
    run(plan.pip_install())
    for pth in sorted(plan.site_packages.glob("*.pth")):
        # PYTHONPATH entries are not site directories: the wrapper's interpreter skips .pth files.
        print(f"warning: {pth.name} is not processed by the job's interpreter", file=sys.stderr)
    plan.wrapper.parent.mkdir(parents=True, exist_ok=True)
    plan.wrapper.write_text(WRAPPER.format(version=plan.python_version), encoding="utf-8")
    plan.wrapper.chmod(0o755)
    with tarfile.open(plan.archive, "w:gz") as archive:
        # The archive's root is the environment: spark.archives=...#environment unpacks it as
        # ./environment, so the job's PYSPARK_PYTHON is ./environment/bin/python.
        for child in sorted(plan.environment.iterdir()):
            archive.add(child, arcname=child.name)
    shutil.copyfile(ENTRY_POINT_SOURCE, plan.entry_point)
    shutil.copyfile(QUERY_ENTRY_POINT_SOURCE, plan.query_entry_point)
    size_mb = plan.archive.stat().st_size / 1e6
    print(f"built {plan.archive} ({size_mb:.1f} MB) and {plan.entry_point}", flush=True)


def upload_artifacts(
    *, entry_point: Path, archive: Path, destination: S3Destination, client: Any
) -> dict[str, str]:
    """Upload the entry point and the archive under ``destination``; returns the orchestrator's
    ``ICEFLOE_EMR_*`` values that point at them."""
    query_entry_point = entry_point.with_name(QUERY_ENTRY_POINT_NAME)
    for path, name in (
        (entry_point, ENTRY_POINT_NAME),
        (query_entry_point, QUERY_ENTRY_POINT_NAME),
        (archive, ARCHIVE_NAME),
    ):
        if not path.is_file():
            raise BuildError(f"{path} does not exist: build it first")
        client.upload_file(str(path), destination.bucket, destination.key(name))
        print(f"uploaded {path} to {destination.uri(name)}", flush=True)
    return job_settings(destination)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="build_environment.py",
        description="Build (and upload) the Python environment of icefloe's EMR compaction job.",
    )
    parser.add_argument(
        "--python-version",
        choices=PYTHON_VERSIONS,
        default=DEFAULT_PYTHON_VERSION,
        help="the EMR image's Python the job runs on (default %(default)s)",
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="output directory (default dist/emr)"
    )
    parser.add_argument(
        "--upload",
        metavar="S3_URI",
        help="upload the entry point and the archive under this prefix",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be run; change nothing"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        destination = S3Destination.parse(args.upload) if args.upload else None
        plan = BuildPlan(
            project=Project.from_pyproject(),
            python_version=args.python_version,
            output=args.output.resolve(),
        )
        if args.dry_run:
            print("\n".join(describe(plan, destination)))
            return 0
        build(plan)
        if destination is not None:
            import boto3

            settings = upload_artifacts(
                entry_point=plan.entry_point,
                archive=plan.archive,
                destination=destination,
                client=boto3.client("s3"),
            )
            print("\n".join(f"{name}={value}" for name, value in settings.items()))
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
