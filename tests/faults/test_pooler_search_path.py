"""Behind PgBouncer in transaction mode the connection cannot pin its search_path (the
pooler refuses the `options` startup parameter), so the runtime role's own setting does:
`pgfleet grants` adds it when PGFLEET_DATABASE_POOLER=transaction. Without it, an operator
planted in public runs inside `pgfleet status`; with it, neither status nor a worker's
claim runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

import pgfleet
from pgfleet.sql import grants
from tests.faults.conftest import Db
from tests.faults.pgbouncer import Bouncer
from tests.support.roles import login_roles, plant_trap, trap_hits
from tests.support.workers import wait_for, worker_thread

pytestmark = pytest.mark.faults


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGFLEET_DATABASE_POOLER", "transaction")


def status(dsn: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pgfleet", "status", "--json"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PGFLEET_DATABASE_URL": dsn})
    assert done.returncode == 0, done.stderr


def hits(db: Db) -> list[str]:
    with db.cluster.admin(db.name) as conn:
        found = trap_hits(conn)
        conn.execute("DELETE FROM public.trap_hits")
    return found


@pytest.fixture
def runtime(db: Db) -> Iterator[str]:
    with login_roles(db.dsn) as make:
        role = make("pooled_runtime")
        plant_trap(db.dsn, make("attacker"))
        yield role


@contextmanager
def pooler(db: Db, role: str) -> Iterator[str]:
    """A fresh PgBouncer: its server connections start after the grants, as role settings
    apply to new sessions only (an existing pooler needs RECONNECT after the ALTER ROLE)."""
    bouncer = Bouncer(db.cluster.port, ["postgres", role]).start()
    try:
        yield bouncer.url(db.name, role)
    finally:
        bouncer.stop()


def test_the_role_pins_search_path_behind_a_transaction_pooler(
        db: Db, runtime: str, pooled: None) -> None:
    with db.cluster.admin(db.name) as conn:
        grants.apply(conn, grants.statements(db.name, runtime=runtime, pooler=False))
    with pooler(db, runtime) as url:
        with pytest.raises(psycopg.OperationalError,
                           match="unsupported startup parameter: options"):
            psycopg.connect(url, options="-c search_path=pg_catalog,pgfleet").close()
        job_id = pgfleet.enqueue(url, "noop")
        status(url)
    assert hits(db), "without the role's setting the planted operator runs"

    with db.cluster.admin(db.name) as conn:
        grants.apply(conn, grants.statements(db.name, runtime=runtime))  # the pooler's env
    with pooler(db, runtime) as url:
        status(url)
        with worker_thread(url):
            wait_for(lambda: state(db, job_id) == "succeeded")
    assert hits(db) == []


def state(db: Db, job_id: int) -> str:
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                           (job_id,)).fetchone()
    assert row is not None
    return str(row[0])
