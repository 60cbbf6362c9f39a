"""``publish iceberg``, and keeping the tables opted in to Iceberg published after ``merge --wait``
and ``gc``."""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

from icefloe.cli.output import EXIT_ERROR, emit
from icefloe.errors import IcefloeError, InvalidInputError, PublicationError
from icefloe.iceberg.catalogs import shown_uri
from icefloe.janitor import parse_duration
from icefloe.lake import Lake

if TYPE_CHECKING:
    from icefloe.iceberg import PublicationPass, PublishResult
    from icefloe.iceberg.catalogs import IcebergSettings


def publish_iceberg_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    from icefloe.iceberg import open_catalog, publish_due, publish_iceberg, unpublish_iceberg

    # (a table or --all, and --unpublish alone: the parser's check_publish_iceberg)
    iceberg = _iceberg_settings(lake, args)
    names = _option_names(args)
    with _catalog_errors(iceberg, names):
        catalog = open_catalog(iceberg, lake.core)
    if args.all:
        with _catalog_errors(iceberg, names):
            done = publish_due(
                meta=lake.meta, objects=lake.objects, catalog=catalog, namespace=iceberg.namespace
            )
        emit(out, args.format, done.to_json(), lambda: publication_text(done))
        return EXIT_ERROR if done.failed else 0
    if args.unpublish:
        with _catalog_errors(iceberg, names):
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
    retention = parse_duration(args.retention) if args.retention is not None else None
    with _catalog_errors(iceberg, names):
        result = publish_iceberg(
            meta=lake.meta,
            objects=lake.objects,
            table=args.name,
            catalog=catalog,
            namespace=iceberg.namespace,
            retention=retention,
        )
    emit(out, args.format, result.to_json(), lambda: _published_text(result))
    return 0


def _iceberg_settings(lake: Lake, args: argparse.Namespace) -> IcebergSettings:
    """The ICEFLOE_ICEBERG_* settings, with the command's own flags in their place; each value
    checked, a fault named by its flag (or variable, when no flag replaced it)."""
    iceberg = lake.settings.iceberg
    given = {
        "catalog": getattr(args, "catalog", None),
        "catalog_uri": getattr(args, "catalog_uri", None),
        "namespace": getattr(args, "namespace", None),
        "metadata_location": getattr(args, "metadata_location", None),
    }
    iceberg = dataclasses.replace(iceberg, **{k: v for k, v in given.items() if v is not None})
    names = _option_names(args)
    if iceberg.catalog_uri is not None:
        check_catalog_uri(iceberg.catalog_uri, names["catalog_uri"])
    check_namespace(iceberg.namespace, names["namespace"])
    if iceberg.metadata_location is not None:
        check_metadata_location(
            iceberg.metadata_location,
            names["metadata_location"],
            s3_only=iceberg.catalog == "glue",
        )
    return iceberg


# Each Iceberg setting's flag, and the variable it replaces.
_OPTIONS = {
    "catalog_uri": ("--catalog-uri", "ICEFLOE_ICEBERG_CATALOG_URI"),
    "namespace": ("--namespace", "ICEFLOE_ICEBERG_NAMESPACE"),
    "metadata_location": ("--metadata-location", "ICEFLOE_ICEBERG_METADATA_LOCATION"),
}
# As ICEFLOE_ICEBERG_NAMESPACE is read (icefloe.settings): what every catalog takes.
_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SQLALCHEMY_URI_EXAMPLE = "e.g. postgresql://user@host/db or sqlite:////path/catalog.db"


def _option_names(args: argparse.Namespace) -> dict[str, str]:
    """What names each setting in a message: the flag if given, else its variable."""
    return {
        key: flag if getattr(args, key, None) is not None else variable
        for key, (flag, variable) in _OPTIONS.items()
    }


def check_catalog_uri(uri: str, name: str = "--catalog-uri") -> None:
    """A SQLAlchemy URI, by SQLAlchemy's own parse (``notauri`` is none)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not uri.strip():
        raise InvalidInputError(
            f"{name} is empty: give a SQLAlchemy URI ({_SQLALCHEMY_URI_EXAMPLE})"
        )
    try:
        make_url(uri)
    except (ArgumentError, ValueError) as e:
        raise InvalidInputError(
            f"{name} {shown_uri(uri)!r} is not a SQLAlchemy URI ({_SQLALCHEMY_URI_EXAMPLE})"
        ) from e


def check_namespace(namespace: str, name: str = "--namespace") -> None:
    if not _NAMESPACE.fullmatch(namespace):
        raise InvalidInputError(
            f"{name} {namespace!r} must be a plain identifier (letters, digits, underscores)"
        )


def check_metadata_location(
    location: str, name: str = "--metadata-location", *, s3_only: bool
) -> None:
    """A file:// URI or an absolute path, or an s3:// URI with a bucket: where pyiceberg's file
    I/O writes and icefloe's readers reach (the Glue catalog's readers: S3 only)."""
    if not location.strip():
        raise InvalidInputError(f"{name} is empty: give an s3:// or file:// URI")
    parsed = urlsplit(location)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise InvalidInputError(f"{name} {location!r} names no bucket (s3://BUCKET/PREFIX)")
        return
    local = (parsed.scheme == "file" and parsed.netloc in ("", "localhost")) or (
        not parsed.scheme and location.startswith("/")
    )
    if s3_only and (local or not parsed.scheme):
        raise InvalidInputError(
            f"{name} {location!r}: the Glue catalog needs an s3:// location (its readers cannot"
            " reach local files)"
        )
    if not local or not parsed.path.startswith("/"):
        raise InvalidInputError(
            f"{name} {location!r} must be an s3:// or file:// URI, or an absolute path"
        )


@contextmanager
def _catalog_errors(iceberg: IcebergSettings, names: dict[str, str]) -> Iterator[None]:
    """The catalog's own failures as one line naming the setting behind them: its database
    (a SQLAlchemy error, a missing driver) or where metadata files go (an I/O error; an
    existing table's files stay where it was created)."""
    import pyarrow as pa
    from sqlalchemy.exc import SQLAlchemyError

    try:
        try:
            yield
        except IcefloeError as e:
            # (open_catalog names ICEFLOE_ICEBERG_CATALOG_URI; here the option may be the source)
            if isinstance(e.__cause__, SQLAlchemyError | ImportError):
                raise e.__cause__ from None
            raise
    except IcefloeError:
        raise
    except (SQLAlchemyError, ImportError) as e:
        if iceberg.catalog == "glue" or iceberg.catalog_uri is None:
            where = "the local Iceberg catalog"
        else:
            where = (
                f"the Iceberg catalog at {names['catalog_uri']} {shown_uri(iceberg.catalog_uri)!r}"
            )
        raise PublicationError(f"cannot use {where}: {_one_line(e)}") from e
    except (OSError, pa.ArrowException) as e:
        given = (
            f" ({names['metadata_location']} {iceberg.metadata_location!r})"
            if iceberg.metadata_location is not None
            else ""
        )
        raise PublicationError(
            f"cannot read or write the Iceberg metadata files{given}: {_one_line(e)}"
        ) from e


def _one_line(error: BaseException) -> str:
    """An error's first line (SQLAlchemy's messages go on with background links)."""
    text = str(error).strip().splitlines()
    return " ".join(text[0].split()) if text else type(error).__name__


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
