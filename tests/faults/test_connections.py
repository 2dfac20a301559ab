"""Connections killed under a running fleet (pg_terminate_backend), and the database down
when the fleet starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.faults import books
from tests.faults.conftest import Db, faults_config
from tests.faults.helpers import audited, enqueue, mixed_batch, wait_settled
from tests.support.fleet import Fleet
from tests.support.workers import wait_for

pytestmark = pytest.mark.faults


def backends(db: Db, listeners: bool) -> list[int]:
    """Client backends of the fleet: its LISTEN connections, or every other one (workers,
    maintenance). The tasks' own audit connections are left alone."""
    with db.cluster.admin() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND application_name <> 'audit' AND (query LIKE 'LISTEN%%') = %s",
            (db.name, listeners)).fetchall()
    return [r[0] for r in rows]


def terminate(db: Db, pids: list[int]) -> None:
    with db.cluster.admin() as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_terminated_worker_and_listener_connections(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    dsn = db.dsn
    f = cfleet({"default": {"processes": 2, "threads": 4}})
    workers = f.wait_workers(2)
    wait_for(lambda: len(backends(db, listeners=True)) == 2)
    ids = enqueue(dsn, mixed_batch(300, n_sleep=40, n_fail_once=20))
    for round_ in range(3):
        target = 40 * (round_ + 1)
        wait_for(lambda: audited(dsn) >= target)  # noqa: B023 - used before the next round
        old = set(backends(db, listeners=True))
        terminate(db, backends(db, listeners=False) + list(old))
        # Every listener comes back on a new connection (and polls once).
        wait_for(lambda: len(set(backends(db, listeners=True)) - old) == 2,  # noqa: B023
                 timeout=30)
        ids += enqueue(dsn, mixed_batch(100, n_sleep=10))
    wait_settled(dsn, log=f.log)

    result = books.check(dsn, ids)
    print("pg_terminate_backend:", result.summary())
    assert result.states == {"succeeded": len(ids)}
    log = f.log()
    assert log.count("lost its database connection") >= 3
    assert log.count("listener connection lost") >= 6
    assert "maintenance pass failed" in log
    assert f.workers().keys() == workers.keys(), "a worker died instead of reconnecting"
    assert "Traceback" not in log, log[-3000:]


def one_line_failure(*argv: str, dsn: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pgfleet", *argv], capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "PGFLEET_DATABASE_URL": dsn})
    assert done.returncode != 0, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout == ""
    return lines[0]


def test_database_down_at_start(db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    dsn = db.dsn
    db.cluster.stop("fast")

    config = tmp_path / "check.yaml"
    config.write_text(faults_config({"default": {"processes": 1}}))
    for argv in (("check", "-c", str(config)), ("status",), ("status", "--json")):
        line = one_line_failure(*argv, dsn=dsn)
        assert line.startswith("pgfleet: error: cannot connect to the database"), line
        assert "Connection refused" in line, line

    f = cfleet({"default": {"processes": 2, "threads": 2}})
    # Workers are up (not yet "ready": their title shows a job count once connected).
    wait_for(lambda: len(f.workers()) == 2)
    # Each worker says it once (outside trial T12: one ERROR line per retry, for good).
    wait_for(lambda: f.log().count("cannot connect to the database") >= 2, timeout=30)
    wait_for(lambda: "maintenance pass failed" in f.log())
    workers = f.workers()
    time.sleep(1.0)  # let a few retries happen; nothing may crash-loop meanwhile
    assert f.workers().keys() == workers.keys()
    assert " exited:" not in f.log()
    # Each worker, maintenance and the scheduler (which runs with no schedule of its file).
    assert f.log().count("cannot connect to the database") == 4, f.log()[-3000:]

    db.cluster.start()
    ids = enqueue(dsn, mixed_batch(200, n_sleep=10))
    wait_settled(dsn, log=f.log)
    result = books.check(dsn, ids)
    assert result.states == {"succeeded": len(ids)}
    assert f.workers().keys() == workers.keys()
    with psycopg.connect(dsn) as conn:
        kinds = {r[0] for r in conn.execute("SELECT kind FROM pgfleet.processes")}
    assert {"supervisor", "maintenance", "worker"} <= kinds
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0
