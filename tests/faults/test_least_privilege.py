"""Least privilege: the migrations run as the owner; `pgfleet run` and the operator
commands work as a role that cannot run DDL, and any DDL fails loudly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable

import psycopg
import pytest

from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import create_runtime_role, enqueue, mixed_batch, wait_settled
from tests.support.fleet import Fleet
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults


def cli(dsn: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfleet", *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PGFLEET_DATABASE_URL": dsn})


def test_runtime_role_without_ddl(db: Db, cfleet: Callable[..., Fleet]) -> None:
    role = f"pgfleet_runtime_{uuid.uuid4().hex[:6]}"
    create_runtime_role(db.cluster, db.name, role)
    runtime = db.cluster.url(db.name, user=role)

    with psycopg.connect(runtime, autocommit=True) as conn:
        for ddl in ("CREATE TABLE pgfleet.x (id int)", "CREATE TABLE public.x (id int)",
                    "ALTER TABLE pgfleet.jobs ADD COLUMN x int", "TRUNCATE pgfleet.jobs",
                    "DROP TABLE pgfleet.jobs", "CREATE SCHEMA y"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(ddl)
    migrate = cli(runtime, "migrate")
    assert migrate.returncode != 0
    assert "permission denied" in migrate.stderr and len(migrate.stderr.splitlines()) == 1

    f = cfleet({"default": {"processes": 2, "threads": 2}, "other": {"processes": 1}},
               dsn=runtime, notify=True,
               schedules={"tick": {"cron": "* * * * * *", "task": "noop"}})
    f.wait_workers(3)
    ids = enqueue(runtime, mixed_batch(100, n_sleep=10, n_fail_once=10))
    failing = enqueue(runtime, [{"task": "fail", "queue": "other", "max_attempts": 2}] * 3)
    ids += failing
    ids += enqueue(runtime, [{"task": "noop", "queue": "other"}] * 10)
    # Operator commands as the runtime role: pause/resume, enqueue, cancel, retry, status.
    assert cli(runtime, "queues", "pause", "other").returncode == 0
    later = cli(runtime, "enqueue", "noop", "--queue", "other", "--delay", "1h")
    assert later.returncode == 0, later.stderr
    ids.append(int(later.stdout))
    assert cli(runtime, "jobs", "cancel", later.stdout.strip()).returncode == 0
    assert cli(runtime, "queues", "resume", "other").returncode == 0
    wait_settled(runtime, log=f.log)
    retry = cli(runtime, "jobs", "retry", "--queue", "other")
    assert retry.returncode == 0 and "3 dead job(s)" in retry.stdout, retry
    wait_settled(runtime, log=f.log)
    wait_for(lambda: scalar(runtime, "SELECT count(*) FROM pgfleet.schedule_runs") >= 1)
    status = cli(runtime, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert {q["queue"] for q in json.loads(status.stdout)["queues"]} >= {"default", "other"}

    schedule_jobs = [r for r in books.read(runtime) if r not in ids]
    wait_settled(runtime, log=f.log)
    result = books.check(runtime, ids + schedule_jobs, retried=failing)
    assert result.states.get("cancelled") == 1
    assert result.states.get("dead") == 3
    log = f.log()
    assert "permission denied" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
