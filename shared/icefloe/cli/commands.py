"""Which handler runs each command: every one takes the lake ``main`` opened, the parsed
arguments and the output stream, and returns the exit code."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable
from contextlib import suppress
from typing import TextIO

from icefloe.cli.inserts import demo_command, insert_command
from icefloe.cli.lifecycle import (
    delete_command,
    deletes_command,
    rollback_command,
    snapshots_command,
)
from icefloe.cli.maintenance import compact_command, gc_command, merge_command, status_command
from icefloe.cli.publish import publish_iceberg_command
from icefloe.cli.reads import changes_command, files_command, query_command
from icefloe.cli.tables import (
    init_command,
    table_alter_command,
    table_create_command,
    table_drop_command,
    table_list_command,
    table_paths_command,
    table_show_command,
)
from icefloe.errors import IcefloeError, TableNotFoundError
from icefloe.lake import Lake

_COMMANDS: dict[str, Callable[[Lake, argparse.Namespace, TextIO], int]] = {
    "init": init_command,
    "table create": table_create_command,
    "table list": table_list_command,
    "table show": table_show_command,
    "table paths": table_paths_command,
    "table drop": table_drop_command,
    "table alter": table_alter_command,
    "publish iceberg": publish_iceberg_command,
    "insert": insert_command,
    "demo": demo_command,
    "merge": merge_command,
    "gc": gc_command,
    "compact": compact_command,
    "query": query_command,
    "files": files_command,
    "changes": changes_command,
    "delete": delete_command,
    "deletes": deletes_command,
    "rollback": rollback_command,
    "snapshots": snapshots_command,
    "status": status_command,
}


def run_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    """Run the parsed command over ``lake``; a table it does not find is named with the closest
    existing one."""
    try:
        return _COMMANDS[_command_key(args)](lake, args, out)
    except TableNotFoundError as e:
        raise TableNotFoundError(f"{e}{_closest_table(lake, e)}") from e


def _command_key(args: argparse.Namespace) -> str:
    sub = getattr(args, f"{args.command}_command", None)
    return f"{args.command} {sub}" if sub else str(args.command)


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
