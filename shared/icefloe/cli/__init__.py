"""The icefloe command line: thin argument parsing over the core.

Every command prints one line "icefloe: error: ..." and exits non-zero on bad input (with the
closest command or table name when one is mistyped), and takes --format json. Exit 2
(``EXIT_USAGE``): the command line itself is wrong, and nothing ran; exit 1 (``EXIT_ERROR``):
the command ran and refused the request (an unknown table, SQL or data it rejects) or failed.

``main`` reads the settings once, opens a :class:`~icefloe.lake.Lake` and runs the command's
handler over it: the grammar is in :mod:`icefloe.cli.parser`, the dispatch in
:mod:`icefloe.cli.commands`, and each group of commands in a module of its own (``tables``,
``inserts``, ``reads``, ``lifecycle``, ``maintenance``, ``publish``, ``environment``,
``completion``), all printing through :mod:`icefloe.cli.output`.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from icefloe.cli.commands import run_command
from icefloe.cli.completion import completion_script, long_options, subcommands
from icefloe.cli.environment import db_command, settings_command
from icefloe.cli.inserts import INSERT_PROGRESS_MIN_BYTES
from icefloe.cli.output import EXIT_ERROR, EXIT_USAGE
from icefloe.cli.parser import build_parser, parse_command_line
from icefloe.errors import IcefloeError
from icefloe.lake import Lake
from icefloe.metastore.secrets import with_database_secret
from icefloe.settings import load_settings

__all__ = [
    "EXIT_ERROR",
    "EXIT_USAGE",
    "INSERT_PROGRESS_MIN_BYTES",
    "build_parser",
    "completion_script",
    "long_options",
    "main",
    "parse_command_line",
    "subcommands",
]


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    if out is None and hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `icefloe ... | head` ends quietly
    out = out or sys.stdout
    parser = build_parser()
    args = parse_command_line(parser, argv)  # a fault of the command line exits EXIT_USAGE
    if args.command == "completion":
        print(completion_script(parser, args.shell), file=out)
        return 0
    try:
        # The one read of the environment: commands that need more than the runtime (query
        # limits, merge settings, EMR) find the whole tree in args.settings.
        args.settings = load_settings()
        if args.command == "settings":  # before any secret or server: it must always answer
            return settings_command(args, out)
        if args.command == "db":
            # A deployed stack's meta store is reachable through its secret, as for its
            # functions (the Lake below reads it the same way).
            settings, _ = with_database_secret(
                args.settings.core, secret_arn=args.settings.database_secret_arn
            )
            return db_command(settings, args, out)
        # Two connections, and one more for each merge `icefloe merge` may run at once.
        connections = 2 + args.settings.merge.local_workers
        with Lake.open(args.settings, max_connections=connections) as lake:
            return run_command(lake, args, out)
    except IcefloeError as e:
        print(f"icefloe: error: {e}", file=sys.stderr)
        return EXIT_ERROR
