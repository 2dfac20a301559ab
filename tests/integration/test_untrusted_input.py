"""Input anyone with a database role can choose: NOTIFY floods, task names that become
metric labels, control characters in names."""

from __future__ import annotations

import time

import psycopg

from pgfleet.worker.loop import NOTIFY_GAP
from tests.support.workers import scalar, wait_for, worker_thread


def test_a_notify_flood_costs_a_bounded_number_of_claims(dsn: str) -> None:
    # A minute between polls: every claim here is one a notification asked for.
    with worker_thread(dsn, poll_interval=60.0) as worker:
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.processes") == 1)
        wait_for(lambda: worker.listener is not None and worker.listener.conn is not None)
        wait_for(lambda: worker.events.polls >= 1 and not worker.notified)
        before = worker.events.polls
        started = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(3000):  # separate transactions: PostgreSQL folds repeats in one
                conn.execute("NOTIFY pgfleet_jobs, 'default'")
        wait_for(lambda: not worker.notified)
        claims = worker.events.polls - before
        elapsed = time.monotonic() - started
    # At most one claim per NOTIFY_GAP while the flood lasted, plus the one it ends with.
    assert 1 <= claims <= elapsed / NOTIFY_GAP + 2, (claims, elapsed)
