"""The connection of the database children (maintenance, scheduler) lives in one place:
opened on demand, dropped after a failure and opened again."""

from __future__ import annotations

import ast
import contextlib
import inspect
from pathlib import Path

import psycopg

from pgfleet.cron.scheduler import Scheduler
from pgfleet.maintenance.process import Maintenance
from pgfleet.runtime.db_child import DatabaseChild


def test_maintenance_and_scheduler_share_one_connection_helper() -> None:
    for child in (Maintenance, Scheduler):
        assert issubclass(child, DatabaseChild)
        assert child.connection is DatabaseChild.connection
    # No copy left behind under the old name either (in each child's own module, wherever
    # the package layout puts it).
    for child in (Maintenance, Scheduler):
        module = inspect.getsourcefile(child)
        assert module, child
        tree = ast.parse(Path(module).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert not defined & {"_connection", "_drop_connection", "connection"}, module


def test_a_dropped_or_killed_connection_is_opened_again(dsn: str) -> None:
    child = DatabaseChild(dsn)
    first = child.connection()
    assert child.connection() is first  # kept while it works
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (first.info.backend_pid,))
    with contextlib.suppress(psycopg.OperationalError):
        first.execute("SELECT 1")
    assert first.closed
    second = child.connection()
    assert second is not first and second.execute("SELECT 1").fetchone() == (1,)
    child.drop_connection()
    assert child.conn is None and second.closed
    child.drop_connection()  # twice is harmless
    child.wakeup.close()
