"""The task of the high-availability scenarios. It keeps an independent ledger: rows
written from its own connection to another server (PGFLEET_LEDGER_DSN, the shared test
server), which no failover of the jobs' database can rewind or lose."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Any

import psycopg

import pgfleet

_local = threading.local()
TICK = 0.2  # the ledger's heartbeat of a run: its last row bounds how long it lived

LEDGER_TABLE = """
CREATE TABLE IF NOT EXISTS ledger (
    job_id bigint NOT NULL, attempt int NOT NULL, token text NOT NULL, pid int NOT NULL,
    run uuid NOT NULL, event text NOT NULL, args jsonb NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp())
"""


def _ledger() -> psycopg.Connection[Any]:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(os.environ["PGFLEET_LEDGER_DSN"], autocommit=True,
                               application_name="ledger")
        _local.conn = conn
    return conn


@pgfleet.task(name="ha.step")
def step(n: int, seconds: float = 1.0) -> None:
    """Runs `seconds`, writing start, a tick every TICK and end to the ledger, each with
    the job's id, attempt, fence token, this process and this run."""
    job = pgfleet.current_job()
    assert job is not None
    run = uuid.uuid4()
    args = json.dumps({"n": n, "seconds": seconds})

    def note(event: str) -> None:
        _ledger().execute(
            "INSERT INTO ledger (job_id, attempt, token, pid, run, event, args)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (job.id, job.attempt, repr(job.token), os.getpid(), run, event, args))

    note("start")
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(TICK, left))
        note("tick")
    note("end")
