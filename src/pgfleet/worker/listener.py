"""A thread that LISTENs for new-job notifications on a connection of its own.

NOTIFY is only a hint: when the connection drops, the listener
reconnects with jittered backoff and then reports a wake-up, because notifications sent
while it was away are lost and the worker must poll to catch up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from pgfleet.errors import DatabaseUnavailable
from pgfleet.runtime.child import Reconnect
from pgfleet.sql.db import connect, first_line

log = logging.getLogger("pgfleet.worker.listener")

CHANNEL = "pgfleet_jobs"
# pgfleet.cancel_jobs names there the worker of a job it cancelled.
CANCEL_CHANNEL = "pgfleet_cancel"
WAKE_ALL = ""  # passed to the callback after a reconnect: "poll every queue now"
# A silent TCP connection can be dead without either side knowing; probe it this often.
PROBE_INTERVAL = 15.0


class Listener:
    def __init__(self, dsn: str, on_notify: Callable[[str], None],
                 on_cancel: Callable[[str], None] | None = None) -> None:
        self.dsn = dsn
        self.on_notify = on_notify
        self.on_cancel = on_cancel
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pgfleet-listener", daemon=True)
        self.conn: psycopg.Connection[Any] | None = None

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()

    def _run(self) -> None:
        reconnect = Reconnect()
        while not self.stopping.is_set():
            try:
                self._listen(reconnect)
            except (psycopg.Error, DatabaseUnavailable) as exc:
                if self.stopping.is_set():
                    return
                delay = reconnect.failed()
                reconnect.report(log, "listener connection lost",
                                 first_line(exc, self.dsn), delay)
                self.stopping.wait(delay)
            finally:
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None

    def _listen(self, reconnect: Reconnect) -> None:
        self.conn = connect(self.dsn, autocommit=True, process=True)
        self.conn.execute(f"LISTEN {CHANNEL}")
        if self.on_cancel is not None:
            self.conn.execute(f"LISTEN {CANCEL_CHANNEL}")
            self.on_cancel(WAKE_ALL)
        reconnect.succeeded()
        self.on_notify(WAKE_ALL)
        next_probe = time.monotonic() + PROBE_INTERVAL
        while not self.stopping.is_set():
            for note in self.conn.notifies(timeout=0.5, stop_after=64):
                if note.channel == CANCEL_CHANNEL and self.on_cancel is not None:
                    self.on_cancel(note.payload)
                else:
                    self.on_notify(note.payload)
            if time.monotonic() >= next_probe:
                self.conn.execute("SELECT 1")
                next_probe = time.monotonic() + PROBE_INTERVAL
