"""`pgfleet run` at start: a connection error no retry can fix (wrong password, unknown
database or role) exits non-zero with one line; a database that is down is waited for."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest

from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import create_runtime_role, enqueue, mixed_batch, wait_settled
from tests.support.cluster import free_port
from tests.support.fleet import Fleet
from tests.support.workers import wait_for

pytestmark = pytest.mark.faults


def refused(f: Fleet, expected: str) -> None:
    assert f.wait(60) != 0
    lines = f.log().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgfleet: error: "), lines
    assert expected in lines[0] and "Traceback" not in f.log()


def wrong_password_url(db: Db) -> str:
    """The URL of a role that logs in with a password, given the wrong one."""
    cluster = db.cluster
    role = f"pgfleet_start_{uuid.uuid4().hex[:6]}"
    create_runtime_role(cluster, db.name, role, password="right-password")
    cluster.password_roles.append(role)
    cluster.write_hba()
    cluster.reload()
    return cluster.url(db.name, user=role, password="wrong-password")


def test_a_wrong_password_exits_at_once(db: Db, cfleet: Callable[..., Fleet]) -> None:
    f = cfleet({"default": {"processes": 1}}, dsn=wrong_password_url(db))
    refused(f, "password authentication failed")
    assert "wrong-password" not in f.log()


@pytest.mark.parametrize("what", ["database", "role"])
def test_an_unknown_database_or_role_exits_at_once(db: Db, cfleet: Callable[..., Fleet],
                                                   what: str) -> None:
    name = f"pgfleet_missing_{uuid.uuid4().hex[:6]}"
    url = (db.cluster.url(name) if what == "database"
           else db.cluster.url(db.name, user=name))
    f = cfleet({"default": {"processes": 1}}, dsn=url)
    refused(f, f'{what} "{name}" does not exist')


def test_a_database_that_is_down_is_waited_for(db: Db, cfleet: Callable[..., Fleet]) -> None:
    """Transient: the supervisor starts, its worker retries with backoff, and jobs run
    once the database answers."""
    cluster = db.cluster
    cluster.stop("fast")
    try:
        f = cfleet({"default": {"processes": 1}})
        wait_for(lambda: "retrying in" in f.log(), timeout=60)
        assert f.proc is not None and f.proc.poll() is None, f.log()
    finally:
        cluster.start()
    ids = enqueue(db.dsn, mixed_batch(10))
    wait_settled(db.dsn, log=f.log)
    assert books.check(db.dsn, ids).states == {"succeeded": 10}


def test_nothing_listens_is_transient(cfleet: Callable[..., Fleet]) -> None:
    f = cfleet({"default": {"processes": 1}},
               dsn=f"postgresql://postgres@127.0.0.1:{free_port()}/postgres")
    wait_for(lambda: "retrying in" in f.log(), timeout=60)
    assert f.proc is not None and f.proc.poll() is None, f.log()


def test_a_lone_worker_with_a_wrong_password_exits_at_once(db: Db) -> None:
    """Outside trial T11: `pgfleet worker` retried a wrong password five times a second,
    forever, where `pgfleet run` exits with one line."""
    url = wrong_password_url(db)
    done = subprocess.run(
        [sys.executable, "-m", "pgfleet", "worker", "--queue", "default",
         "--tasks", "tests.support.jobtasks", "--database-url", url],
        capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1 and lines[0].startswith("pgfleet: error: "), lines
    assert "password authentication failed" in lines[0]
    assert "wrong-password" not in done.stderr + done.stdout
