"""The command line's option values, each checked by its option's ``type`` (argparse names
the option in the error, "argument --max-files: ..."), and each command's check of the
options that conflict or need each other (``check_*``, naming the fault or returning None).
Either fault exits 2 before anything runs."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from icefloe.errors import InvalidInputError
from icefloe.ingest.digests import check_key
from icefloe.janitor import ORPHAN_GRACE_FLOOR, format_duration, parse_duration

# Option values, each checked by its option's ``type`` (argparse names the option in the
# error, "argument --max-files: ..."). Numbers and durations are ASCII digits only: int()
# alone would take full-width digits, or "1_000".
_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_DURATION = re.compile(r"(?:[0-9]+[smhdw])+", re.ASCII | re.IGNORECASE)
_PARTITION_SEGMENT = re.compile(r"[^=/]+=[^/]*")


def positive_int(text: str) -> int:
    if not _DIGITS.fullmatch(text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def snapshot_id(text: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected a snapshot id (a whole number, 0 or more), got {text!r}"
        )
    return int(text)


def duration(text: str) -> str:
    """A duration as ``parse_duration`` reads it (``0s``, ``90m``, ``1h30m``; a unit in either
    case), returned as given: the handler reads it."""
    if not _DURATION.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: expected a number and a unit (s, m, h, d, w), like"
            " 0s, 90m or 3d"
        )
    try:
        parse_duration(text)
    except InvalidInputError as e:  # too long for a timedelta
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def orphan_grace(text: str) -> str:
    if parse_duration(duration(text)) < ORPHAN_GRACE_FLOOR:
        raise argparse.ArgumentTypeError(
            f"{text} is shorter than {format_duration(ORPHAN_GRACE_FLOOR)}: an insert or merge"
            " that has uploaded but not yet committed could lose its objects"
        )
    return text


def path(text: str) -> str:
    """A file name: never empty (``Path("")`` is the current directory)."""
    if not text:
        raise argparse.ArgumentTypeError("the path is empty")
    return text


def partition_path(text: str) -> str:
    """A partition path's form, ``NAME=VALUE`` segments joined by ``/``; whether the table has
    that partition, ``compact`` sees."""
    if not all(_PARTITION_SEGMENT.fullmatch(segment) for segment in text.split("/")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a partition path: expected NAME=VALUE segments joined by '/', as"
            " `icefloe status TABLE` lists them (e.g. day=2026-11-02)"
        )
    return text


def idempotency_key(text: str) -> str:
    try:
        check_key(text)
    except InvalidInputError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def check_create(args: argparse.Namespace) -> str | None:
    if args.preset is None:
        return None if args.schema else "table create needs --schema (or --preset)"
    if args.schema is not None:
        return "give --schema or --preset, not both"
    layout = [
        flag
        for flag, value in (
            ("--partition-by", args.partition_by),
            ("--sort-by", args.sort_by),
            ("--row-group-by", args.row_group_by),
            ("--merge", args.merge),
            ("--tenant-column", args.tenant_column),
        )
        if value is not None
    ]
    if layout:
        return f"--preset {args.preset} sets the whole spec: {', '.join(layout)} cannot be given"
    return None


def check_alter(args: argparse.Namespace) -> str | None:
    if not args.changes and args.publish is None:
        return (
            "table alter: give at least one of --add-column, --drop-column, --rename-column,"
            " --widen, --publish"
        )
    return None


def check_query(args: argparse.Namespace) -> str | None:
    if args.sql is not None and args.sql_file is not None:
        return "give the SELECT as an argument or with -f FILE, not both"
    if args.sql is None and args.sql_file is None:
        return "give the SELECT as an argument, or with -f FILE"
    if args.engine != "duckdb":
        if args.stats:
            return "--stats needs the duckdb engine (it reports its pruning)"
        if args.tenant is not None:
            return "--tenant needs the duckdb engine (its sandbox scopes tenants)"
    if args.engine == "emr" and (args.format not in (None, "table", "json") or args.output):
        return (
            "--engine emr writes its result as Parquet under the results location:"
            " --format csv/parquet and --output do not apply"
        )
    return check_output(args)


def check_changes(args: argparse.Namespace) -> str | None:
    if args.until is not None and args.until < args.since:
        return f"--until {args.until} is before --since {args.since}"
    return check_output(args)


# ``--format`` of query and changes when it is not given: from the name of ``--output``, else a
# text table. A name that says NDJSON (which neither writes) is refused: a text table, or one
# JSON array, would be the wrong thing under it.
_OUTPUT_FORMATS = {".json": "json", ".csv": "csv", ".parquet": "parquet"}
OUTPUT_FORMAT_HELP = "default: from the --output file name (.json, .csv, .parquet), else table"


def check_output(args: argparse.Namespace) -> str | None:
    """Sets ``args.format`` when it was not given (see ``_OUTPUT_FORMATS``)."""
    if args.format is None:
        suffix = Path(args.output).suffix.lower() if args.output is not None else ""
        if suffix in (".ndjson", ".jsonl"):
            return (
                f"--output {args.output!r}: no NDJSON output; give --format (json writes one array)"
            )
        args.format = _OUTPUT_FORMATS.get(suffix, "table")
    if args.format == "parquet" and args.output is None:
        return "--format parquet needs --output FILE"
    return None


def check_publish_iceberg(args: argparse.Namespace) -> str | None:
    if args.all == (args.name is not None):
        return "publish iceberg: give a table, or --all"
    if args.unpublish and (args.all or args.retention is not None):
        return "publish iceberg --unpublish takes a table only"
    return None
