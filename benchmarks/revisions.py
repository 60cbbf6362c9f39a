"""Compare one benchmark at two revisions, pair by pair, in the same run.

    python -m benchmarks.revisions --base 00ed25b --runs 3 -- query_bench --scale small

Both revisions are exported (``git archive``) to temporary directories, so neither touches the
working tree or its ``benchmarks/results/``. The benchmark module then runs in each in turn,
head then base, ``--runs`` times, each with its own tree first on ``PYTHONPATH`` (checked: the
``icefloe`` each imports is its tree's) and the same interpreter and packages. After every run
the benchmark's results file is read back, and each numeric figure in it is kept.

Reported per figure: the median at each revision, and the median of the head/base ratios taken
pair by pair, which stays meaningful when the machine's speed drifts during the comparison. A
ratio above 1 means a bigger figure at head: slower for seconds and milliseconds, faster for
rates. The figures and ratios are written to ``benchmarks/results/revisions-<module>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import write_results

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Tree:
    """One revision's exported source, and the results file its benchmark writes."""

    label: str
    revision: str
    root: Path

    def environment(self, home: Path) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.root / "shared"), str(self.root)])
        env["ICEFLOE_HOME"] = str(home)
        return env


def export(revision: str, into: Path, *, label: str) -> Tree:
    """The files of ``revision`` under ``into`` (no .git: it cannot change the repository)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{revision}^{{commit}}"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", commit], cwd=REPO, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {commit} failed")
    return Tree(label=label, revision=commit[:12], root=into)


def check_imports_its_own_tree(tree: Tree, home: Path) -> None:
    found = subprocess.run(
        [sys.executable, "-c", "import icefloe; print(icefloe.__file__)"],
        cwd=tree.root,
        env=tree.environment(home),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(tree.root.resolve()):
        raise SystemExit(f"{tree.label} imports icefloe from {found}, not from {tree.root}")


def figures(document: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every numeric leaf of a results document by its dotted path (lists of runs and the
    bookkeeping keys left out)."""
    if isinstance(document, Mapping):
        for key, value in document.items():
            if key in ("machine", "recorded_at", "benchmark") or str(key).endswith("_runs"):
                continue
            yield from figures(value, f"{prefix}{key}.")
    elif isinstance(document, list):
        if all(isinstance(v, Mapping) for v in document):
            for n, value in enumerate(document):
                yield from figures(value, f"{prefix}{n}.")
    elif isinstance(document, int | float) and not isinstance(document, bool):
        yield prefix.rstrip("."), float(document)


def run_once(tree: Tree, module: str, args: Sequence[str], home: Path) -> dict[str, float]:
    results = tree.root / "benchmarks" / "results"
    before = {p: p.stat().st_mtime_ns for p in results.glob("*.json")}
    completed = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=tree.root,
        env=tree.environment(home),
        capture_output=True,
        text=True,
    )
    if completed.returncode != 0:
        raise SystemExit(
            f"{module} at {tree.label} ({tree.revision}) failed:\n{completed.stderr[-4000:]}"
        )
    written = [p for p in results.glob("*.json") if before.get(p) != p.stat().st_mtime_ns]
    if len(written) != 1:
        raise SystemExit(f"{module} at {tree.label} wrote {len(written)} results files, not 1")
    return dict(figures(json.loads(written[0].read_text(encoding="utf-8"))))


def compare(
    runs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]],
) -> dict[str, dict[str, float]]:
    """Per figure present in every run of both: the medians and the median pairwise ratio."""
    names = set.intersection(*(set(h) & set(b) for h, b in runs))
    table: dict[str, dict[str, float]] = {}
    for name in sorted(names):
        head = [h[name] for h, _ in runs]
        base = [b[name] for _, b in runs]
        ratios = [h / b for h, b in zip(head, base, strict=True) if b != 0]
        table[name] = {
            "head": statistics.median(head),
            "base": statistics.median(base),
            "ratio": round(statistics.median(ratios), 3) if ratios else float("nan"),
        }
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--head", default="HEAD", help="the revision compared (default HEAD)")
    parser.add_argument("--runs", type=int, default=3, help="pairs of runs (default 3)")
    parser.add_argument("module", help="a module of benchmarks/, e.g. query_bench")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args(argv)
    args = [a for a in options.args if a != "--"]
    with tempfile.TemporaryDirectory(prefix="icefloe-revisions-") as tmp:
        root = Path(tmp)
        head = export(options.head, root / "head", label="head")
        base = export(options.base, root / "base", label="base")
        pairs: list[tuple[dict[str, float], dict[str, float]]] = []
        for tree in (head, base):
            check_imports_its_own_tree(tree, root / f"home-{tree.label}")
        for n in range(options.runs):
            print(f"pair {n + 1} of {options.runs}", file=sys.stderr, flush=True)
            got_head = run_once(head, options.module, args, root / "home-head")
            got_base = run_once(base, options.module, args, root / "home-base")
            pairs.append((got_head, got_base))
        table = compare(pairs)
    path = write_results(
        f"revisions-{options.module}",
        {
            "module": options.module,
            "args": args,
            "head": head.revision,
            "base": base.revision,
            "pairs": options.runs,
            "figures": table,
        },
    )
    differing = {n: row for n, row in table.items() if row["head"] != row["base"]}
    width = max((len(n) for n in differing), default=10)
    print(f"{'figure':<{width}}  {'head':>12}  {'base':>12}  head/base")
    for name, row in differing.items():
        print(f"{name:<{width}}  {row['head']:>12.4g}  {row['base']:>12.4g}  {row['ratio']:.3f}")
    print(f"{len(table) - len(differing)} figures (counts, sizes) equal at both revisions")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
