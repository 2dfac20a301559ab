"""The fencing token a task can check: the claim's random fence and still_ours(), on a job
claimed and then taken over for real in the database."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet.context import JobContext
from pgfleet.sql import store
from tests.support.rescue import rescue_all


def claimed(conn: psycopg.Connection[Any], worker: str) -> JobContext:
    [job] = store.claim(conn, queue="default", limit=1, worker=worker, lease=30)
    return JobContext(id=job.id, queue="default", task=job.task, attempt=job.attempt,
                      max_attempts=job.max_attempts, worker=worker, fence=job.fence)


def test_still_ours_until_the_job_is_taken_over(dsn: str) -> None:
    pgfleet.enqueue(dsn, "noop")
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = claimed(conn, "host-a")
        assert first.token == fence_of(conn, first.id) and first.attempt == 1
        assert first.still_ours(conn)
        assert rescue_all(conn) == [first.id]
        assert not first.still_ours(conn)
        second = claimed(conn, "host-b")
        assert second.token == fence_of(conn, second.id) != first.token
        assert second.still_ours(conn) and not first.still_ours(conn)


def fence_of(conn: psycopg.Connection[Any], job_id: int) -> int:
    row = conn.execute("SELECT fence FROM pgfleet.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_a_claim_after_the_attempt_number_went_back_gets_a_new_fence(dsn: str) -> None:
    """A failover can rewind a row to before a claim: the next claim then repeats the
    holder and the attempt number, but not the fence, so the first run's writes miss."""
    pgfleet.enqueue(dsn, "noop")
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = claimed(conn, "host-a")
        # The row as a replica that never received the claim has it.
        conn.execute("UPDATE pgfleet.jobs SET state = 'queued', attempt = 0,"
                     " lease_holder = NULL, lease_expires_at = NULL WHERE id = %s",
                     (first.id,))
        again = claimed(conn, "host-a")
        assert (again.worker, again.attempt) == (first.worker, first.attempt)
        assert again.token != first.token
        assert not first.still_ours(conn) and again.still_ours(conn)
        assert store.complete_succeeded(conn, worker="host-a",
                                        done=[(first.id, first.token)]) == set()
        assert store.renew_leases(conn, worker="host-a", lease=30,
                                  fences={first.id: first.token}) == {}
        assert store.complete_succeeded(conn, worker="host-a",
                                        done=[(again.id, again.token)]) == {again.id}


def test_still_ours_holds_off_a_rescue_until_the_transaction_ends(dsn: str) -> None:
    pgfleet.enqueue(dsn, "noop")
    with psycopg.connect(dsn, autocommit=True) as conn, \
            psycopg.connect(dsn, autocommit=True) as rescuer:
        job = claimed(conn, "host-a")
        rescuer.execute("SET lock_timeout = '1s'")
        with conn.transaction():
            assert job.still_ours(conn)
            # SKIP LOCKED: the rescue passes over the locked row instead of taking it.
            assert rescue_all(rescuer) == []
            with pytest.raises(psycopg.errors.LockNotAvailable):
                rescuer.execute("UPDATE pgfleet.jobs SET lease_holder = %s", ("host-b",))
        assert rescue_all(rescuer) == [job.id]


def test_a_fenced_update_is_written_only_by_the_holder(dsn: str) -> None:
    """The documented pattern: check and write in one transaction; the row lock keeps the
    job from being rescued in between."""
    pgfleet.enqueue(dsn, "noop")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE payouts (job_id bigint, attempt int)")
        job = claimed(conn, "host-a")
        stale = JobContext(id=job.id, queue="default", task="noop", attempt=job.attempt,
                           max_attempts=job.max_attempts, worker="host-a",
                           fence=job.fence ^ 1)
        for ctx in (stale, job):
            with conn.transaction():
                if ctx.still_ours(conn):
                    conn.execute("INSERT INTO payouts VALUES (%s, %s)", (ctx.id, ctx.attempt))
        rows = conn.execute("SELECT job_id, attempt FROM payouts").fetchall()
    assert rows == [(job.id, job.attempt)]
