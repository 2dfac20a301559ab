"""A TCP proxy in front of PostgreSQL that a test can cut, standing in for a network
partition between a worker and the database. It forwards to the server of the test DSN
(PGFLEET_TEST_DSN), over TCP or a Unix socket as that DSN says."""

from __future__ import annotations

import contextlib
import os
import socket
import threading

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support.pg import ADMIN_DSN

DEFAULT_PORT = 5432  # libpq's, when the DSN names none
DEFAULT_SOCKET_DIR = "/var/run/postgresql"  # Debian's libpq, when the DSN names no host


def server_address(dsn: str) -> tuple[str, int] | str:
    """Where `dsn`'s server listens: (host, port), or a Unix socket's path. The first
    entry of a multi-host DSN; hostaddr wins over host, as in libpq."""
    params = conninfo_to_dict(dsn)
    port = int(str(params.get("port") or DEFAULT_PORT).split(",")[0])
    host = str(params.get("hostaddr") or params.get("host") or DEFAULT_SOCKET_DIR).split(",")[0]
    if host.startswith("/"):
        return os.path.join(host, f".s.PGSQL.{port}")
    return host, port


def _connect(address: tuple[str, int] | str) -> socket.socket:
    if isinstance(address, str):
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(address)
        return upstream
    return socket.create_connection(address)


class Proxy:
    def __init__(self, target: tuple[str, int] | str | None = None) -> None:
        """Forward to `target` ((host, port) or a Unix socket path), by default to the
        server of the test DSN."""
        self.target = server_address(ADMIN_DSN) if target is None else target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.open = threading.Event()
        self.open.set()
        self.holding = False  # a blackhole: connections stay open, nothing goes through
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if not self.open.is_set():
                client.close()
                continue
            if self.holding:
                with self.lock:
                    self.sockets.append(client)  # accepted, never answered
                continue
            try:
                upstream = _connect(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if not self.holding:
                    dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        self.open.clear()
        with self.lock:
            for s in self.sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self.sockets.clear()

    def blackhole(self) -> None:
        """Stop forwarding without closing anything, as a network that drops packets:
        every read on the far side waits for ever."""
        self.holding = True

    def dsn(self, dsn: str) -> str:
        """`dsn` with its server replaced by this proxy."""
        params = conninfo_to_dict(dsn)
        params.pop("hostaddr", None)
        params.update(host="127.0.0.1", port=self.port)
        return make_conninfo(**params)

    def restore(self) -> None:
        self.holding = False
        self.open.set()

    def close(self) -> None:
        self.cut()
        self.server.close()
