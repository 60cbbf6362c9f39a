"""Each function's unzipped size with its layers, from a ``sam build`` output directory.

    python infra/lambda/package_report.py [--template template.yaml] [--build-dir .aws-sam/build]

Lambda refuses a function whose code and layers together exceed 250 MB (262,144,000 bytes)
unzipped. This reads the source template for each function's layers (its own ``Layers``, else
``Globals``), measures the built directories ``sam build`` wrote (``<build-dir>/<LogicalId>``),
prints one line per function and exits 1 if any is over the limit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfnlint.decode import decode

LAMBDA_UNZIPPED_LIMIT = 262_144_000  # bytes: "250 MB" in Lambda's quotas (250 MiB)
FUNCTION_TYPE = "AWS::Serverless::Function"
MIB = 2**20


class ReportError(Exception):
    """The build directory does not hold what the template declares."""


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


@dataclass(frozen=True, slots=True)
class FunctionSize:
    """One function's unzipped code and layers, in bytes."""

    logical_id: str
    code_bytes: int
    layer_bytes: Mapping[str, int]  # layer logical id -> its size

    @property
    def total_bytes(self) -> int:
        return self.code_bytes + sum(self.layer_bytes.values())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= LAMBDA_UNZIPPED_LIMIT

    def line(self) -> str:
        spare = (LAMBDA_UNZIPPED_LIMIT - self.total_bytes) / MIB
        verdict = f"ok, {spare:.1f} MiB to spare" if self.fits else f"OVER by {-spare:.1f} MiB"
        layers = " + ".join(f"{name} {size / MIB:.1f}" for name, size in self.layer_bytes.items())
        return (
            f"{self.logical_id:<28} code {self.code_bytes / MIB:6.2f} MiB"
            f" + layers {layers or '-'} MiB = {self.total_bytes / MIB:6.1f} MiB  ({verdict})"
        )


def _layer_ids(props: Mapping[str, Any], globals_: Mapping[str, Any], logical_id: str) -> list[str]:
    layers = props.get("Layers", globals_.get("Layers", []))
    ids = []
    for layer in layers:
        if not (isinstance(layer, dict) and "Ref" in layer):
            raise ReportError(f"{logical_id}: layer {layer!r} is not a !Ref to this template's")
        ids.append(str(layer["Ref"]))
    return ids


def measure(*, template: Path, build_dir: Path) -> list[FunctionSize]:
    """Sizes of every function in ``template`` as built under ``build_dir``."""
    doc, problems = decode(str(template))  # cfn-lint's reader: !Ref X becomes {"Ref": X}
    if doc is None:
        raise ReportError(f"{template} cannot be read: {problems}")
    globals_ = doc.get("Globals", {}).get("Function", {})
    resources = doc["Resources"]
    layer_sizes: dict[str, int] = {}
    sizes = []
    for logical_id, resource in resources.items():
        if resource.get("Type") != FUNCTION_TYPE:
            continue
        code = build_dir / logical_id
        if not code.is_dir():
            raise ReportError(f"{code} does not exist: run sam build first")
        layers = {}
        for layer_id in _layer_ids(resource.get("Properties", {}), globals_, logical_id):
            if layer_id not in layer_sizes:
                built = build_dir / layer_id
                if not built.is_dir():
                    raise ReportError(f"{built} does not exist: run sam build first")
                layer_sizes[layer_id] = _tree_bytes(built)
            layers[layer_id] = layer_sizes[layer_id]
        sizes.append(FunctionSize(logical_id, _tree_bytes(code), layers))
    if not sizes:
        raise ReportError(f"{template} declares no {FUNCTION_TYPE}")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="package_report.py",
        description="Each function's unzipped size with its layers (Lambda allows 250 MB).",
    )
    parser.add_argument("--template", type=Path, default=Path("template.yaml"))
    parser.add_argument("--build-dir", type=Path, default=Path(".aws-sam/build"))
    args = parser.parse_args(argv)
    try:
        sizes = measure(template=args.template, build_dir=args.build_dir)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"unzipped size of each function with its layers (limit {LAMBDA_UNZIPPED_LIMIT:,} bytes)")
    for size in sizes:
        print(size.line())
    over = [s.logical_id for s in sizes if not s.fits]
    if over:
        print(f"error: over Lambda's unzipped limit: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
