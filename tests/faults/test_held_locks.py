"""No lock outlives its holder: a claim gives up on a queue lock held elsewhere instead of
blocking its worker, and a pgfleet session that stops talking inside a transaction is
ended by the server, its locks with it."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import psycopg
import pytest

import pgfleet
from pgfleet.core.flow import FlowLimits
from pgfleet.sql import fleet, store
from pgfleet.sql.db import PROCESS_IDLE_IN_TRANSACTION, connect
from tests.support.workers import scalar, wait_for, worker_process

Q = "held"
LOCK = "SELECT 1 FROM pgfleet.queue_limits WHERE queue = %s FOR UPDATE"


def _limited(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        fleet.publish_fallback_limits(conn, queue=Q, published_by="test",
                                      limits=FlowLimits(global_concurrency=4))


def test_a_claim_gives_up_on_a_queue_lock_held_by_a_silent_session(dsn: str) -> None:
    _limited(dsn)
    pgfleet.enqueue(dsn, "noop", queue=Q)
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as conn:
        holder.execute(LOCK, (Q,))  # an operator's session, left open in a transaction
        start = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable):
            store.claim(conn, queue=Q, limit=4, worker="w", lease=30)
        assert 1.5 < time.monotonic() - start < 10
        holder.rollback()
        [job] = store.claim(conn, queue=Q, limit=4, worker="w", lease=30)
        assert job.task == "noop"


def test_a_pgfleet_session_idle_inside_a_transaction_is_ended_with_its_locks(
        dsn: str) -> None:
    _limited(dsn)
    frozen = connect(dsn, autocommit=False, process=True)
    assert scalar(dsn, "SELECT setting FROM pg_settings WHERE name = 'lock_timeout'") == "0"
    frozen.execute(LOCK, (Q,))  # then nothing more: a host gone or a process stopped
    taken = datetime.now(UTC)
    with psycopg.connect(dsn, autocommit=True) as other:

        def lock_free() -> bool:
            try:
                with other.transaction():
                    other.execute(LOCK.replace("FOR UPDATE", "FOR UPDATE NOWAIT"), (Q,))
                return True
            except psycopg.errors.LockNotAvailable:
                return False

        wait_for(lock_free, timeout=30)
    held = (datetime.now(UTC) - taken).total_seconds()
    assert held < float(PROCESS_IDLE_IN_TRANSACTION.removesuffix("s")) + 5
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
        frozen.execute("SELECT 1")
    frozen.close()


def test_a_worker_waits_out_a_held_queue_lock_and_then_runs_the_queue(dsn: str) -> None:
    """An outside session holds the queue's lock for 6 s: the worker's claims give up
    every 2 s instead of blocking its loop (its heartbeat goes on), and it runs the jobs
    once the lock is free."""
    _limited(dsn)
    ids = pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": Q} for _ in range(10)])
    with psycopg.connect(dsn) as holder:
        holder.execute(LOCK, (Q,))
        worker = worker_process(dsn, Q, "--threads", "2")
        try:
            wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.processes"
                                         " WHERE kind = 'worker'"))
            first = scalar(dsn, "SELECT heartbeat_at FROM pgfleet.processes WHERE kind = 'worker'")
            wait_for(lambda: scalar(dsn, "SELECT heartbeat_at FROM pgfleet.processes"
                                         " WHERE kind = 'worker'") > first, timeout=15)
            assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE state <> 'queued'") == 0
            holder.rollback()
            wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                                         " WHERE state = 'succeeded' AND id = ANY(%s)",
                                    (ids,)) == len(ids), timeout=30)
            assert worker.poll() is None
        finally:
            worker.terminate()
            worker.wait(30)
