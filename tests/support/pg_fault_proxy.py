"""A TCP proxy in front of the test Postgres that cuts the connection on a chosen message.

It injects real network failures (the client sees a dropped socket, the server sees a vanished
client) at precise points of the commit protocol, without touching the code under test.
"""

from __future__ import annotations

import select
import socket
import threading
from dataclasses import dataclass, field
from typing import Literal

from psycopg.conninfo import conninfo_to_dict

Mode = Literal["drop_before", "drop_after", "answer_error"]
# The end of a server's answer: ReadyForQuery, idle.
_READY = b"Z\x00\x00\x00\x05I"


@dataclass
class Fault:
    """Cut the connection the first time the client sends a message containing ``marker``.

    ``drop_before``: the message never reaches the server. ``drop_after``: the server gets it
    (and acts on it), but its answer never reaches the client. ``answer_error``: the server
    gets it and acts on it, and the client gets an error in place of its answer, the
    connection kept (as a pooler in front of the server might answer).
    """

    marker: bytes
    mode: Mode
    fired: threading.Event = field(default_factory=threading.Event)


class PgFaultProxy:
    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "localhost")
        port = int(str(params.get("port") or 5432))
        if host.startswith("/"):
            self._upstream: tuple[int, object] = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
        else:
            self._upstream = (socket.AF_INET, (host, port))
        self._params = params
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self.fault: Fault | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def dsn(self) -> str:
        user = self._params.get("user") or "postgres"
        dbname = self._params.get("dbname") or "postgres"
        password = self._params.get("password")
        auth = f"{user}:{password}" if password else str(user)
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}?sslmode=disable"

    def arm(self, marker: bytes, mode: Mode) -> Fault:
        fault = Fault(marker=marker, mode=mode)
        with self._lock:
            self.fault = fault
        return fault

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            family, address = self._upstream
            server = socket.socket(family, socket.SOCK_STREAM)
            server.connect(address)  # type: ignore[arg-type]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _take_fault(self, data: bytes) -> Fault | None:
        with self._lock:
            fault = self.fault
            if fault is not None and fault.marker in data:
                self.fault = None
                return fault
        return None

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([client, server], [], [], 1.0)
                if self._closed.is_set():
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        fault = self._take_fault(data)
                        if fault is not None and fault.mode == "answer_error":
                            server.sendall(data)
                            _swallow_answer(server)
                            client.sendall(_error_then_ready(b"08P01", b"server answer lost"))
                            fault.fired.set()
                            continue
                        if fault is not None:
                            if fault.mode == "drop_after":
                                server.sendall(data)
                                # Let the server act before the client's socket vanishes.
                                select.select([server], [], [], 2.0)
                            fault.fired.set()
                            return
                        server.sendall(data)
                    else:
                        client.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            server.close()


def _swallow_answer(server: socket.socket) -> None:
    """Read the server's answer up to ReadyForQuery and drop it."""
    answer = b""
    while not answer.endswith(_READY):
        chunk = server.recv(65536)
        if not chunk:
            return
        answer += chunk


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + (len(body) + 4).to_bytes(4, "big") + body


def _error_then_ready(sqlstate: bytes, text: bytes) -> bytes:
    fields = b"SERROR\0VERROR\0C" + sqlstate + b"\0M" + text + b"\0\0"
    return _message(b"E", fields) + _message(b"Z", b"I")
