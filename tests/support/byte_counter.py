"""A TCP proxy that counts the bytes a server sends back and the HTTP requests sent to it: how
much of an object a reader fetched, in how many requests. Used by tests and the S3 benchmark."""

from __future__ import annotations

import select
import socket
import threading


class CountingProxy:
    def __init__(self, *, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(32)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self.bytes_down = 0
        self.requests = 0
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self._lock:
            self.bytes_down = self.requests = 0

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([client, server], [], [], 1.0)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is server:
                        with self._lock:
                            self.bytes_down += len(data)
                        client.sendall(data)
                    else:
                        with self._lock:  # every request line ends so; GET/HEAD have no body
                            self.requests += data.count(b" HTTP/1.1\r\n")
                        server.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            server.close()
