"""The command line's grammar: ``build_parser`` and its argparse plumbing, one helper per group
of commands (in the order ``icefloe --help`` lists them). Errors are one line,
"icefloe: error: ...", with the closest choice when a command is mistyped.

Every fault of the command line itself is found here, before any setting is read or the meta
store is opened, and exits :data:`EXIT_USAGE` (2): an unknown command or option, a missing
argument, an option value of the wrong form (each option's ``type`` checks it, so the message
names the option), and options that conflict or need each other (:func:`parse_command_line`).
What only the lake can judge (table and column names, SQL, a schema, a predicate, snapshots
and partitions that exist) it refuses when the command runs, with exit 1."""

from __future__ import annotations

import argparse
import difflib
import re
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from icefloe import __version__
from icefloe.cli import option_values as values
from icefloe.cli.inserts import INSERT_PROGRESS_MIN_BYTES
from icefloe.cli.output import EXIT_USAGE
from icefloe.ingest import INPUT_FORMATS
from icefloe.janitor import DEFAULT_MAX_FILES
from icefloe.settings import VARIABLES
from icefloe.spec.presets import PRESETS

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
  (python -m icefloe.settings, and docs/configuration.md, give each default and meaning)"""


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


# Options that conflict or need each other: one check per command (set as its parser's
# ``_check`` default), which names the fault or returns None.
_Check = Callable[[argparse.Namespace], str | None]


def parse_command_line(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """``parser.parse_args(argv)``, then the command's check of how its options combine:
    either fault exits :data:`EXIT_USAGE` with one line, before the command runs."""
    args = parser.parse_args(argv)
    check: _Check | None = getattr(args, "_check", None)
    problem = check(args) if check is not None else None
    if problem is not None:
        parser.error(problem)
    return args


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
    _add_setup_commands(commands)
    _add_table_commands(commands)
    _add_insert_command(commands)
    _add_read_commands(commands)
    _add_lifecycle_commands(commands)
    _add_maintenance_commands(commands)
    _add_demo_command(commands)
    _add_publish_commands(commands)
    _add_db_commands(commands)
    return parser


def _add_setup_commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``init``, ``completion`` and ``settings``: setting up, and seeing the setup."""
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


def _add_table_commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``table create|list|show|drop|alter`` (handlers in :mod:`icefloe.cli.tables`)."""
    table = commands.add_parser("table", help="create, list and show tables")
    table_commands = table.add_subparsers(dest="table_command", required=True, parser_class=_Parser)
    create = table_commands.add_parser("create", help="register a table")
    create.add_argument("name")
    create.add_argument("--schema", help='e.g. "ts TIMESTAMP NOT NULL, event VARCHAR"')
    create.add_argument("--preset", choices=sorted(PRESETS), help="a ready-made spec: segment")
    create.add_argument("--partition-by", help='e.g. "day(ts), bucket[16](user_id)"')
    create.add_argument("--sort-by", help='e.g. "event, ts"')
    create.add_argument("--row-group-by", help="a column: one key per row group")
    create.add_argument("--merge", help="append (the default) | replace(KEY[; version=COL]) | ...")
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
    create.set_defaults(_check=values.check_create)
    _add_format(create)
    _add_format(table_commands.add_parser("list", help="list tables"))
    show = table_commands.add_parser("show", help="show a table's spec and head")
    show.add_argument("name")
    _add_format(show)
    paths = table_commands.add_parser(
        "paths",
        help="list the JSON paths in a table's newest files, with the generated column"
        " declaring each",
        epilog="Reads the newest --files files (by the snapshot that added them), --rows rows"
        " at most. Each path: how many rows hold it, the JSON types seen, the type a generated"
        " column takes (BIGINT, DOUBLE, BOOLEAN, VARCHAR, or JSON when mixed or nested) and its"
        " declaration for table create --schema. Paths inside lists are folded to [*] and"
        " have no declaration.",
    )
    paths.add_argument("name")
    paths.add_argument("--column", help="the JSON column (default: the table's only one)")
    paths.add_argument(
        "--files", type=values.positive_int, default=10, help="newest files to read (default 10)"
    )
    paths.add_argument(
        "--rows",
        type=values.positive_int,
        default=100_000,
        help="rows to read at most (default 100000)",
    )
    _add_format(paths)
    drop = table_commands.add_parser(
        "drop",
        help="drop a table: gone from listings and queries at once, its objects deleted by gc"
        " after the table's retention",
    )
    drop.add_argument("name")
    _add_format(drop)
    _add_table_alter(table_commands)


def _add_table_alter(table_commands: argparse._SubParsersAction[_Parser]) -> None:
    """``table alter``: each change flag repeatable, collected in command-line order."""
    alter = table_commands.add_parser(
        "alter",
        help="change a table's schema (one new version; no data rewritten)",
        epilog="Changes apply in the order given, as one new schema version. Rows written"
        " before read an added column as NULL; a rename keeps the data; a dropped column's"
        " name can be added again, empty. Partition columns, the row-group key and the tenant"
        " column cannot be dropped, renamed or widened. A dotted name changes a field inside a"
        ' struct column (--add-column "context.page.title VARCHAR", --rename-column'
        " context.ip=context.client_ip). Queries pinned at an earlier snapshot keep the schema"
        " they had.",
    )
    alter.add_argument("name")
    for flag, kind, metavar, text in (
        ("--add-column", "add", '"c TYPE"', "add a nullable column (or c.field: a struct field)"),
        ("--drop-column", "drop", "c", "drop a column (or c.field)"),
        ("--rename-column", "rename", "old=new", "rename a column or field (its data stays)"),
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
    alter.set_defaults(_check=values.check_alter)
    _add_format(alter)


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


def _add_insert_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``insert`` (handler in :mod:`icefloe.cli.inserts`)."""
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
    insert.add_argument("source", type=values.path, help="a file, or - for stdin")
    insert.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        help="default: from the file name (.json, .ndjson/.jsonl, .csv, .parquet); ndjson for stdin",
    )
    insert.add_argument(
        "--idempotency-key",
        type=values.idempotency_key,
        help="a retry with the same key commits nothing new",
    )
    _add_format(insert)


def _add_read_commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``query``, ``changes`` and ``files`` (handlers in :mod:`icefloe.cli.reads`)."""
    query = commands.add_parser("query", help="run one SELECT over snapshot-pinned tables")
    query.add_argument("sql", nargs="?", help="the SELECT (or give it with -f)")
    query.add_argument(
        "-f",
        "--file",
        dest="sql_file",
        type=values.path,
        help="read the SELECT from this file (- for stdin)",
    )
    query.add_argument(
        "--snapshot", type=values.snapshot_id, help="pin this snapshot (the query names one table)"
    )
    query.add_argument(
        "--format", choices=("table", "json", "csv", "parquet"), help=values.OUTPUT_FORMAT_HELP
    )
    query.add_argument(
        "--output", type=values.path, help="write the result to this file (parquet needs it)"
    )
    query.add_argument("--tenant", help="see only this tenant's rows of every table")
    query.add_argument(
        "--stats",
        action="store_true",
        help="after the result, one JSON line on stderr per table read: table, snapshot_id,"
        " files_considered, files_scanned, bytes_scanned (duckdb engine)",
    )
    query.add_argument(
        "--engine",
        choices=("duckdb", "spark", "emr"),
        default="duckdb",
        help="duckdb (default: sandboxed, warm), spark (local Spark, for big scans; not"
        " sandboxed), or emr (a Spark job on EMR Serverless, ICEFLOE_EMR_*: prints the job and"
        " where its Parquet result will be)",
    )
    query.set_defaults(_check=values.check_query)

    changes = commands.add_parser(
        "changes",
        help="the rows a table gained and lost after a snapshot (merges that keep rows are"
        " invisible)",
    )
    changes.add_argument("name")
    changes.add_argument(
        "--since",
        type=values.snapshot_id,
        required=True,
        metavar="N",
        help="changes after snapshot N (0: all)",
    )
    changes.add_argument(
        "--until", type=values.snapshot_id, metavar="M", help="up to snapshot M (the head)"
    )
    changes.add_argument(
        "--table-id",
        type=values.positive_int,
        metavar="T",
        help="the table id the position was read from (the previous summary's table_id):"
        " refused when the table was dropped and created again since",
    )
    changes.add_argument(
        "--format", choices=("table", "json", "csv", "parquet"), help=values.OUTPUT_FORMAT_HELP
    )
    changes.add_argument(
        "--output", type=values.path, help="write the rows to this file (parquet needs it)"
    )
    changes.set_defaults(_check=values.check_changes)

    files = commands.add_parser("files", help="the files of a table at a snapshot")
    files.add_argument("name")
    files.add_argument("--snapshot", type=values.snapshot_id, help="default: the head")
    _add_format(files)


def _add_lifecycle_commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``delete``, ``deletes``, ``rollback`` and ``snapshots`` (:mod:`icefloe.cli.lifecycle`)."""
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
        type=values.snapshot_id,
        required=True,
        metavar="N",
        help="the snapshot to go back to (see `icefloe snapshots NAME`); it must not have expired",
    )
    _add_format(rollback)

    snapshots = commands.add_parser("snapshots", help="list a table's snapshots")
    snapshots.add_argument("name")
    _add_format(snapshots)


def _add_maintenance_commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``status``, ``merge``, ``compact`` and ``gc`` (:mod:`icefloe.cli.maintenance`)."""
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
        "--partition",
        action="append",
        type=values.partition_path,
        help="a partition path, e.g. day=2026-11-02 (repeatable)",
    )
    compact.add_argument("--engine", choices=("spark", "duckdb"), default="spark")
    _add_format(compact)

    gc = commands.add_parser(
        "gc", help="expire old snapshots, delete files no snapshot needs, sweep orphans"
    )
    gc.add_argument("name", nargs="?", help="one table (default: every table)")
    gc.add_argument(
        "--retention",
        type=values.duration,
        help="keep snapshots this long (e.g. 0s, 90m, 3d; default: the table's)",
    )
    gc.add_argument(
        "--orphan-grace",
        type=values.orphan_grace,
        help="delete unregistered objects older than this (at least 1h; default: the table's, 1d)",
    )
    gc.add_argument(
        "--dry-run", action="store_true", help="delete nothing; report what would be deleted"
    )
    gc.add_argument(
        "--max-files",
        type=values.positive_int,
        default=DEFAULT_MAX_FILES,
        help="dead files per table per run",
    )
    _add_format(gc)


def _add_demo_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``demo`` (handler in :mod:`icefloe.cli.inserts`)."""
    demo = commands.add_parser("demo", help="create an events table and insert sample events")
    demo.add_argument(
        "--events",
        type=values.positive_int,
        default=300_000,
        help="how many events (default 300,000)",
    )
    demo.add_argument(
        "--batch-size",
        type=values.positive_int,
        default=2_000,
        help="events per insert (default 2,000)",
    )
    demo.add_argument(
        "--days", type=values.positive_int, default=7, help="days the events span (default 7)"
    )
    _add_format(demo)


def _add_publish_commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``publish iceberg`` (handler in :mod:`icefloe.cli.publish`)."""
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
        type=values.duration,
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
    iceberg.set_defaults(_check=values.check_publish_iceberg)
    _add_format(iceberg)


def _add_db_commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``db stop|status`` (handler in :mod:`icefloe.cli.environment`)."""
    db = commands.add_parser("db", help="the embedded Postgres meta store")
    db_commands = db.add_subparsers(dest="db_command", required=True, parser_class=_Parser)
    _add_format(
        db_commands.add_parser("stop", help="stop the embedded Postgres under ICEFLOE_HOME")
    )
    db_status = db_commands.add_parser(
        "status", help="whether the embedded Postgres runs, and which processes use it"
    )
    _add_format(db_status)


def _add_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("table", "json"), default="table")
