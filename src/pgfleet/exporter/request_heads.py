"""Reading HTTP request heads for the exporter on one thread, with a deadline per request.

A thread per connection lets a client that trickles one header line every few seconds
hold that thread for as long as it likes (a socket timeout bounds each read, not the
request), and a few dozen such clients take every thread: /livez, which the image's
HEALTHCHECK calls, stops answering. Here connections wait in a selector until their head
is complete; only then does a handler thread see them. A connection whose head has not
arrived by its deadline is closed, however steadily it sends.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# The end of a request head; GET and HEAD carry no body.
_END = (b"\r\n\r\n", b"\n\n")


@dataclass
class Arrived:
    """A connection whose request head is complete, and when its request must be done."""

    conn: socket.socket
    address: tuple[str, int]
    head: bytes
    deadline: float


@dataclass
class _Pending:
    conn: socket.socket
    address: tuple[str, int]
    deadline: float
    buf: bytearray = field(default_factory=bytearray)


class HeadReader:
    def __init__(self, deliver: Callable[[Arrived], None], *, deadline: float,
                 head_limit: int, max_pending: int) -> None:
        self.deliver = deliver
        self.deadline = deadline
        self.head_limit = head_limit
        self.max_pending = max_pending
        self.selector = selectors.DefaultSelector()
        self.pending: dict[int, _Pending] = {}
        self.incoming: list[tuple[socket.socket, tuple[str, int]]] = []
        self.lock = threading.Lock()
        self.waker, self.wake_end = socket.socketpair()
        self.waker.setblocking(False)
        self.wake_end.setblocking(False)
        self.selector.register(self.wake_end, selectors.EVENT_READ)
        self.closing = False
        self.thread = threading.Thread(target=self._run, name="exporter-heads", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def add(self, conn: socket.socket, address: tuple[str, int]) -> None:
        """Hand over an accepted connection (from the accepting thread)."""
        with self.lock:
            self.incoming.append((conn, address))
        with contextlib.suppress(OSError):
            self.waker.send(b"\0")

    def close(self) -> None:
        self.closing = True
        with contextlib.suppress(OSError):
            self.waker.send(b"\0")
        if self.thread.ident is not None:  # started (a failed bind closes it unstarted)
            self.thread.join(5)
        for pending in list(self.pending.values()):
            self._drop(pending)
        self.selector.close()
        self.waker.close()
        self.wake_end.close()

    def _run(self) -> None:
        while not self.closing:
            for key, _ in self.selector.select(timeout=0.25):
                if key.fileobj is self.wake_end:
                    with contextlib.suppress(OSError):
                        self.wake_end.recv(4096)
                else:
                    self._read(self.pending[key.fd])
            self._take_incoming()
            self._expire(time.monotonic())

    def _take_incoming(self) -> None:
        with self.lock:
            fresh, self.incoming = self.incoming, []
        for conn, address in fresh:
            if len(self.pending) >= self.max_pending:
                # The oldest waiter goes: a client that completes its head promptly is
                # served long before it could become the oldest.
                self._drop(next(iter(self.pending.values())))
            conn.setblocking(False)
            pending = _Pending(conn, address, time.monotonic() + self.deadline)
            self.pending[conn.fileno()] = pending
            self.selector.register(conn, selectors.EVENT_READ)

    def _read(self, pending: _Pending) -> None:
        try:
            chunk = pending.conn.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk or len(pending.buf) + len(chunk) > self.head_limit:
            self._drop(pending)
            return
        pending.buf += chunk
        if any(end in pending.buf for end in _END):
            self._forget(pending)
            pending.conn.setblocking(True)
            self.deliver(Arrived(pending.conn, pending.address, bytes(pending.buf),
                                 pending.deadline))

    def _expire(self, now: float) -> None:
        for pending in [p for p in self.pending.values() if p.deadline <= now]:
            self._drop(pending)

    def _forget(self, pending: _Pending) -> None:
        self.selector.unregister(pending.conn)
        del self.pending[pending.conn.fileno()]

    def _drop(self, pending: _Pending) -> None:
        self._forget(pending)
        with contextlib.suppress(OSError):
            pending.conn.close()
