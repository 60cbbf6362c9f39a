"""Importing icefloe starts nothing: no thread, no AWS client. Its thread pools are made on
first use, a Lambda container's collaborators on its first invocation."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import icefloe

REPO = Path(__file__).resolve().parents[3]

# In a fresh interpreter: count the boto3 clients made (botocore's, whatever makes them), import
# every module of icefloe and every Lambda handler module, and say what is running.
IMPORT_EVERYTHING = textwrap.dedent("""
    import importlib, importlib.util, json, pkgutil, sys, threading
    import botocore.session

    made = []
    create_client = botocore.session.Session.create_client

    def counted(self, service_name, *args, **kwargs):
        made.append(service_name)
        return create_client(self, service_name, *args, **kwargs)

    botocore.session.Session.create_client = counted

    import icefloe

    imported, skipped = [], {}
    for module in pkgutil.walk_packages(icefloe.__path__, "icefloe."):
        if module.name.rsplit(".", 1)[-1] == "__main__":
            continue  # runs a command when imported
        try:
            importlib.import_module(module.name)
        except ImportError as e:  # an optional extra not installed
            if (e.name or "").startswith("icefloe"):
                raise
            skipped[module.name] = e.name
        else:
            imported.append(module.name)
    for path in sys.argv[1:]:
        spec = importlib.util.spec_from_file_location(f"handler_{len(imported)}", path)
        handler = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(handler)
        imported.append(path)
    print(json.dumps({
        "imported": imported,
        "skipped": skipped,
        "threads": [t.name for t in threading.enumerate()],
        "active": threading.active_count(),
        "clients": made,
    }))
""")


def test_importing_icefloe_and_the_handlers_starts_no_thread_and_makes_no_client() -> None:
    handlers = sorted(str(path) for path in (REPO / "functions").glob("*/app.py"))
    assert len(handlers) >= 7
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING, *handlers],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "", "POWERTOOLS_TRACE_DISABLED": "1", "AWS_DEFAULT_REGION": "us-east-1"},
        cwd=REPO,
    )
    seen = json.loads(done.stdout.splitlines()[-1])

    # Everything was imported: the core's modules (beyond the package itself) and the handlers
    assert "icefloe.datafiles" in seen["imported"] and "icefloe.ingest.load" in seen["imported"]
    assert "icefloe.aws.lambda_runtime" in seen["imported"]
    assert set(handlers) <= set(seen["imported"])
    assert len(seen["imported"]) > 50, seen["skipped"]
    # And nothing runs beside the main thread, and no AWS client was made
    assert seen["threads"] == ["MainThread"] and seen["active"] == 1
    assert seen["clients"] == []


def test_the_subprocess_imports_this_icefloe() -> None:
    # The fresh interpreter must import the package under test, not another installed copy.
    done = subprocess.run(
        [sys.executable, "-c", "import icefloe; print(icefloe.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert Path(done.stdout.strip()) == Path(icefloe.__file__)
