"""``publish iceberg``, and keeping the tables opted in to Iceberg published after ``merge --wait``
and ``gc``."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, TextIO

from icefloe.cli.output import EXIT_ERROR, emit
from icefloe.errors import InvalidInputError
from icefloe.janitor import parse_duration
from icefloe.lake import Lake

if TYPE_CHECKING:
    from icefloe.iceberg import PublicationPass, PublishResult
    from icefloe.iceberg.catalogs import IcebergSettings


def publish_iceberg_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    from icefloe.iceberg import open_catalog, publish_due, publish_iceberg, unpublish_iceberg

    if args.all == (args.name is not None):
        raise InvalidInputError("publish iceberg: give a table, or --all")
    if args.unpublish and (args.all or args.retention is not None):
        raise InvalidInputError("publish iceberg --unpublish takes a table only")
    iceberg = _iceberg_settings(lake, args)
    catalog = open_catalog(iceberg, lake.core)
    if args.all:
        done = publish_due(
            meta=lake.meta, objects=lake.objects, catalog=catalog, namespace=iceberg.namespace
        )
        emit(out, args.format, done.to_json(), lambda: publication_text(done))
        return EXIT_ERROR if done.failed else 0
    if args.unpublish:
        existed = unpublish_iceberg(
            meta=lake.meta, table=args.name, catalog=catalog, namespace=iceberg.namespace
        )
        row = {"table": args.name, "dropped": existed}
        emit(
            out,
            args.format,
            row,
            lambda: (
                f"{iceberg.namespace}.{args.name}: "
                + ("dropped" if existed else "not published; nothing to drop")
            ),
        )
        return 0
    result = publish_iceberg(
        meta=lake.meta,
        objects=lake.objects,
        table=args.name,
        catalog=catalog,
        namespace=iceberg.namespace,
        retention=parse_duration(args.retention) if args.retention is not None else None,
    )
    emit(out, args.format, result.to_json(), lambda: _published_text(result))
    return 0


def _iceberg_settings(lake: Lake, args: argparse.Namespace) -> IcebergSettings:
    """The ICEFLOE_ICEBERG_* settings, with the command's own flags in their place."""
    iceberg = lake.settings.iceberg
    given = {
        "catalog": getattr(args, "catalog", None),
        "catalog_uri": getattr(args, "catalog_uri", None),
        "namespace": getattr(args, "namespace", None),
        "metadata_location": getattr(args, "metadata_location", None),
    }
    return dataclasses.replace(iceberg, **{k: v for k, v in given.items() if v is not None})


def publication_text(done: PublicationPass) -> str:
    lines = [_published_text(r) for r in done.published]
    if done.current:
        lines.append(f"current already: {', '.join(done.current)}")
    lines.extend(f"dropped the Iceberg table of dropped table {name}" for name in done.dropped)
    lines.extend(f"{f.table}: waiting: {f.error}" for f in done.waiting)
    lines.extend(f"{f.table}: publication FAILED: {f.error}" for f in done.failed)
    return "\n".join(lines) or f"no table is published to {done.catalog}"


def _published_text(result: PublishResult) -> str:
    expired = (
        f"; {result.iceberg_snapshots_expired} older Iceberg snapshots expired"
        if result.iceberg_snapshots_expired
        else ""
    )
    if result.iceberg_snapshot_id is None:
        return (
            f"{result.table}: snapshot {result.snapshot_id} is published already"
            f" ({result.files_live} files){expired}; metadata: {result.metadata_location}"
        )
    return (
        f"published {result.table} snapshot {result.snapshot_id} as Iceberg snapshot"
        f" {result.iceberg_snapshot_id}: {result.files_added} files added,"
        f" {result.files_removed} removed, {result.files_live} live{expired}\n"
        f"metadata: {result.metadata_location}"
    )
