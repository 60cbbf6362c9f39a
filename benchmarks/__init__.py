"""The benchmarks (``make bench``). Some reuse what the tests build with (``tests/support``:
the Segment corpus, the byte counter, the functions wired from template.yaml), importable here
as ``support`` as it is in the tests."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
