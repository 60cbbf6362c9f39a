"""Building the compaction job's environment: the commands a dry run prints, the wrapper that
runs the image's Python, and where an upload puts the artifacts (moto).

A real build is not run here: ``pip install`` of pyarrow, duckdb, numpy and pandas for the
target platform downloads and unpacks about 130 MB and takes a minute or more. Run it by hand
(``python infra/emr/build_environment.py``); infra/emr/README.md says how to check the result.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import boto3
import pytest
from moto import mock_aws

from support.aws import FAKE_AWS_ENVIRONMENT, REGION, UNSET_AWS_VARIABLES
from support.template import load_template

TEMPLATE = load_template()
DESTINATION = "s3://icefloe-artifacts/icefloe/emr/"


def dry_run(module: ModuleType, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert module.main(["--dry-run", *args]) == 0
    return capsys.readouterr().out.splitlines()


def command(lines: list[str], *words: str) -> list[str]:
    """The one printed command that starts with ``words`` after the interpreter."""
    (found,) = [
        shlex.split(line)
        for line in lines
        if not line.startswith("#") and shlex.split(line)[1 : 1 + len(words)] == list(words)
    ]
    return found


def option_values(tokens: list[str], option: str) -> list[str]:
    return [tokens[n + 1] for n, token in enumerate(tokens) if token == option]


def test_a_dry_run_prints_the_build_and_the_upload_and_changes_nothing(
    build_environment: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    output = tmp_path / "dist"

    lines = dry_run(build_environment, capsys, "--output", str(output), "--upload", DESTINATION)

    # The core package as a wheel, without its dependencies
    wheel = command(lines, "-m", "pip", "wheel")
    assert "--no-deps" in wheel and wheel[-1] == str(build_environment.REPO_ROOT)
    # Installed with its dependencies as binary wheels for EMR's Python and platform
    install = command(lines, "-m", "pip", "install")
    assert "--only-binary=:all:" in install
    assert option_values(install, "--implementation") == ["cp"]
    assert option_values(install, "--python-version") == ["3.11"]
    assert option_values(install, "--platform") == [
        "manylinux2014_x86_64",
        "manylinux_2_28_x86_64",
    ]
    site_packages = output / "build" / "environment" / "lib" / "python3.11" / "site-packages"
    assert option_values(install, "--target") == [str(site_packages)]
    requirements = install[install.index(str(site_packages)) + 1 :]
    assert Path(requirements[0]).name == "icefloe-0.1.0-py3-none-any.whl"
    # pyspark comes with EMR; pandas (which pyspark's Arrow UDFs import) does not
    assert not any(r.lower().startswith("pyspark") for r in requirements)
    assert any(r.startswith("pandas") for r in requirements)
    # The wrapper, the archive rooted at the environment, the entry point beside it
    assert any(line.startswith(f"# write {output}/build/environment/bin/python") for line in lines)
    assert f"tar -czf {output}/icefloe-env.tar.gz -C {output}/build/environment ." in lines
    assert command(lines, str(build_environment.ENTRY_POINT_SOURCE))[0] == "cp"
    # The uploads and the orchestrator's settings that point at them
    assert f"aws s3 cp {output}/compact_job.py {DESTINATION}compact_job.py" in lines
    assert f"aws s3 cp {output}/icefloe-env.tar.gz {DESTINATION}icefloe-env.tar.gz" in lines
    assert lines[-2:] == [
        f"ICEFLOE_EMR_ENTRY_POINT={DESTINATION}compact_job.py",
        f"ICEFLOE_EMR_ENVIRONMENT_ARCHIVE={DESTINATION}icefloe-env.tar.gz",
    ]
    # And nothing was built
    assert not output.exists()


def test_the_python_version_chooses_the_target_and_the_interpreter(
    build_environment: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = dry_run(
        build_environment, capsys, "--output", str(tmp_path), "--python-version", "3.12"
    )

    install = command(lines, "-m", "pip", "install")
    assert option_values(install, "--python-version") == ["3.12"]
    assert option_values(install, "--target")[0].endswith("lib/python3.12/site-packages")
    assert any(line.startswith("# write") and "runs python3.12" in line for line in lines)
    # Without --upload, nothing is uploaded
    assert not any("s3://" in line for line in lines)


def test_a_python_version_emr_does_not_ship_is_refused(
    build_environment: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_environment.main(["--dry-run", "--python-version", "3.9"])
    assert exit_.value.code == 2
    assert "--python-version" in capsys.readouterr().err


def test_the_wrapper_runs_that_python_with_the_environment_first_on_its_path(
    build_environment: ModuleType, tmp_path: Path
) -> None:
    # Given an unpacked environment built for this interpreter's version, holding one module
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    environment = tmp_path / "environment"
    site_packages = environment / "lib" / f"python{version}" / "site-packages"
    site_packages.mkdir(parents=True)
    (site_packages / "icefloe_probe.py").write_text(
        "import sys\nprint(sys.version_info[:2], sys.argv[1:])\n", encoding="utf-8"
    )
    wrapper = environment / "bin" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(build_environment.WRAPPER.format(version=version), encoding="utf-8")
    wrapper.chmod(0o755)
    interpreters = Path(sys.executable).parent
    assert (interpreters / f"python{version}").exists()

    # When Spark runs it as its Python (relative to the working directory, as on EMR)
    result = subprocess.run(
        ["./environment/bin/python", "-m", "icefloe_probe", "--flag"],
        cwd=tmp_path,
        env={"PATH": f"{interpreters}:/usr/bin:/bin", "PYTHONPATH": "/spark/python"},
        capture_output=True,
        text=True,
        check=False,
    )

    # Then that Python imports from the environment, gets the arguments, and keeps the
    # PYTHONPATH Spark gave it (pyspark itself comes from there)
    assert result.returncode == 0, result.stderr
    major, minor = sys.version_info[:2]
    assert result.stdout.strip() == f"({major}, {minor}) ['--flag']"
    path = subprocess.run(
        ["./environment/bin/python", "-c", "import os; print(os.environ['PYTHONPATH'])"],
        cwd=tmp_path,
        env={"PATH": f"{interpreters}:/usr/bin:/bin", "PYTHONPATH": "/spark/python"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert path == f"{site_packages}:/spark/python"


def test_the_runtime_dependencies_are_the_projects_without_pyspark(
    build_environment: ModuleType,
) -> None:
    project = build_environment.Project.from_pyproject()
    assert project.name == "icefloe"
    assert project.wheel_name == f"icefloe-{project.version}-py3-none-any.whl"
    assert [r for r in project.extra_requirements if r.startswith("pyspark")] == []
    assert any(r.startswith("pandas") for r in project.extra_requirements)


def test_the_environment_matches_the_application_the_template_declares(
    build_environment: ModuleType,
) -> None:
    application = TEMPLATE.resources["CompactionApplication"]["Properties"]
    architecture = str(application["Architecture"]).lower()
    assert all(p.endswith(architecture) for p in build_environment.PLATFORMS)
    # The orchestrator starts jobs with the names this script uploads
    orchestrator = TEMPLATE.functions()["MergeOrchestratorFunction"].environment
    entry_point = orchestrator["ICEFLOE_EMR_ENTRY_POINT"]["Fn::Sub"]
    archive = orchestrator["ICEFLOE_EMR_ENVIRONMENT_ARCHIVE"]["Fn::Sub"]
    assert entry_point.endswith("/" + build_environment.ENTRY_POINT_NAME)
    assert archive.endswith("/" + build_environment.ARCHIVE_NAME)


@pytest.mark.parametrize(
    ("uri", "bucket", "prefix"),
    [
        ("s3://icefloe-artifacts", "icefloe-artifacts", ""),
        ("s3://icefloe-artifacts/", "icefloe-artifacts", ""),
        ("s3://icefloe-artifacts/emr", "icefloe-artifacts", "emr/"),
        ("s3://icefloe-artifacts/a/emr/", "icefloe-artifacts", "a/emr/"),
    ],
)
def test_upload_destinations_are_a_bucket_and_a_prefix(
    build_environment: ModuleType, uri: str, bucket: str, prefix: str
) -> None:
    destination = build_environment.S3Destination.parse(uri)
    assert (destination.bucket, destination.prefix) == (bucket, prefix)


@pytest.mark.parametrize("uri", ["https://bucket/emr/", "s3://Not_A_Bucket/emr/", "emr/"])
def test_an_upload_destination_that_is_not_an_s3_prefix_is_refused(
    build_environment: ModuleType, capsys: pytest.CaptureFixture[str], uri: str
) -> None:
    assert build_environment.main(["--dry-run", "--upload", uri]) == 1
    assert "--upload" in capsys.readouterr().err


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    for name in UNSET_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket="icefloe-artifacts")
        yield client


def test_an_upload_puts_the_entry_points_and_the_archive_under_the_prefix(
    build_environment: ModuleType, s3: object, tmp_path: Path
) -> None:
    # Given built artifacts (their content does not matter to the upload)
    entry_point = tmp_path / "compact_job.py"
    entry_point.write_text("print('job')\n", encoding="utf-8")
    (tmp_path / "query_job.py").write_text("print('query')\n", encoding="utf-8")
    archive = tmp_path / "icefloe-env.tar.gz"
    archive.write_bytes(b"\x1f\x8b archive bytes")

    # When they are uploaded
    settings = build_environment.upload_artifacts(
        entry_point=entry_point,
        archive=archive,
        destination=build_environment.S3Destination.parse(DESTINATION),
        client=s3,
    )

    # Then all three are under the prefix (the query job's entry point beside the compaction
    # job's, where the launcher looks for it), and the settings printed point at them
    client = boto3.client("s3", region_name=REGION)
    listed = client.list_objects_v2(Bucket="icefloe-artifacts")["Contents"]
    assert sorted(o["Key"] for o in listed) == [
        "icefloe/emr/compact_job.py",
        "icefloe/emr/icefloe-env.tar.gz",
        "icefloe/emr/query_job.py",
    ]
    body = client.get_object(Bucket="icefloe-artifacts", Key="icefloe/emr/icefloe-env.tar.gz")
    assert body["Body"].read() == archive.read_bytes()
    assert settings == {
        "ICEFLOE_EMR_ENTRY_POINT": f"{DESTINATION}compact_job.py",
        "ICEFLOE_EMR_ENVIRONMENT_ARCHIVE": f"{DESTINATION}icefloe-env.tar.gz",
    }


def test_uploading_before_building_is_refused(
    build_environment: ModuleType, s3: object, tmp_path: Path
) -> None:
    with pytest.raises(build_environment.BuildError, match="build it first"):
        build_environment.upload_artifacts(
            entry_point=tmp_path / "compact_job.py",
            archive=tmp_path / "icefloe-env.tar.gz",
            destination=build_environment.S3Destination.parse(DESTINATION),
            client=s3,
        )


def test_build_drops_a_stale_build_lib_then_packs_the_environment(
    build_environment: ModuleType, tmp_path: Path
) -> None:
    # setuptools reuses a build/lib it finds: a module deleted from shared/ would live on.
    source = tmp_path / "repo"
    stale = source / "build" / "lib" / "icefloe" / "deleted_since.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    project = build_environment.Project(name="icefloe", version="0.1.0", extra_requirements=())
    plan = build_environment.BuildPlan(
        project=project, python_version="3.11", output=tmp_path / "dist", source=source
    )
    commands: list[list[str]] = []

    def fake_pip(command: Sequence[str]) -> None:
        commands.append(list(command))
        assert not stale.exists()  # gone before pip runs
        if "wheel" in command:
            plan.wheels.mkdir(parents=True, exist_ok=True)
            (plan.wheels / project.wheel_name).write_bytes(b"wheel")
        else:
            plan.site_packages.mkdir(parents=True)
            (plan.site_packages / "icefloe.py").write_text("")

    build_environment.build(plan, run=fake_pip)
    assert [c[3] for c in commands] == ["wheel", "install"]
    with tarfile.open(plan.archive) as archive:
        names = set(archive.getnames())
    assert {"bin/python", "lib/python3.11/site-packages/icefloe.py"} <= names
    assert plan.entry_point.is_file()
