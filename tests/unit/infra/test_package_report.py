"""The package size report (infra/lambda/package_report.py) over a made-up build directory:
which layers each function counts, the limit, and its errors. tests/package runs it on a
real ``sam build``."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import ModuleType

import pytest

TEMPLATE = """\
Transform: AWS::Serverless-2016-10-31
Globals:
  Function:
    Runtime: python3.12
    Layers: [!Ref CoreLayer]
Resources:
  CoreLayer:
    Type: AWS::Serverless::LayerVersion
    Properties: {ContentUri: layer/}
  ExtraLayer:
    Type: AWS::Serverless::LayerVersion
    Properties: {ContentUri: extra/}
  SmallFunction:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: small/, Handler: app.handler}
  TwoLayerFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: two/
      Handler: app.handler
      Layers: [!Ref CoreLayer, !Ref ExtraLayer]
  Bucket:
    Type: AWS::S3::Bucket
"""


def _build(root: Path, sizes: dict[str, int]) -> Path:
    for name, size in sizes.items():
        path = root / name / "file.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * size)
    template = root / "template.yaml"
    template.write_text(TEMPLATE, encoding="utf-8")
    return template


def test_each_function_counts_its_code_and_its_own_or_the_global_layers(
    package_report: ModuleType, tmp_path: Path
) -> None:
    template = _build(
        tmp_path,
        {"CoreLayer": 1000, "ExtraLayer": 300, "SmallFunction": 7, "TwoLayerFunction": 11},
    )
    sizes = {s.logical_id: s for s in package_report.measure(template=template, build_dir=tmp_path)}
    assert set(sizes) == {"SmallFunction", "TwoLayerFunction"}
    assert sizes["SmallFunction"].total_bytes == 1007
    assert dict(sizes["SmallFunction"].layer_bytes) == {"CoreLayer": 1000}
    assert sizes["TwoLayerFunction"].total_bytes == 1311
    assert all(s.fits for s in sizes.values())


def test_a_function_over_the_limit_fails_the_report_and_is_named(
    package_report: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    template = _build(
        tmp_path,
        {"CoreLayer": 1000, "ExtraLayer": 300, "SmallFunction": 7, "TwoLayerFunction": 11},
    )
    monkeypatch.setattr(package_report, "LAMBDA_UNZIPPED_LIMIT", 1200)
    status = package_report.main(["--template", str(template), "--build-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 1
    assert "TwoLayerFunction" in captured.err and "SmallFunction" not in captured.err
    assert "OVER by" in captured.out and "ok," in captured.out


def test_a_missing_build_directory_says_to_run_sam_build(
    package_report: ModuleType, tmp_path: Path
) -> None:
    template = _build(tmp_path, {"CoreLayer": 10, "SmallFunction": 1})  # TwoLayerFunction unbuilt
    with pytest.raises(package_report.ReportError, match="run sam build first"):
        package_report.measure(template=template, build_dir=tmp_path)


def test_a_layer_from_outside_the_template_is_refused_not_ignored(
    package_report: ModuleType, tmp_path: Path
) -> None:
    template = tmp_path / "template.yaml"
    template.write_text(
        TEMPLATE.replace(
            "[!Ref CoreLayer, !Ref ExtraLayer]",
            "[arn:aws:lambda:us-east-1:123456789012:layer:x:1]",
        ),
        encoding="utf-8",
    )
    for name in ("CoreLayer", "SmallFunction", "TwoLayerFunction"):
        (tmp_path / name).mkdir()
    with pytest.raises(package_report.ReportError, match="TwoLayerFunction"):
        package_report.measure(template=template, build_dir=tmp_path)


def test_samconfig_deploys_with_the_capabilities_the_template_needs() -> None:
    root = Path(__file__).resolve().parents[3]
    with open(root / "samconfig.toml", "rb") as f:
        config = tomllib.load(f)["default"]
    deploy = config["deploy"]["parameters"]
    # The template declares IAM roles and a managed policy without names: CAPABILITY_IAM, and
    # no more (CAPABILITY_NAMED_IAM would hide a named role slipping in).
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    template = (root / "template.yaml").read_text(encoding="utf-8")
    assert "RoleName:" not in template and "ManagedPolicyName:" not in template
    assert deploy["resolve_s3"] is True  # the layer is uploaded to SAM's managed bucket
    assert config["global"]["parameters"]["stack_name"] == "icefloe"
