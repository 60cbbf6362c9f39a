"""Publish a table's head snapshot as an Iceberg v2 table, so that pyiceberg, DuckDB's
``iceberg_scan``, Spark, Trino and Athena read the same rows icefloe does.

    icefloe publish iceberg events                 # the local catalog under ICEFLOE_HOME
    icefloe publish iceberg events --catalog-uri postgresql+psycopg://...   # any SQL catalog

Nothing is copied or rewritten: the Iceberg snapshot registers icefloe's own Parquet files.
Each publication commits one Iceberg snapshot with the files added and removed since the last
one (a fast append when nothing was removed), and records the icefloe snapshot it shows in the
table's properties (``icefloe.snapshot-id``).

How icefloe's layout maps to Iceberg's:

- **Field ids are icefloe's column ids**, so a schema change in icefloe is the same schema
  change in Iceberg (a rename keeps the id, an added column takes a new one).
- **icefloe's files hold no Parquet field ids**: readers map their columns through the table's
  name mapping (``schema.name-mapping.default``), which lists every name a column has had in
  the files still live, and the dropped columns those files still hold (Iceberg readers ignore
  ids that are not in the schema). ``_row_id`` is mapped to a reserved id outside the schema.
  A name that two different columns had in live files (a column dropped and one of the same
  name added, or two names swapped) cannot be told apart by a name mapping: publication is
  refused until those files are rewritten (``icefloe compact``).
- **Partitions**: ``year``/``month``/``day``/``hour``, ``identity``, ``bucket[N]`` (icefloe
  buckets with Iceberg's hash, so the numbers agree) and ``truncate[W]`` are Iceberg's own
  transforms; each file's partition value comes from icefloe's record of it.
- **Types**: integers up to BIGINT, FLOAT, DOUBLE, DECIMAL, BOOLEAN, VARCHAR and JSON (as
  string), BLOB (binary), DATE, TIME, TIMESTAMP, TIMESTAMPTZ and UUID. Unsigned integers,
  HUGEINT and lists are refused by name.

Modules: :mod:`~icefloe.iceberg.mapping` (types, schema, name mapping, partitions, data file
records), :mod:`~icefloe.iceberg.publish` (one publication, and the expiry of old Iceberg
snapshots), :mod:`~icefloe.iceberg.current` (keeping opted-in tables current),
:mod:`~icefloe.iceberg.catalogs` and :mod:`~icefloe.iceberg.glue` (where tables are
registered). pyiceberg (``icefloe[iceberg]``) is imported only when a catalog is opened.
"""

from icefloe.iceberg.catalogs import catalog_key, local_catalog, open_catalog, sql_catalog
from icefloe.iceberg.current import (
    PublicationFailure,
    PublicationPass,
    publication_wanted,
    publish_due,
    unpublish_iceberg,
)
from icefloe.iceberg.mapping import NAMESPACE, IcebergPublishError, PublicationWaitsError
from icefloe.iceberg.publish import PublishResult, expire_iceberg_snapshots, publish_iceberg

__all__ = [
    "NAMESPACE",
    "IcebergPublishError",
    "PublicationFailure",
    "PublicationPass",
    "PublicationWaitsError",
    "PublishResult",
    "catalog_key",
    "expire_iceberg_snapshots",
    "local_catalog",
    "open_catalog",
    "publication_wanted",
    "publish_due",
    "publish_iceberg",
    "sql_catalog",
    "unpublish_iceberg",
]
