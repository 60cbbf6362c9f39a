"""Cold-start import benchmark (SAM deploy issue): what a Lambda container pays to import a
handler from the core layer, with and without python3.12 bytecode in the layer.

The layer is built once (``infra/lambda/build_layer.py --no-bytecode``, the same wheels ``sam
build`` installs) into a temporary directory, then copied and compiled to unchecked-hash
``.pyc`` files with python3.12 (what ``build_layer.py`` does by default). For each function and
each layer, a fresh ``python3.12 -S`` process imports the handler module (``import app``) with
only the layer and the function's code on the path, as in Lambda (``/opt/python`` and
``/var/task``), with ``PYTHONDONTWRITEBYTECODE`` set (``/opt`` is read-only there): the time
from process start to the end of the import, and the process's peak RSS, are recorded. Runs of
the two layers alternate; the median of ``--runs`` per function and layer is reported, with the
ratio against the layer without bytecode measured in the same run.

Not measured: Lambda's own init (download and unzip of the layer, the runtime's start), and the
first invocation's work (the meta store pool, the S3 client, the secret): this is the import part
of a cold start only, on this machine's disk and CPUs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_results

REPO_ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = ("insert", "query", "merge_orchestrator", "merge_worker", "janitor")
RUNS = {"small": 3, "full": 7}
PROBE = (
    "import resource, sys, time; start = time.perf_counter(); import app;"
    " print(time.perf_counter() - start,"
    " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)


def _build_layer_module() -> Any:
    sys.path.insert(0, str(REPO_ROOT / "infra" / "lambda"))
    try:
        import build_layer  # type: ignore[import-not-found]  # infra/lambda, put on the path
    finally:
        sys.path.pop(0)
    return build_layer


def _tree_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def _import_once(python: str, layer: Path, function: str) -> tuple[float, float, int]:
    """Wall seconds of the whole process, seconds of the import alone, peak RSS in KiB."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{REPO_ROOT / 'functions' / function}{os.pathsep}{layer}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": "icefloe-bench",
    }
    start = time.perf_counter()
    result = subprocess.run(
        [python, "-S", "-c", PROBE], env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"import of {function} failed:\n{result.stderr[-2000:]}")
    import_s, rss_kib = result.stdout.split()
    return wall, float(import_s), int(rss_kib)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(RUNS), default="full")
    parser.add_argument("--runs", type=int, help="runs per function and layer")
    args = parser.parse_args(argv)
    runs = args.runs or RUNS[args.scale]
    build_layer = _build_layer_module()
    python = build_layer.find_python("3.12")
    if python is None:
        print("cold start benchmark skipped: no python3.12 on PATH or under pyenv")
        return 0

    with tempfile.TemporaryDirectory(prefix="icefloe-cold-start-") as tmp:
        plain = Path(tmp) / "plain"
        print("building the layer without bytecode (the baseline), then a compiled copy")
        build_layer.build(build_layer.LayerPlan(output=plain))
        compiled = Path(tmp) / "compiled"
        shutil.copytree(plain, compiled, symlinks=True)
        compile_plan = build_layer.LayerPlan(output=compiled, bytecode_python=python)
        subprocess.run(compile_plan.compile_bytecode(), check=True)
        layers = {"no_bytecode": plain / "python", "bytecode": compiled / "python"}
        sizes = {name: round(_tree_mib(path), 1) for name, path in layers.items()}

        results: dict[str, dict[str, Any]] = {}
        for function in FUNCTIONS:
            samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in layers}
            for layer in layers.values():  # one warm-up each: the page cache, not Python
                _import_once(python, layer, function)
            for _ in range(runs):
                for name, layer in layers.items():
                    samples[name].append(_import_once(python, layer, function))
            row: dict[str, Any] = {}
            for name, taken in samples.items():
                row[name] = {
                    "process_s": round(statistics.median(s[0] for s in taken), 3),
                    "import_s": round(statistics.median(s[1] for s in taken), 3),
                    "peak_rss_mib": round(statistics.median(s[2] for s in taken) / 1024, 1),
                }
            row["import_ratio_bytecode_vs_none"] = round(
                row["bytecode"]["import_s"] / row["no_bytecode"]["import_s"], 2
            )
            results[function] = row
            print(
                f"{function:<20} import {row['no_bytecode']['import_s']:.2f} s without bytecode,"
                f" {row['bytecode']['import_s']:.2f} s with"
                f" (x{row['import_ratio_bytecode_vs_none']}),"
                f" peak RSS {row['no_bytecode']['peak_rss_mib']:.0f} /"
                f" {row['bytecode']['peak_rss_mib']:.0f} MiB",
                flush=True,
            )

    path = write_results(
        "cold_start",
        {
            "scale": args.scale,
            "runs": runs,
            "python": python,
            "layer_mib": sizes,
            "functions": results,
        },
    )
    print(f"layer {sizes['no_bytecode']} MiB without bytecode, {sizes['bytecode']} MiB with")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
