"""Deadlines and a cap for connections that have not sent a whole request head yet.

uvicorn cuts a connection idle between requests (`timeout_keep_alive`), but not one that
never finishes its head: a client that sends a header byte every few seconds keeps its
connection, and its file descriptor, for as long as it likes. A few hundred such clients
exhaust the process's descriptors and nobody else is served. Here every connection must
complete each request head within a deadline, counted from the connection's start or the
end of the previous response, and at most a cap of connections wait for a head at once:
beyond it the oldest waiter goes. All of this happens before the request reaches the app,
so before authentication.
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

# A browser sends its head in one packet; ten seconds is room for a slow link, not for
# a client that means to hold the connection.
HEAD_DEADLINE = 10.0
# Connections waiting for a head, at most; fewer when the descriptor limit is low, so
# that the waiters alone never take more than a quarter of the descriptors.
MAX_WAITING = 256


def descriptor_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def waiting_cap(limit: int | None = None) -> int:
    files = descriptor_limit() if limit is None else limit
    return max(8, min(MAX_WAITING, files // 4))


def head_guarded(deadline: float = HEAD_DEADLINE,
                 cap: int | None = None) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the head deadline and the cap of waiting connections;
    each call makes a class with a waiting list of its own (one per server). Without a
    `cap`, it follows the descriptor limit of the moment (a cheap system call)."""
    # Oldest first: a dict keeps insertion order.
    waiting: dict[HeadGuarded, None] = {}

    class HeadGuarded(H11Protocol):
        head_timer: asyncio.TimerHandle | None = None
        awaited: Any = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self.await_head()

        def handle_events(self) -> None:
            super().handle_events()
            # A new request cycle means its head has arrived.
            if self in waiting and self.cycle is not self.awaited:
                self.stop_waiting()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self.await_head()

        def shutdown(self) -> None:
            # A request still sending its body would hold the stop for the whole grace
            # (and then be cancelled mid-handler): it is cut now. Nothing was done for it
            # yet, since an action reads its whole form before it acts.
            cycle = self.cycle
            if (cycle is not None and cycle.more_body and not cycle.response_started
                    and not self.transport.is_closing()):
                self.transport.close()
                return
            super().shutdown()

        def connection_lost(self, exc: Exception | None) -> None:
            self.stop_waiting()
            super().connection_lost(exc)

        def await_head(self) -> None:
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a pipelined request is already being answered
            self.stop_waiting()
            self.awaited = self.cycle
            self.head_timer = self.loop.call_later(deadline, self.cut)
            waiting[self] = None
            most = waiting_cap() if cap is None else cap
            while len(waiting) > most:
                next(iter(waiting)).cut()

        def stop_waiting(self) -> None:
            waiting.pop(self, None)
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None

        def cut(self) -> None:
            self.stop_waiting()
            if not self.transport.is_closing():
                self.transport.close()

    return HeadGuarded
