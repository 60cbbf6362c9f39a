"""Queries in a child process whose memory is watched: the hard backstop behind DuckDB's limits.

DuckDB's ``memory_limit`` governs its buffer manager, not every allocation: a query such as
``SELECT list(range(0, 40000000))`` builds one huge value and passes the limit several times
over. So the CLI and the query Lambda run DuckDB in a child process (``python -m
icefloe.query.child_main``, started once and kept warm) and the parent samples the child's
resident memory every few milliseconds: past the memory limit plus a margin, or past the time
limit plus a grace, the child is killed, the query fails with an error naming the limit, and
the next query starts a new child. Linux only (the parent reads ``/proc``); elsewhere the child
still runs the query, without the memory watch.

The pipe carries length-prefixed frames: JSON requests and answers, results as Arrow IPC.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from icefloe.errors import ConfigError, IcefloeError, InvalidInputError
from icefloe.query.executor import (
    InProcessExecutor,
    QueryFailedError,
    QueryReadError,
    QueryRefusedByDuckDB,
    ViewBinding,
    memory_limit_error,
)
from icefloe.query.s3_access import S3Endpoint
from icefloe.query.sandbox import QueryLimitError, QueryTimeoutError
from icefloe.settings import process_environment
from icefloe.settings.limits import QueryLimits

# Above the memory limit before the child is killed: the interpreter, pyarrow and DuckDB's own
# code and caches, which the memory limit does not count.
DEFAULT_MARGIN_BYTES = 384 * 2**20
POLL_S = 0.002
TIMEOUT_GRACE_S = 5.0

_ERRORS: dict[str, type[InvalidInputError]] = {
    cls.__name__: cls
    for cls in (
        QueryTimeoutError,
        QueryLimitError,
        QueryRefusedByDuckDB,
        QueryReadError,
        QueryFailedError,
    )
}


@dataclass(frozen=True, slots=True)
class ChildStats:
    """What the watch saw of the child during the last query."""

    pid: int
    peak_rss_bytes: int  # the child's VmHWM: its peak resident memory since it started


class ChildProcessExecutor:
    """Runs queries in a warm child process, killed when it passes a limit."""

    def __init__(
        self,
        *,
        root_uri: str,
        limits: QueryLimits,
        s3: S3Endpoint | None = None,
        margin_bytes: int = DEFAULT_MARGIN_BYTES,
        timeout_grace_s: float = TIMEOUT_GRACE_S,
    ) -> None:
        """``margin_bytes`` and ``timeout_grace_s``: how far past the memory and time limits
        the child may go before it is killed (DuckDB's own limits act first)."""
        self.limits = limits
        self._root_uri = root_uri
        self._s3 = s3
        self._margin = margin_bytes
        self._grace_s = timeout_grace_s
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.last_stats: ChildStats | None = None

    @property
    def memory_ceiling_bytes(self) -> int:
        """The child's resident memory at which it is killed."""
        return self.limits.memory_bytes + self._margin

    def execute(
        self, statement: str, views: Sequence[ViewBinding], *, without_filter_pushdown: bool
    ) -> pa.Table:
        with self._lock:
            child = self._ensure_child()
            request = {
                "op": "query",
                "statement": statement,
                "without_filter_pushdown": without_filter_pushdown,
                "views": [list(v) for v in views],
            }
            watch = _Watch(
                child,
                ceiling=self.memory_ceiling_bytes,
                seconds=self.limits.timeout_s + self._grace_s,
            )
            watch.start()
            try:
                _write_frame(_stdin(child), json.dumps(request).encode())
                header = _read_frame(_stdout(child))
                payload = _read_frame(_stdout(child)) if header is not None else None
            except (BrokenPipeError, OSError):
                header = payload = None
            finally:
                watch.stop()
            self.last_stats = ChildStats(child.pid, watch.peak_rss)
            if header is None or payload is None:
                self._reap()
                raise self._death_error(watch)
            answer = json.loads(header)
            if not answer["ok"]:
                error = _ERRORS.get(answer["kind"], InvalidInputError)
                raise error(answer["message"])
            return pa.ipc.open_stream(payload).read_all()

    def forget_views(self) -> None:
        with self._lock:
            if self._child is not None and self._child.poll() is None:
                with contextlib.suppress(OSError):
                    _write_frame(_stdin(self._child), b'{"op": "forget"}')
                    _read_frame(_stdout(self._child))

    def close(self) -> None:
        with self._lock:
            self._reap()

    def _death_error(self, watch: _Watch) -> InvalidInputError:
        if watch.reason == "memory":
            return memory_limit_error(
                self.limits,
                f"the query process reached {watch.peak_rss / 2**20:,.0f} MiB and was stopped"
                f" (the ceiling is the limit plus {self._margin / 2**20:,.0f} MiB)",
            )
        if watch.reason == "time":
            return QueryTimeoutError(
                f"query stopped after {self.limits.timeout_s:g} s (the time limit,"
                " ICEFLOE_QUERY_TIMEOUT_S)"
            )
        return QueryFailedError("query failed: the query process ended unexpectedly")

    def _ensure_child(self) -> subprocess.Popen[bytes]:
        if self._child is not None and self._child.poll() is None:
            return self._child
        self._reap()
        child = subprocess.Popen(
            [sys.executable, "-m", "icefloe.query.child_main"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_child_environment(),
        )
        init = {
            "root_uri": self._root_uri,
            "limits": dataclasses.asdict(self.limits),
            "s3": dataclasses.asdict(self._s3) if self._s3 is not None else None,
        }
        _write_frame(_stdin(child), json.dumps(init).encode())
        ack = _read_frame(_stdout(child))
        if ack is None or not json.loads(ack).get("ok"):
            child.kill()
            child.wait()
            message = json.loads(ack)["message"] if ack else "it exited at start"
            raise ConfigError(f"the query process could not start: {message}")
        self._child = child
        return child

    def _reap(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


class _Watch:
    """Samples the child's resident memory and the clock while a query runs."""

    def __init__(self, child: subprocess.Popen[bytes], *, ceiling: int, seconds: float) -> None:
        self._child = child
        self._ceiling = ceiling
        self._deadline = time.monotonic() + seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.reason: str | None = None
        self.peak_rss = 0
        self._status = Path(f"/proc/{child.pid}/status")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, hwm = _memory(self._status)
            self.peak_rss = max(self.peak_rss, hwm)
            if rss > self._ceiling:
                self._kill("memory")
                return
            if time.monotonic() > self._deadline:
                self._kill("time")
                return
            self._stop.wait(POLL_S)
        rss, hwm = _memory(self._status)
        self.peak_rss = max(self.peak_rss, hwm)

    def _kill(self, reason: str) -> None:
        self.reason = reason
        _, hwm = _memory(self._status)
        self.peak_rss = max(self.peak_rss, hwm)
        with contextlib.suppress(ProcessLookupError):
            self._child.kill()


def _memory(status: Path) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes; zeros where /proc has no such file."""
    rss = hwm = 0
    try:
        text = status.read_text()
    except OSError:
        return 0, 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return rss, hwm


def _child_environment() -> dict[str, str]:
    env = process_environment()
    # The child imports icefloe from wherever this process found it.
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def _stdin(child: subprocess.Popen[bytes]) -> IO[bytes]:
    assert child.stdin is not None
    return child.stdin


def _stdout(child: subprocess.Popen[bytes]) -> IO[bytes]:
    assert child.stdout is not None
    return child.stdout


def _write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(struct.pack(">Q", len(payload)))
    stream.write(payload)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> bytes | None:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack(">Q", head)
    body = stream.read(size)
    return body if len(body) == size else None


# -- the child --------------------------------------------------------------------------------


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The child's loop (see :mod:`icefloe.query.child_main`): init, then one query a frame."""
    init_frame = _read_frame(inp)
    if init_frame is None:
        return
    try:
        init: dict[str, Any] = json.loads(init_frame)
        limits = QueryLimits(**init["limits"])
        endpoint = S3Endpoint(**init["s3"]) if init["s3"] else None
        executor = InProcessExecutor(
            root_uri=init["root_uri"],
            limits=limits,
            configure=endpoint.configure if endpoint is not None else None,
        )
    except (IcefloeError, TypeError, KeyError, ValueError) as e:
        _write_frame(out, json.dumps({"ok": False, "message": str(e)}).encode())
        return
    _write_frame(out, b'{"ok": true}')
    while (frame := _read_frame(inp)) is not None:
        request = json.loads(frame)
        if request["op"] == "forget":
            executor.forget_views()
            _write_frame(out, b'{"ok": true}')
            continue
        views = [(str(t), str(b)) for t, b in request["views"]]
        try:
            table = executor.execute(
                request["statement"],
                views,
                without_filter_pushdown=bool(request["without_filter_pushdown"]),
            )
        except IcefloeError as e:
            answer = {"ok": False, "kind": type(e).__name__, "message": str(e)}
            _write_frame(out, json.dumps(answer).encode())
            _write_frame(out, b"")
            continue
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        _write_frame(out, b'{"ok": true}')
        _write_frame(out, sink.getvalue().to_pybytes())
