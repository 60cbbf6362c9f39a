"""``settings`` and ``db``: the commands that answer before, and without, opening a lake (no
secret fetched for ``settings``, no server started by ``db``)."""

from __future__ import annotations

import argparse
from typing import TextIO

from icefloe.cli.output import emit, text_table
from icefloe.config import CoreSettings
from icefloe.metastore.embedded import embedded_status, stop_embedded
from icefloe.settings import shown_settings


def db_command(settings: CoreSettings, args: argparse.Namespace, out: TextIO) -> int:
    """``db stop`` and ``db status``: they never start the server, and work after any crash."""
    if args.db_command == "stop":
        stopped = stop_embedded(settings.embedded_database_dir)
        emit(
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

    emit(out, args.format, status, text)
    return 0


def settings_command(args: argparse.Namespace, out: TextIO) -> int:
    shown = shown_settings()

    def text() -> str:
        rows = [
            [s.name, s.value if s.value is not None else f"(default) {s.default}"] for s in shown
        ]
        return text_table(["variable", "value"], rows)

    emit(out, args.format, shown, text)
    return 0
