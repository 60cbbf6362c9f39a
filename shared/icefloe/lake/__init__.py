"""The lake, assembled once: every front door gets the same system from the same settings.

    import icefloe

    with icefloe.connect() as lake:               # the environment's lake (ICEFLOE_*)
        lake.create_table("events", schema="ts TIMESTAMP NOT NULL, event VARCHAR",
                          partition_by="day(ts)")
        lake.insert("events", [{"ts": "2026-11-02T10:00:00Z", "event": "click"}])
        lake.query("SELECT event, count(*) AS n FROM events GROUP BY event")  # a pyarrow Table

:class:`Lake` is the composition root. Built from one reading of the settings
(:class:`~icefloe.settings.IcefloeSettings`), its parts (:mod:`icefloe.lake.parts`) open the
meta store (through the secret when ``ICEFLOE_DATABASE_SECRET_ARN`` names one) and the object
store, and build every collaborator from the same tree: the inserter with its DuckDB bounds,
the query engine with its limits, the merge worker with its limits and lease, the delete part
runner, the janitor, the Iceberg catalog. :mod:`icefloe.lake.lake` adds what a lake does. The
command line, the Python API, the notebook views, the Lambda functions and the Spark reader all
obtain the system from a ``Lake``; nothing else opens the meta store.
"""

from icefloe.lake.lake import Lake, connect
from icefloe.lake.parts import LakeParts, resolve_database

__all__ = ["Lake", "LakeParts", "connect", "resolve_database"]
