"""The publisher function: keep the tables opted in to Iceberg publication current in the
stack's Glue database.

Each invocation is one pass (:func:`icefloe.iceberg.publish_due`): every table whose spec says
``publish: iceberg`` and whose head moved since its last publication (or whose old Iceberg
snapshots passed the table's retention) is published again, and the Iceberg tables of dropped
tables due for purge are dropped. The schedule runs it over every table; a direct invoke may
name ``{"tables": [...]}`` (``icefloe/aws/schemas/publisher.schema.json``).

A table that fails to publish is named in the answer's ``failed``, logged and counted, and the
others are published (the janitor's rule for a table it cannot collect); the next pass tries it
again. The meta store being down, or a commit whose outcome is unknown, raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from icefloe.aws.events import check as check_schema
from icefloe.aws.events import error_answer, is_scheduled
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry
from icefloe.errors import InvalidInputError, NotFoundError
from icefloe.iceberg import PublicationPass, catalog_key, publish_due
from icefloe.metastore.publications import PublicationStore
from icefloe.metastore.store import MetaStore
from icefloe.spec import validate_table_name

if TYPE_CHECKING:
    from icefloe.aws.events import SchemaName

# The schema's name, beside the other functions' in icefloe/aws/schemas/ (icefloe.aws.events
# lists the others in its SchemaName; this one is loaded and checked the same way).
SCHEMA = cast("SchemaName", "publisher")


@dataclass(frozen=True, slots=True)
class PublisherInvoke:
    """What the publisher is asked (``publisher.schema.json``): every table (``tables`` None),
    or only these."""

    tables: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, event: object) -> PublisherInvoke:
        if is_scheduled(event):
            return cls()
        check_schema(SCHEMA, event)
        tables = cast(Mapping[str, Any], event).get("tables")
        if tables is None:
            return cls()
        return cls(tables=tuple(validate_table_name(name) for name in tables))


def handle(event: object, *, container: Container, telemetry: FunctionTelemetry) -> dict[str, Any]:
    try:
        request = PublisherInvoke.parse(event)
    except InvalidInputError as e:
        return _refused(e, telemetry=telemetry)
    lake = container.lake
    namespace = lake.iceberg.namespace
    catalog = lake.iceberg_catalog()
    if request.tables is not None:
        try:
            check_tables(request.tables, meta=lake.meta, catalog=catalog_key(catalog, namespace))
        except (InvalidInputError, NotFoundError) as e:
            return _refused(e, telemetry=telemetry)
    outcome = publish_due(
        meta=lake.meta,
        objects=lake.objects,
        catalog=catalog,
        namespace=namespace,
        tables=request.tables,
    )
    _report(outcome, telemetry=telemetry)
    return outcome.to_json()


def check_tables(tables: Sequence[str], *, meta: MetaStore, catalog: str) -> None:
    """Refuse a name the pass would skip without a word: no table of that name, or a table
    not opted in to publication. A dropped table still published in ``catalog`` may be named
    (the pass drops its Iceberg table once its drop is due for purge)."""
    live = {info.name: info for info in meta.list_tables()}
    dropped = {gone.name for gone in PublicationStore(meta).dropped_tables(catalog=catalog)}
    for name in tables:
        info = live.get(name)
        if info is None and name not in dropped:
            raise NotFoundError(f"event 'tables': no table {name!r} (nor a dropped one published)")
        if info is not None and info.spec.publish != "iceberg":
            raise InvalidInputError(
                f"event 'tables': table {name!r} is not published as Iceberg (its spec says"
                f" publish: {info.spec.publish}); icefloe table alter {name} --publish iceberg"
            )


def _refused(error: Exception, *, telemetry: FunctionTelemetry) -> dict[str, Any]:
    telemetry.logger.warning(
        "publication pass refused", extra={"error": type(error).__name__, "reason": str(error)}
    )
    telemetry.count("PublisherRunsRefused", 1)
    return error_answer(error)


def _report(outcome: PublicationPass, *, telemetry: FunctionTelemetry) -> None:
    for result in outcome.published:
        telemetry.logger.info("table published", extra={**result.to_json()})
    for name in outcome.dropped:
        telemetry.logger.info("iceberg table dropped", extra={"table": name})
    for failure in outcome.failed:
        # The other tables were published; the next pass tries this one again.
        telemetry.logger.warning(
            "table not published", extra={"table": failure.table, "reason": failure.error}
        )
    for waits in outcome.waiting:
        telemetry.logger.info(
            "table waits for a backfill", extra={"table": waits.table, "reason": waits.error}
        )
    telemetry.logger.info(
        "publication pass done",
        extra={
            "catalog": outcome.catalog,
            "tables_published": len(outcome.published),
            "tables_current": len(outcome.current),
            "iceberg_tables_dropped": len(outcome.dropped),
            "tables_failed": len(outcome.failed),
            "tables_waiting": len(outcome.waiting),
        },
    )
    telemetry.count("TablesPublished", len(outcome.published))
    telemetry.count("TablesCurrent", len(outcome.current))
    telemetry.count("IcebergTablesDropped", len(outcome.dropped))
    telemetry.count("TablesFailed", len(outcome.failed))
    telemetry.count("FilesAdded", sum(r.files_added for r in outcome.published))
    telemetry.count("FilesRemoved", sum(r.files_removed for r in outcome.published))
    telemetry.count(
        "IcebergSnapshotsExpired", sum(r.iceberg_snapshots_expired for r in outcome.published)
    )
