"""The `solo` mark (migration 0007: a job that shared a crashed process runs alone) ends
with the job: succeeded, dead or cancelled, whichever path finished it. A retried
attempt that failed keeps it."""

from __future__ import annotations

from typing import Any

import psycopg

from pgfleet.client.enqueue import enqueue
from tests.support.workers import scalar, wait_for, worker_thread


def solo_job(conn: psycopg.Connection[Any], task: str, **options: Any) -> int:
    job_id = enqueue(conn, task, **options)
    conn.execute("UPDATE pgfleet.jobs SET solo = true WHERE id = %s", (job_id,))
    return job_id


def state_and_solo(dsn: str, job_id: int) -> tuple[str, bool]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT state::text, solo FROM pgfleet.jobs WHERE id = %s",
                           (job_id,)).fetchone()
    assert row is not None
    return row[0], row[1]


def test_solo_is_cleared_when_the_job_succeeds_dies_or_is_cancelled(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        succeeds = solo_job(conn, "noop")
        dies = solo_job(conn, "fail", max_attempts=1)
        retries = solo_job(conn, "fail", max_attempts=1000, delay=0)
        cancelled = solo_job(conn, "noop", delay=3600)
        conn.execute("UPDATE pgfleet.jobs SET state = 'cancelled', finished_at = now()"
                     " WHERE id = %s", (cancelled,))
    with worker_thread(dsn):
        wait_for(lambda: state_and_solo(dsn, succeeds)[0] == "succeeded")
        wait_for(lambda: state_and_solo(dsn, dies)[0] == "dead")
        wait_for(lambda: scalar(dsn, "SELECT attempt >= 1 AND state = 'queued'"
                                     " FROM pgfleet.jobs WHERE id = %s", (retries,)))
    assert state_and_solo(dsn, succeeds) == ("succeeded", False)
    assert state_and_solo(dsn, dies) == ("dead", False)
    assert state_and_solo(dsn, cancelled) == ("cancelled", False)
    # Failed but not finished: it may still be the culprit of a crash, so it stays alone.
    assert state_and_solo(dsn, retries) == ("queued", True)
