"""The icefloe command line: thin argument parsing over the core.

Every command prints one line "icefloe: error: ..." and exits non-zero on bad input (with the
closest command or table name when one is mistyped), and takes --format json.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import signal
import stat
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import asdict, is_dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO, cast
from uuid import UUID

from icefloe import __version__
from icefloe.aws.secrets import with_database_secret
from icefloe.config import Settings
from icefloe.errors import IcefloeError, InvalidInputError, TableExistsError, TableNotFoundError
from icefloe.ingest import INPUT_FORMATS, InputFormat, format_from_suffix
from icefloe.ingest.insert import InsertPhase
from icefloe.janitor import DEFAULT_MAX_FILES, format_duration, parse_duration
from icefloe.lake import Lake
from icefloe.lifecycle import alter_table, delete_rows, rollback_table
from icefloe.lifecycle.alter import add_column, drop_column, rename_column, widen_column
from icefloe.merge import merge_locally
from icefloe.merge.modes import check_merge_query
from icefloe.merge.orchestrator import OrchestratorSummary
from icefloe.metastore.deletes import DeleteJobStore
from icefloe.metastore.embedded import embedded_status, stop_embedded
from icefloe.metastore.models import FILE_SIZE_BUCKETS, PartitionShape, TableInfo
from icefloe.metastore.publications import PublicationStore
from icefloe.progress import Progress, StageProgress
from icefloe.query.output import write_result
from icefloe.sample_events import sample_events, sample_events_spec
from icefloe.settings import VARIABLES, load_settings, shown_settings
from icefloe.spec import TableSpec, format_partition_by, format_schema
from icefloe.spec.evolution import SchemaChange
from icefloe.spec.presets import PRESETS, preset

if TYPE_CHECKING:
    from icefloe.iceberg import PublicationPass, PublishResult
    from icefloe.iceberg.catalogs import IcebergSettings

EXIT_ERROR = 1
EXIT_USAGE = 2

# An insert of less input draws no progress line: it is done in well under a second (a one-file
# NDJSON insert of sample events goes at about 46 MB/s in docs/benchmarks.md, 25-60 MB/s on a
# two-core VM), before a line would tell anyone anything; it would only flicker.
INSERT_PROGRESS_MIN_BYTES = 16_000_000


DESCRIPTION = """\
icefloe: JSON events in, immutable Parquet files on object storage out, SQL over any snapshot.
A Postgres meta store records which files are live in each snapshot; merges, deletes and
garbage collection never disturb a reader."""

EXAMPLES = """\
examples:
  icefloe init
  icefloe table create events --schema "ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR" \\
      --partition-by "day(ts)" --sort-by "event, ts" --row-group-by user_id
  icefloe insert events events.ndjson
  icefloe query "SELECT event, count(*) FROM events GROUP BY event" --format json
  icefloe merge --wait && icefloe gc --retention 3d
  icefloe delete events --where "user_id = 'u42'" --dry-run
  icefloe completion bash > /etc/bash_completion.d/icefloe"""

# Every variable the CLI reads, from the settings' declarations (so the list never falls behind).
ENVIRONMENT = textwrap.fill(
    " ".join(v.name for v in VARIABLES if "cli" in v.read_by),
    width=94,
    initial_indent="  ",
    subsequent_indent="  ",
)

EPILOG = f"""{EXAMPLES}

environment:
{ENVIRONMENT}
  (python -m icefloe.settings, and the README's "Configuration", give each default and meaning)"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, like every other icefloe error
        self.exit(EXIT_USAGE, f"icefloe: error: {message}{_did_you_mean(message)}\n")


def _did_you_mean(message: str) -> str:
    """For argparse's "invalid choice: 'x' (choose from ...)": the closest choice, if any."""
    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if found is None:
        return ""
    choices = re.findall(r"'?([\w-]+)'?", found.group(2))
    close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="icefloe",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"icefloe {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND"
    )

    _add_format(commands.add_parser("init", help="create or upgrade the meta store schema"))
    completion = commands.add_parser(
        "completion", help="print a shell completion script (bash or zsh)"
    )
    completion.add_argument("shell", choices=("bash", "zsh"))
    _add_format(
        commands.add_parser(
            "settings",
            help="each environment variable the CLI reads: its value (a DSN's password masked)"
            " or its default; a bad value is an error naming it",
        )
    )

    table = commands.add_parser("table", help="create, list and show tables")
    table_commands = table.add_subparsers(dest="table_command", required=True, parser_class=_Parser)
    create = table_commands.add_parser("create", help="register a table")
    create.add_argument("name")
    create.add_argument("--schema", help='e.g. "ts TIMESTAMP NOT NULL, event VARCHAR"')
    create.add_argument("--preset", choices=sorted(PRESETS), help="a ready-made spec: segment")
    create.add_argument("--partition-by", default="", help='e.g. "day(ts), bucket[16](user_id)"')
    create.add_argument("--sort-by", default="", help='e.g. "event, ts"')
    create.add_argument("--row-group-by", default=None, help="a column: one key per row group")
    create.add_argument(
        "--merge", default="append", help="append | replace(KEY[; version=COL]) | ..."
    )
    create.add_argument(
        "--tenant-column", help="scope tenant queries by this column (an identity partition)"
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed without change if the table exists"
    )
    create.add_argument(
        "--publish",
        choices=("none", "iceberg"),
        default="none",
        help="keep the table published as Iceberg (see publish iceberg --all; default: none)",
    )
    _add_format(create)
    _add_format(table_commands.add_parser("list", help="list tables"))
    show = table_commands.add_parser("show", help="show a table's spec and head")
    show.add_argument("name")
    _add_format(show)
    drop = table_commands.add_parser(
        "drop",
        help="drop a table: gone from listings and queries at once, its objects deleted by gc"
        " after the table's retention",
    )
    drop.add_argument("name")
    _add_format(drop)
    alter = table_commands.add_parser(
        "alter",
        help="change a table's schema (one new version; no data rewritten)",
        epilog="Changes apply in the order given, as one new schema version. Rows written"
        " before read an added column as NULL; a rename keeps the data; a dropped column's"
        " name can be added again, empty. Partition columns, the row-group key and the tenant"
        " column cannot be dropped, renamed or widened. Queries pinned at an earlier snapshot"
        " keep the schema they had.",
    )
    alter.add_argument("name")
    for flag, kind, metavar, text in (
        ("--add-column", "add", '"c TYPE"', "add a nullable column"),
        ("--drop-column", "drop", "c", "drop a column"),
        ("--rename-column", "rename", "old=new", "rename a column (its data stays)"),
        (
            "--widen",
            "widen",
            '"c TYPE"',
            "widen a column: to a wider integer, FLOAT to DOUBLE, DECIMAL to a larger precision",
        ),
    ):
        alter.add_argument(
            flag,
            dest="changes",
            action=_AppendChange,
            const=kind,
            default=[],
            metavar=metavar,
            help=text + " (repeatable)",
        )
    alter.add_argument(
        "--publish",
        choices=("none", "iceberg"),
        help="keep the table published as Iceberg, or stop (the Iceberg table stays as last"
        " published until publish iceberg NAME --unpublish)",
    )
    _add_format(alter)

    insert = commands.add_parser(
        "insert",
        help="insert events from a file or stdin",
        epilog=f"On a terminal, an input of {INSERT_PROGRESS_MIN_BYTES // 1_000_000} MB or more"
        " shows a progress line on stderr: its stage (reading stdin, loading, writing,"
        " committing), size and elapsed time, with a rate and ETA while stdin is read (an ETA"
        " only when stdin is a file). A smaller input is done before a line would help. No line"
        " with --format json or when stderr is not a terminal.",
    )
    insert.add_argument("name")
    insert.add_argument("source", help="a file, or - for stdin")
    insert.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        help="default: from the file name (.json, .ndjson/.jsonl, .csv, .parquet); ndjson for stdin",
    )
    insert.add_argument("--idempotency-key", help="a retry with the same key commits nothing new")
    _add_format(insert)

    query = commands.add_parser("query", help="run one SELECT over snapshot-pinned tables")
    query.add_argument("sql")
    query.add_argument("--snapshot", type=int, help="pin this snapshot (the query names one table)")
    query.add_argument("--format", choices=("table", "json", "csv", "parquet"), default="table")
    query.add_argument("--output", help="write the result to this file (parquet needs it)")
    query.add_argument("--tenant", help="see only this tenant's rows of every table")
    query.add_argument(
        "--engine",
        choices=("duckdb", "spark", "emr"),
        default="duckdb",
        help="duckdb (default: sandboxed, warm), spark (local Spark, for big scans; not"
        " sandboxed), or emr (a Spark job on EMR Serverless, ICEFLOE_EMR_*: prints the job and"
        " where its Parquet result will be)",
    )

    files = commands.add_parser("files", help="the files of a table at a snapshot")
    files.add_argument("name")
    files.add_argument("--snapshot", type=int, help="default: the head")
    _add_format(files)

    delete = commands.add_parser(
        "delete",
        help="delete the rows a predicate matches, in one new snapshot (erasure: then gc)",
    )
    delete.add_argument("name")
    delete.add_argument(
        "--where",
        required=True,
        metavar="PREDICATE",
        help="one SQL expression over the table's columns, e.g. \"user_id = 'u42'\"",
    )
    delete.add_argument(
        "--dry-run", action="store_true", help="list the files and rows it would change"
    )
    _add_format(delete)

    deletes = commands.add_parser(
        "deletes", help="delete jobs of the deployed stack: state, parts done, rows deleted"
    )
    deletes.add_argument("name", nargs="?", help="a table (default: every table)")
    _add_format(deletes)

    rollback = commands.add_parser(
        "rollback",
        help="commit a snapshot whose live files are exactly those of an earlier snapshot",
    )
    rollback.add_argument("name")
    rollback.add_argument(
        "--to-snapshot",
        type=int,
        required=True,
        metavar="N",
        help="the snapshot to go back to (see `icefloe snapshots NAME`); it must not have expired",
    )
    _add_format(rollback)

    snapshots = commands.add_parser("snapshots", help="list a table's snapshots")
    snapshots.add_argument("name")
    _add_format(snapshots)

    status = commands.add_parser("status", help="live files, partitions, rows and bytes")
    status.add_argument("name", nargs="?")
    _add_format(status)

    merge = commands.add_parser(
        "merge", help="merge small files: one orchestration round, or rounds until quiet"
    )
    merge.add_argument("name", nargs="?", help="one table (default: every table)")
    merge.add_argument(
        "--wait", action="store_true", help="repeat rounds until the planner finds nothing"
    )
    _add_format(merge)

    compact = commands.add_parser(
        "compact", help="compact whole partitions (heavy compaction) with Spark or DuckDB"
    )
    compact.add_argument("name")
    compact.add_argument(
        "--partition", action="append", help="a partition path, e.g. day=2026-11-02 (repeatable)"
    )
    compact.add_argument("--engine", choices=("spark", "duckdb"), default="spark")
    _add_format(compact)

    gc = commands.add_parser(
        "gc", help="expire old snapshots, delete files no snapshot needs, sweep orphans"
    )
    gc.add_argument("name", nargs="?", help="one table (default: every table)")
    gc.add_argument(
        "--retention", help="keep snapshots this long (e.g. 0s, 90m, 3d; default: the table's)"
    )
    gc.add_argument(
        "--orphan-grace",
        help="delete unregistered objects older than this (at least 1h; default: the table's, 1d)",
    )
    gc.add_argument(
        "--dry-run", action="store_true", help="delete nothing; report what would be deleted"
    )
    gc.add_argument(
        "--max-files", type=int, default=DEFAULT_MAX_FILES, help="dead files per table per run"
    )
    _add_format(gc)

    demo = commands.add_parser("demo", help="create an events table and insert sample events")
    demo.add_argument(
        "--events", type=int, default=300_000, help="how many events (default 300,000)"
    )
    demo.add_argument(
        "--batch-size", type=int, default=2_000, help="events per insert (default 2,000)"
    )
    demo.add_argument("--days", type=int, default=7, help="days the events span (default 7)")
    _add_format(demo)

    publish = commands.add_parser(
        "publish", help="publish a table for other engines (Iceberg metadata, no data copied)"
    )
    publish_commands = publish.add_subparsers(
        dest="publish_command", required=True, parser_class=_Parser
    )
    iceberg = publish_commands.add_parser(
        "iceberg",
        help="commit the head snapshot's files to an Iceberg v2 table (icefloe.NAME)",
        epilog="By default the catalog is pyiceberg's SQL catalog in a SQLite file under"
        " ICEFLOE_HOME/iceberg; --catalog-uri takes any SQLAlchemy URI (Postgres too);"
        " --catalog glue registers the table in the AWS Glue Data Catalog (S3 warehouses),"
        " where Athena and Trino find it. Read the result with pyiceberg, DuckDB's"
        " iceberg_scan(METADATA), Spark, Trino or Athena.",
    )
    iceberg.add_argument("name", nargs="?", help="the table")
    iceberg.add_argument(
        "--all",
        action="store_true",
        help="every table created or altered with --publish iceberg whose head moved (and the"
        " Iceberg tables of dropped tables past their retention are dropped)",
    )
    iceberg.add_argument(
        "--unpublish",
        action="store_true",
        help="drop the table's Iceberg table and release the files only it kept",
    )
    iceberg.add_argument(
        "--catalog",
        choices=("sql", "glue"),
        help="where the table is registered (default: ICEFLOE_ICEBERG_CATALOG, else sql)",
    )
    iceberg.add_argument(
        "--catalog-uri", help="a SQLAlchemy URI of the SQL catalog (ICEFLOE_ICEBERG_CATALOG_URI)"
    )
    iceberg.add_argument(
        "--retention",
        help="then expire Iceberg snapshots older than this, releasing their files to gc"
        " (e.g. 0s, 3d; default: the table's snapshot retention)",
    )
    iceberg.add_argument(
        "--namespace",
        help="the Iceberg namespace (the Glue database) of the table (default:"
        " ICEFLOE_ICEBERG_NAMESPACE, else icefloe)",
    )
    iceberg.add_argument(
        "--metadata-location",
        help="where Iceberg metadata files go (a file:// or s3:// URI; default: beside the"
        " local catalog, or the warehouse's iceberg/ prefix with --catalog-uri)",
    )
    _add_format(iceberg)

    db = commands.add_parser("db", help="the embedded meta store")
    db_commands = db.add_subparsers(dest="db_command", required=True, parser_class=_Parser)
    _add_format(
        db_commands.add_parser("stop", help="stop the embedded Postgres under ICEFLOE_HOME")
    )
    db_status = db_commands.add_parser(
        "status", help="whether the embedded Postgres runs, and which processes use it"
    )
    _add_format(db_status)
    return parser


def _add_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("table", "json"), default="table")


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    if out is None and hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `icefloe ... | head` ends quietly
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "completion":
        print(completion_script(parser, args.shell), file=out)
        return 0
    try:
        # The one read of the environment: commands that need more than the runtime (query
        # limits, merge settings, EMR) find the whole tree in args.settings.
        args.settings = load_settings()
        if args.command == "settings":  # before any secret or server: it must always answer
            return _settings(args, out)
        if args.command == "db":
            # A deployed stack's meta store is reachable through its secret, as for its
            # functions (the Lake below reads it the same way).
            settings, _ = with_database_secret(
                args.settings.core, secret_arn=args.settings.database_secret_arn
            )
            return _db(settings, args, out)
        with Lake.open(args.settings, max_connections=2) as lake:
            try:
                return _COMMANDS[_command_key(args)](lake, args, out)
            except TableNotFoundError as e:
                raise TableNotFoundError(f"{e}{_closest_table(lake, e)}") from e
    except IcefloeError as e:
        print(f"icefloe: error: {e}", file=sys.stderr)
        return EXIT_ERROR


def _closest_table(lake: Lake, error: TableNotFoundError) -> str:
    """ "; did you mean 'events'?" for a table name that is close to an existing one."""
    wanted = re.search(r"no table named '([^']*)'", str(error))
    if wanted is None:
        return ""
    with suppress(IcefloeError):
        names = [t.name for t in lake.meta.list_tables()]
        close = difflib.get_close_matches(wanted.group(1), names, n=1, cutoff=0.6)
        if close:
            return f"; did you mean {close[0]!r}?"
    return ""


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """A completion script for ``shell``, generated from the parser: commands, subcommands,
    each command's options, and the choices of options that have them."""
    words: dict[str, list[str]] = {"": []}
    for command, sub in subcommands(parser).items():
        words[""].append(command)
        nested = subcommands(sub)
        words[command] = list(nested) or long_options(sub)
        for name, deeper in nested.items():
            words[f"{command} {name}"] = long_options(deeper)
    cases = "\n".join(
        f'        "{key}") candidates="{" ".join(sorted(values))}" ;;'
        for key, values in sorted(words.items())
    )
    two_words = "|".join(f'"{key}"' for key in sorted(words) if " " in key)
    script = f"""# icefloe completion ({shell}); generated by `icefloe completion {shell}`
_icefloe() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" key candidates=""
    if [ "$COMP_CWORD" -eq 1 ]; then
        key=""
    elif [ "$COMP_CWORD" -eq 2 ]; then
        key="${{COMP_WORDS[1]}}"
    else
        key="${{COMP_WORDS[1]}} ${{COMP_WORDS[2]}}"
        case "$key" in
            {two_words}) ;;
            *) key="${{COMP_WORDS[1]}}" ;;
        esac
    fi
    case "$key" in
{cases}
    esac
    COMPREPLY=($(compgen -W "$candidates" -- "$cur"))
}}
complete -o default -F _icefloe icefloe"""
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def long_options(parser: argparse.ArgumentParser) -> list[str]:
    found: list[str] = []
    for action in parser._actions:
        found += [o for o in action.option_strings if o.startswith("--")]
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            found += [str(c) for c in action.choices]
    return found


def _db(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    """``db stop`` and ``db status``: they never start the server, and work after any crash."""
    if args.db_command == "stop":
        stopped = stop_embedded(settings.embedded_database_dir)
        _emit(
            out, args.format, {"stopped": stopped}, lambda: "stopped" if stopped else "not running"
        )
        return 0
    status = embedded_status(settings.embedded_database_dir)

    def text() -> str:
        if not status.running:
            return f"not running ({status.data_dir})"
        users = ", ".join(map(str, status.users)) or "none"
        return (
            f"running in {status.data_dir}: pid {status.pid}, port {status.port};"
            f" processes using it: {users}"
        )

    _emit(out, args.format, status, text)
    return 0


def _settings(args: argparse.Namespace, out: TextIO) -> int:
    shown = shown_settings()

    def text() -> str:
        rows = [
            [s.name, s.value if s.value is not None else f"(default) {s.default}"] for s in shown
        ]
        return _text_table(["variable", "value"], rows)

    _emit(out, args.format, shown, text)
    return 0


def _command_key(args: argparse.Namespace) -> str:
    sub = getattr(args, f"{args.command}_command", None)
    return f"{args.command} {sub}" if sub else str(args.command)


def _init(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    report = lake.meta.migrate()
    applied = ", ".join(str(v) for v in report.applied) or "none"
    row = {**asdict(report), "warehouse": lake.core.warehouse.uri}
    _emit(
        out,
        args.format,
        row,
        lambda: (
            f"meta store schema {report.schema!r} at version {report.current_version}"
            f" (applied now: {applied}); warehouse {lake.core.warehouse.uri}"
        ),
    )
    return 0


def _table_create(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    if args.preset:
        if args.schema:
            raise InvalidInputError("give --schema or --preset, not both")
        spec = preset(args.preset, name=args.name)
    elif not args.schema:
        raise InvalidInputError("table create needs --schema (or --preset)")
    else:
        spec = TableSpec.create(
            name=args.name,
            schema=args.schema,
            partition_by=args.partition_by,
            sort_by=args.sort_by,
            row_group_by=args.row_group_by,
            merge=args.merge,
            tenant_column=args.tenant_column,
        )
    spec = dataclasses.replace(spec, publish=args.publish)
    check_merge_query(spec)
    try:
        info = lake.meta.create_table(spec)
        verb = "created"
    except TableExistsError:
        if not args.if_not_exists:
            raise
        info = lake.meta.get_table(spec.name)
        verb = "kept existing"
    _emit(out, args.format, _table_row(info), lambda: f"{verb} table {info.name}")
    return 0


def _table_row(info: TableInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "head_snapshot_id": info.head_snapshot_id,
        "created_at": info.created_at,
        "spec": info.spec.to_dict(),
    }


def _table_list(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    tables = lake.meta.list_tables()
    rows = [_table_row(t) for t in tables]
    _emit(
        out,
        args.format,
        rows,
        lambda: _text_table(
            ["name", "head", "partition_by", "sort_by"],
            [
                [
                    t.name,
                    t.head_snapshot_id,
                    format_partition_by(t.spec.partition_by),
                    ", ".join(t.spec.sort_by),
                ]
                for t in tables
            ],
        ),
    )
    return 0


def _table_show(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    info = lake.meta.get_table(args.name)
    _emit(out, args.format, _table_row(info), lambda: _describe(info))
    return 0


def _table_drop(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    info = lake.meta.drop_table(args.name)
    retention = timedelta(seconds=info.spec.retention.snapshot_retention_seconds)
    row = {**_table_row(info), "purged_after": format_duration(retention)}
    _emit(
        out,
        args.format,
        row,
        lambda: (
            f"dropped table {info.name}; gc deletes its objects once {format_duration(retention)}"
            " (its retention) have passed; a table of that name can be created now"
        ),
    )
    return 0


class _AppendChange(argparse.Action):
    """Collects ``(kind, text)`` of every schema-change flag, in command-line order."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        changes = [*getattr(namespace, self.dest, []), (self.const, str(values))]
        setattr(namespace, self.dest, changes)


_CHANGE_PARSERS: dict[str, Callable[[str], SchemaChange]] = {
    "add": add_column,
    "drop": drop_column,
    "rename": rename_column,
    "widen": widen_column,
}


def _table_alter(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    if not args.changes and args.publish is None:
        raise InvalidInputError(
            "table alter: give at least one of --add-column, --drop-column, --rename-column,"
            " --widen, --publish"
        )
    if not args.changes:
        info = lake.meta.set_publish(args.name, args.publish)
        _emit(
            out,
            args.format,
            _table_row(info),
            lambda: f"altered {info.name}: publish {info.spec.publish}",
        )
        return 0
    changes = [_CHANGE_PARSERS[kind](text) for kind, text in args.changes]
    result = alter_table(meta=lake.meta, table=args.name, changes=changes)
    if args.publish is not None:
        lake.meta.set_publish(args.name, args.publish)
    row = {
        "table": result.table,
        "snapshot_id": result.snapshot_id,
        "spec_version": result.spec_version,
        "changes": list(result.changes),
        "schema": format_schema(result.spec.columns),
    }
    _emit(
        out,
        args.format,
        row,
        lambda: (
            f"altered {result.table} (schema version {result.spec_version}, snapshot"
            f" {result.snapshot_id}): {'; '.join(result.changes)}\n"
            f"schema: {format_schema(result.spec.columns)}"
        ),
    )
    return 0


def _publish_iceberg(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
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
        _emit(out, args.format, done.to_json(), lambda: _publication_text(done))
        return EXIT_ERROR if done.failed else 0
    if args.unpublish:
        existed = unpublish_iceberg(
            meta=lake.meta, table=args.name, catalog=catalog, namespace=iceberg.namespace
        )
        row = {"table": args.name, "dropped": existed}
        _emit(
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
    _emit(out, args.format, result.to_json(), lambda: _published_text(result))
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


def _keep_published(
    lake: Lake,
    args: argparse.Namespace,
    table: str | None,
    *,
    retention: timedelta | None = None,
) -> PublicationPass | None:
    """Publish the opted-in tables whose head moved (``table``, or all), as ``publish iceberg
    --all`` does; None when no table is opted in (pyiceberg is then never imported)."""
    from icefloe.iceberg.current import publication_wanted

    if not publication_wanted(lake.meta):
        return None
    try:
        from icefloe.iceberg import open_catalog, publish_due
    except ImportError as e:  # pragma: no cover - the dev install has the extra
        raise InvalidInputError(
            f"tables are published as Iceberg, which needs icefloe[iceberg]: {e}"
        ) from e
    iceberg = _iceberg_settings(lake, args)
    return publish_due(
        meta=lake.meta,
        objects=lake.objects,
        catalog=open_catalog(iceberg, lake.core),
        namespace=iceberg.namespace,
        tables=None if table is None else [table],
        retention=retention,
    )


def _publication_text(done: PublicationPass) -> str:
    lines = [_published_text(r) for r in done.published]
    if done.current:
        lines.append(f"current already: {', '.join(done.current)}")
    lines.extend(f"dropped the Iceberg table of dropped table {name}" for name in done.dropped)
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


def _describe(info: TableInfo) -> str:
    spec = info.spec
    lines = [
        ("table", info.name),
        ("head snapshot", str(info.head_snapshot_id)),
        ("created at", info.created_at.isoformat(timespec="seconds")),
        ("schema", format_schema(spec.columns)),
        ("schema version", str(spec.version)),
        ("partition by", format_partition_by(spec.partition_by) or "(none)"),
        ("sort by", ", ".join(spec.sort_by) or "(none)"),
        ("row groups by", spec.row_group_by or "(none)"),
        ("merge", spec.merge.to_text()),
        ("target file size", f"{spec.sizes.target_file_bytes:,} bytes"),
        ("snapshot retention", f"{spec.retention.snapshot_retention_seconds:,} s"),
    ]
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in lines)


_INSERT_STAGES: dict[InsertPhase, str] = {
    "load": "loading",
    "write": "writing",
    "commit": "committing",
}


def _insert(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    inserter = lake.inserter()
    if args.source == "-":
        fmt: InputFormat = args.input_format or "ndjson"
        line = StageProgress(
            "inserting stdin",
            stages=("reading", *_INSERT_STAGES.values()),
            total_bytes=_regular_file_size(sys.stdin),
            quiet_below_bytes=INSERT_PROGRESS_MIN_BYTES,
            enabled=args.format != "json",
        )
        with line:
            result = inserter.insert_stream(
                args.name,
                cast(BinaryIO, _CountedReads(sys.stdin.buffer, line)),
                fmt=fmt,
                idempotency_key=args.idempotency_key,
                on_phase=lambda phase: line.stage(_INSERT_STAGES[phase]),
            )
    else:
        path = Path(args.source)
        fmt = args.input_format or format_from_suffix(path)
        line = StageProgress(
            f"inserting {path.name}",
            stages=tuple(_INSERT_STAGES.values()),
            total_bytes=_regular_file_size(path),
            quiet_below_bytes=INSERT_PROGRESS_MIN_BYTES,
            enabled=args.format != "json",
        )
        with line:
            result = inserter.insert_file(
                args.name,
                path,
                fmt=fmt,
                idempotency_key=args.idempotency_key,
                on_phase=lambda phase: line.stage(_INSERT_STAGES[phase]),
            )
    row = asdict(result)
    if result.committed:
        text = (
            f"inserted {result.rows:,} rows into {result.table}: snapshot {result.snapshot_id},"
            f" {_count(len(result.files), 'file')} in {_count(result.partitions, 'partition')}"
        )
    else:
        text = f"already committed as snapshot {result.snapshot_id} of {result.table}; nothing new"
    _emit(out, args.format, row, lambda: text)
    return 0


def _regular_file_size(source: Path | TextIO) -> int | None:
    """The size of a file to insert, or of stdin redirected from one (``< big.ndjson``); None
    for a pipe, or a file that cannot be read (the insert then says why)."""
    try:
        status = source.stat() if isinstance(source, Path) else os.fstat(source.fileno())
    except (OSError, ValueError):  # ValueError: a stdin without a descriptor
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) else None


class _CountedReads:
    """stdin as the insert stages it, each read counted on the progress line."""

    def __init__(self, stream: BinaryIO, line: StageProgress) -> None:
        self._stream, self._line = stream, line

    def read(self, size: int = -1) -> bytes:
        chunk = self._stream.read(size)
        self._line.read(len(chunk))
        return chunk


def _demo(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    if args.events < 1 or args.batch_size < 1 or args.days < 1:
        raise InvalidInputError("--events, --batch-size and --days must be positive")
    lake.meta.migrate()
    spec = sample_events_spec("events")
    with suppress(TableExistsError):  # a second demo run adds to the same table
        lake.meta.create_table(spec)
    events = sample_events(args.events, days=args.days)
    inserter = lake.inserter()
    started = time.perf_counter()
    batches = 0
    bar = Progress(len(events), "inserting", unit="events", enabled=args.format != "json")
    with bar:
        for offset in range(0, len(events), args.batch_size):
            batch = events[offset : offset + args.batch_size]
            inserter.insert_rows("events", batch)
            batches += 1
            bar.advance(len(batch))
    elapsed = time.perf_counter() - started
    row = {
        "table": "events",
        "events": len(events),
        "batches": batches,
        "seconds": round(elapsed, 3),
        "events_per_s": round(len(events) / elapsed),
    }
    _emit(
        out,
        args.format,
        row,
        lambda: (
            f"inserted {len(events):,} sample events in {_count(batches, 'batch', 'batches')} of"
            f" up to {args.batch_size:,} in {elapsed:.1f} s ({len(events) / elapsed:,.0f} events/s)"
        ),
    )
    return 0


def _merge(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    if args.name is not None:
        lake.meta.get_table(args.name)  # a clear error for a wrong name
    # The same ICEFLOE_MERGE_* settings as the worker function (limits, lease).
    worker = lake.merge_worker()
    started = time.perf_counter()
    bars: list[Progress] = []

    def round_planned(summary: OrchestratorSummary) -> None:
        if bars:
            bars[-1].close()
        label = f"merging (round {len(bars) + 1})"
        bars.append(
            Progress(summary.groups_sent, label, unit="groups", enabled=args.format != "json")
        )

    try:
        report = merge_locally(
            meta=lake.meta,
            worker=worker,
            table=args.name,
            until_quiet=args.wait,
            on_round=round_planned,
            on_outcome=lambda _: bars[-1].advance(),
        )
    finally:
        for bar in bars:
            bar.close()
    elapsed = time.perf_counter() - started
    # Once quiet, the opted-in tables are published (their heads moved with the merges).
    published = _keep_published(lake, args, args.name) if args.wait else None
    committed = [o for o in report.outcomes if o.status == "committed"]
    row = {
        "rounds": len(report.rounds),
        "merges": len(committed),
        "files_in": sum(o.files_in for o in committed),
        "files_out": sum(o.files_out for o in committed),
        "rows_in": sum(o.rows_in for o in committed),
        "rows_out": sum(o.rows_out for o in committed),
        "bytes_in": sum(o.bytes_in for o in committed),
        "bytes_out": sum(o.bytes_out for o in committed),
        "skipped": len(report.outcomes) - len(committed),
        "failed": len(report.dead_letters),
        "seconds": round(elapsed, 3),
    }
    # Files another merge holds (or held when it died) are not merged until their lease ends.
    names = [args.name] if args.name else [t.name for t in lake.meta.list_tables()]
    statuses = [lake.meta.status(name) for name in names]
    claimed = sum(s.claimed_files for s in statuses)
    until = max((s.claimed_until for s in statuses if s.claimed_until), default=None)
    claims = {
        "claimed_files": claimed,
        "claimed_until": until.isoformat(timespec="seconds") if until else None,
    }

    def text() -> str:
        line = (
            f"{_count(int(row['merges']), 'merge')} in {_count(int(row['rounds']), 'round')}:"
            f" {row['files_in']:,} files -> {row['files_out']:,},"
            f" {row['bytes_in'] / 1e6:,.1f} MB -> {row['bytes_out'] / 1e6:,.1f} MB,"
            f" {row['rows_in']:,} rows -> {row['rows_out']:,} in {elapsed:.1f} s"
        )
        if row["skipped"]:
            line += f"; {row['skipped']} skipped (claimed or merged elsewhere)"
        if row["failed"]:
            line += f"; {row['failed']} FAILED (see the log)"
        if claimed and until is not None:
            line += (
                f"; {_count(claimed, 'file')} still claimed by another merge (or one that"
                f" died) until {until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
            )
        if published is not None:
            line += "\n" + _publication_text(published)
        return line

    publication = {"published": published.to_json() if published is not None else None}
    _emit(out, args.format, {**row, **claims, **publication}, text)
    return EXIT_ERROR if report.dead_letters or (published and published.failed) else 0


def _compact(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    from icefloe.compaction.local import compact_locally

    lake.meta.get_table(args.name)
    started = time.perf_counter()
    bars: list[Progress] = []
    try:
        result = compact_locally(
            meta=lake.meta,
            objects=lake.objects,
            settings=lake.core,
            table=args.name,
            partitions=args.partition,
            engine=args.engine,
            worker=lake.merge_worker(),
            on_claimed=lambda manifest: bars.append(
                Progress(
                    len(manifest.groups),
                    f"compacting ({args.engine})",
                    unit="partitions",
                    enabled=args.format != "json",
                )
            ),
            on_partition=lambda _: bars[-1].advance(),
        )
    finally:
        for bar in bars:
            bar.close()
    elapsed = time.perf_counter() - started
    outcomes = result.partitions if result is not None else ()
    data = {
        "job_id": result.job_id if result is not None else None,
        "engine": args.engine,
        "seconds": round(elapsed, 3),
        "partitions": [asdict(o) for o in outcomes],
    }

    def text() -> str:
        if not outcomes:
            return "nothing to compact (no partition with two or more unclaimed files)"
        lines = [
            f"{o.partition_path}: {o.status}"
            + (
                f", {o.files_in:,} files -> {o.files_out:,}, {o.rows_in:,} rows -> {o.rows_out:,}"
                if o.status == "committed"
                else f" ({o.reason})"
                if o.reason
                else ""
            )
            for o in outcomes
        ]
        lines.append(f"{args.engine}: {_count(len(outcomes), 'partition')} in {elapsed:.1f} s")
        return "\n".join(lines)

    _emit(out, args.format, data, text)
    failed = [o for o in outcomes if o.status not in ("committed", "already_committed")]
    return EXIT_ERROR if failed else 0


def _gc(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    retention = parse_duration(args.retention) if args.retention is not None else None
    grace = parse_duration(args.orphan_grace) if args.orphan_grace is not None else None
    if args.name is not None:
        lake.meta.get_table(args.name)
    # Opted-in tables are published first: that expires their Iceberg snapshots past the
    # retention, so this collection may take the files only those kept.
    published = (
        None if args.dry_run else _keep_published(lake, args, args.name, retention=retention)
    )
    bars: list[Progress] = []
    deleted = 0

    def progress(done: int, total: int) -> None:
        if not bars:
            bars.append(Progress(total, "collecting", unit="tables", enabled=args.format != "json"))
        elif done:
            bars[0].advance()

    def files_deleted(n: int) -> None:
        nonlocal deleted
        deleted += n
        if bars:
            bars[0].note(f"{_count(deleted, 'file')} deleted")

    try:
        report = lake.janitor().run(
            table=args.name,
            retention=retention,
            orphan_grace=grace,
            dry_run=args.dry_run,
            max_files=args.max_files,
            on_progress=progress,
            on_deleted=files_deleted,
        )
    finally:
        for bar in bars:
            bar.close()

    def text() -> str:
        verb = "would delete" if report.dry_run else "deleted"
        lines = []
        for t in report.tables:
            lines.append(
                f"{t.table}: {_count(t.snapshots_expired, 'snapshot')}"
                f" {'would expire' if report.dry_run else 'expired'}; {verb}"
                f" {_count(t.files_deleted, 'dead file')} ({t.bytes_deleted / 1e6:,.1f} MB) and"
                f" {_count(t.orphans_found, 'orphan')} ({t.orphan_bytes / 1e6:,.1f} MB)"
                f" [retention {format_duration(t.retention)},"
                f" orphan grace {format_duration(t.orphan_grace)}]"
            )
            if report.dry_run:
                lines.extend(f"  dead   {p}" for p in t.dead_paths)
                lines.extend(f"  orphan {p}" for p in t.orphan_paths)
        lines.append(
            f"{_count(report.claims_freed, 'expired claim')}"
            f" {'to free' if report.dry_run else 'freed'},"
            f" {_count(report.receipts_pruned, 'old receipt')}"
            f" {'to prune' if report.dry_run else 'pruned'}"
        )
        lines.extend(f"{name}: FAILED: {error}" for name, error in report.failed_tables.items())
        lines.extend(
            f"{name}: purge held until its Iceberg table is dropped (publish iceberg --all with"
            " its catalog)"
            for name in report.purges_held
        )
        if published is not None:
            lines.append(_publication_text(published))
        return "\n".join(lines)

    row = {**report.to_json(), "published": published.to_json() if published else None}
    _emit(out, args.format, row, text)
    return EXIT_ERROR if report.failed_tables or (published and published.failed) else 0


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def _query(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    if args.format == "parquet" and not args.output:
        raise InvalidInputError("--format parquet needs --output FILE")
    if args.engine == "emr":
        return _query_on_emr(lake, args, out)
    if args.engine == "spark":
        if args.tenant is not None:
            raise InvalidInputError("--tenant needs the duckdb engine (its sandbox scopes tenants)")
        from icefloe.compaction.session import local_spark_session
        from icefloe.spark import query_with_spark

        rows = query_with_spark(
            local_spark_session(), args.sql, runtime=lake.runtime, snapshot_id=args.snapshot
        )
        write_result(rows, fmt=args.format, out=out, output=args.output)
        return 0
    result = lake.query_engine().query(args.sql, snapshot_id=args.snapshot, tenant=args.tenant)
    write_result(result.rows, fmt=args.format, out=out, output=args.output)
    return 0


def _query_on_emr(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    """Start a query job on EMR Serverless (see :mod:`icefloe.emr_query`); it writes its
    result as Parquet, so only ``--format table`` or ``json`` (of the job) apply."""
    import boto3

    from icefloe.emr_query import EmrQueryLauncher

    if args.tenant is not None:
        raise InvalidInputError("--tenant needs the duckdb engine (its sandbox scopes tenants)")
    if args.format not in ("table", "json") or args.output:
        raise InvalidInputError(
            "--engine emr writes its result as Parquet under the results location:"
            " --format csv/parquet and --output do not apply"
        )
    config = lake.settings.emr.job_config()
    if config is None:
        raise InvalidInputError(
            "--engine emr needs ICEFLOE_EMR_APPLICATION_ID, ICEFLOE_EMR_JOB_ROLE_ARN,"
            " ICEFLOE_EMR_ENTRY_POINT and ICEFLOE_EMR_ENVIRONMENT_ARCHIVE (the stack's outputs)"
        )
    settings = lake.core
    client = boto3.client("emr-serverless", region_name=settings.aws_region)
    launched = EmrQueryLauncher(
        meta=lake.meta,
        objects=lake.objects,
        client=client,
        config=config,
        results_uri=settings.results_location.uri,
    ).launch(args.sql, snapshot_id=args.snapshot)
    data = {
        "job_id": launched.job_id,
        "job_run_id": launched.job_run_id,
        "snapshots": launched.snapshots,
        "result_uri": launched.result_uri,
    }
    _emit(
        out,
        args.format,
        data,
        lambda: (
            f"started query job {launched.job_id} (EMR job run {launched.job_run_id}) over "
            + ", ".join(f"{t} at snapshot {s}" for t, s in launched.snapshots.items())
            + f"\nits result will be Parquet under {launched.result_uri}"
        ),
    )
    return 0


def _files(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    snapshot = lake.meta.resolve_snapshot(args.name, snapshot_id=args.snapshot)
    found = lake.meta.files(args.name, snapshot_id=snapshot) if snapshot else []
    rows = [
        {
            "path": lake.objects.uri(f.path),
            "partition": f.partition_path,
            "row_count": f.row_count,
            "size_bytes": f.size_bytes,
            "row_groups": f.row_group_count,
            "snapshot_added": f.begin_snapshot,
        }
        for f in found
    ]
    _emit(
        out,
        args.format,
        rows,
        lambda: _text_table(
            ["partition", "rows", "bytes", "path"],
            [[r["partition"], r["row_count"], r["size_bytes"], r["path"]] for r in rows],
        ),
    )
    return 0


def _snapshots(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    snaps = lake.meta.snapshots(args.name)
    rows = [asdict(s) for s in snaps]
    _emit(
        out,
        args.format,
        rows,
        lambda: _text_table(
            ["snapshot_id", "operation", "committed_at", "files +/-", "rows +/-"],
            [
                [
                    s.snapshot_id,
                    s.operation
                    if s.rolled_back_to is None
                    else f"{s.operation} to {s.rolled_back_to}",
                    s.committed_at.isoformat(timespec="seconds"),
                    f"+{s.files_added}/-{s.files_removed}",
                    f"+{s.rows_added}/-{s.rows_removed}",
                ]
                for s in snaps
            ],
        ),
    )
    return 0


def _delete(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    result = delete_rows(
        meta=lake.meta,
        objects=lake.objects,
        table=args.name,
        where=args.where,
        dry_run=args.dry_run,
        configure=lake.duckdb_configure,
    )

    def text() -> str:
        counts = (
            f"{result.rows_deleted:,} rows in {len(result.changes)} of"
            f" {result.files_scanned} files read ({result.files_rewritten} rewritten,"
            f" {result.files_removed} removed; {result.files_considered} considered)"
        )
        if result.dry_run:
            lines = [f"{result.table}: would delete {counts}"]
            lines += [
                f"  {c.action:<7}  {c.path}  {c.rows_deleted:,} of {c.rows:,} rows"
                for c in result.changes
            ]
            return "\n".join(lines)
        if result.snapshot_id is None:
            return f"{result.table}: no row matches; nothing committed"
        return f"{result.table}: snapshot {result.snapshot_id} deleted {counts}"

    _emit(out, args.format, result.to_json(), text)
    return 0


def _deletes(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    jobs = DeleteJobStore(lake.meta).jobs(args.name)
    _emit(
        out,
        args.format,
        [job.to_json() for job in jobs],
        lambda: _text_table(
            ["job_id", "table", "state", "parts", "rows_deleted", "snapshot", "where"],
            [
                [
                    job.job_id,
                    job.table,
                    job.state if job.error is None else f"{job.state}: {job.error}",
                    f"{job.parts_done}/{job.parts}",
                    job.rows_deleted,
                    job.snapshot_id,
                    job.predicate,
                ]
                for job in jobs
            ],
        ),
    )
    return 0


def _rollback(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    result = rollback_table(
        meta=lake.meta, objects=lake.objects, table=args.name, to_snapshot=args.to_snapshot
    )

    def text() -> str:
        if result.snapshot_id is None:
            return (
                f"{result.table}: the live files are those of snapshot {result.to_snapshot}"
                " already; nothing committed"
            )
        return (
            f"rolled {result.table} back to snapshot {result.to_snapshot}: snapshot"
            f" {result.snapshot_id} holds its {result.files_kept + result.files_restored} files"
            f" ({result.rows:,} rows): {result.files_kept} kept, {result.files_removed} removed,"
            f" {result.files_restored} restored by copy ({result.bytes_copied:,} bytes)"
        )

    _emit(out, args.format, result.to_json(), text)
    return 0


def _status(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    names = [args.name] if args.name else [t.name for t in lake.meta.list_tables()]
    statuses = [lake.meta.status(name) for name in names]
    rows = [asdict(s) for s in statuses]
    publications = PublicationStore(lake.meta)
    now = datetime.now(UTC)
    published = {name: publications.states(name) for name in names}
    for row in rows:
        row["published"] = [
            {**asdict(p), "lag_seconds": round(p.lag(now).total_seconds(), 3)}
            for p in published[row["table"]]
        ]
    shapes = lake.meta.partition_shapes(args.name) if args.name else []
    if args.name:
        rows[0]["by_partition"] = [asdict(shape) for shape in shapes]
        rows[0]["size_buckets_bytes"] = list(FILE_SIZE_BUCKETS)

    def text() -> str:
        summary = _text_table(
            ["table", "head", "live_files", "partitions", "rows", "bytes"],
            [
                [s.table, s.head_snapshot_id, s.live_files, s.partitions, s.rows, s.bytes]
                for s in statuses
            ],
        )
        lines = [
            f"{name}: published to {p.catalog} at snapshot {p.snapshot_id}"
            + (
                " (current)"
                if p.behind_since is None
                else f" ({_count(p.snapshots_behind, 'snapshot')} behind, lag"
                f" {format_duration(p.lag(now))})"
            )
            for name, states in published.items()
            for p in states
        ]
        summary = "\n".join([summary, *lines])
        if not args.name:
            return summary
        return f"{summary}\n\n{_shape_text(shapes)}"

    _emit(out, args.format, rows, text)
    return 0


_BARS = "·▁▂▃▄▅▆▇█"  # a dot for none, then eighths of the busiest bucket


def _shape_text(shapes: Sequence[PartitionShape]) -> str:
    """Each partition's files, rows and bytes, and a histogram of the whole table's file sizes
    (people would rather see the shape of a table than read a column of numbers)."""
    labels = [f"<{_size(b)}" for b in FILE_SIZE_BUCKETS] + [f">={_size(FILE_SIZE_BUCKETS[-1])}"]
    peak = max((max(s.size_buckets) for s in shapes), default=0) or 1
    per_partition = _text_table(
        ["partition", "files", "rows", "bytes", "sizes " + " ".join(["<64K", "..", ">=256M"])],
        [
            [
                s.partition_path or "(unpartitioned)",
                s.files,
                s.rows,
                s.bytes,
                "".join(_BARS[-(-count * (len(_BARS) - 1) // peak)] for count in s.size_buckets),
            ]
            for s in shapes
        ],
    )
    totals = [sum(s.size_buckets[i] for s in shapes) for i in range(len(labels))]
    top = max(totals, default=0) or 1
    histogram = "\n".join(
        f"  {label:>8}  {'█' * -(-count * 40 // top) if count else ''} {count}"
        for label, count in zip(labels, totals, strict=True)
    )
    return f"{per_partition}\n\nlive file sizes:\n{histogram}"


def _size(n: int) -> str:
    for unit in ("", "K", "M", "G"):
        if n < 1024:
            return f"{n}{unit}"
        n //= 1024
    return f"{n}T"


_COMMANDS: dict[str, Callable[[Lake, argparse.Namespace, TextIO], int]] = {
    "init": _init,
    "table create": _table_create,
    "table list": _table_list,
    "table show": _table_show,
    "table drop": _table_drop,
    "table alter": _table_alter,
    "publish iceberg": _publish_iceberg,
    "insert": _insert,
    "demo": _demo,
    "merge": _merge,
    "gc": _gc,
    "compact": _compact,
    "query": _query,
    "files": _files,
    "delete": _delete,
    "deletes": _deletes,
    "rollback": _rollback,
    "snapshots": _snapshots,
    "status": _status,
}


def _emit(out: TextIO, fmt: str, data: Any, text: Callable[[], str]) -> None:
    if fmt == "json":
        json.dump(data, out, default=_json_default, indent=2)
        out.write("\n")
    else:
        print(text(), file=out)


def _json_default(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _text_table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers, *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    if not rows:
        lines.append("(none)")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
