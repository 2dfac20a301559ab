"""The base of the children that hold one autocommit connection of their own (maintenance
and the scheduler): it opens the connection on demand, beating while the connect waits,
and drops it after a failure so the next pass reconnects.

Apart from child.py because the arbiter imports that module, and the arbiter holds no
database connection and need not load the driver."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg

from pgfleet.runtime.beacon import Beacon
from pgfleet.runtime.child import ChildProcess
from pgfleet.sql.db import connect


class DatabaseChild(ChildProcess):
    def __init__(self, dsn: str, beacon: Beacon | None = None) -> None:
        super().__init__(beacon)
        self.dsn = dsn
        self.conn: psycopg.Connection[Any] | None = None

    def connection(self) -> psycopg.Connection[Any]:
        """The open connection, connecting first if there is none (or it closed)."""
        if self.conn is None or self.conn.closed:
            # A connect may wait its whole timeout: the child is alive meanwhile.
            with self.beating():
                self.conn = connect(self.dsn, autocommit=True, process=True)
            self.on_connect(self.conn)
        return self.conn

    def on_connect(self, conn: psycopg.Connection[Any]) -> None:
        """What a child writes on each new connection (maintenance: the flow limits)."""

    def drop_connection(self) -> None:
        """Close the connection (quietly: it may be broken already); the next call to
        connection() opens a fresh one."""
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
        self.conn = None
