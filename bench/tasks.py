"""Tasks the benchmark workers run. Imported only by worker processes (`tasks: [bench.tasks]`).

Timing tasks write to `bench_*` tables with the database clock (clock_timestamp()), so both
ends of every latency come from the same clock as the job's created_at.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

import pgfleet

_lock = threading.Lock()
_conn: psycopg.Connection[Any] | None = None


def _db() -> psycopg.Connection[Any]:
    """One autocommit connection per worker process, shared by its threads under a lock."""
    global _conn
    if _conn is None or _conn.closed:
        dsn = os.environ.get("BENCH_DSN") or os.environ["PGFLEET_DATABASE_URL"]
        _conn = psycopg.connect(dsn, autocommit=True)
    return _conn


@pgfleet.task(name="bench.noop")
def noop() -> None:
    """Does nothing: measures the queue itself."""


@pgfleet.task(name="bench.sleep_1ms")
def sleep_1ms() -> None:
    time.sleep(0.001)


@pgfleet.task(name="bench.record")
def record() -> None:
    """Record when this job started, on the database clock."""
    job = pgfleet.current_job()
    assert job is not None
    with _lock:
        _db().execute(
            "INSERT INTO bench_started (job_id, attempt, pid, started_at)"
            " VALUES (%s, %s, %s, clock_timestamp())",
            (job.id, job.attempt, os.getpid()),
        )


@pgfleet.task(name="bench.hang_first", max_attempts=5)
def hang_first() -> None:
    """Record the start; the first attempt then hangs until the benchmark SIGKILLs it."""
    record.fn()
    job = pgfleet.current_job()
    assert job is not None
    if job.attempt == 1:
        time.sleep(120)
