"""Input anyone with a database role can choose: NOTIFY floods, task names that become
metric labels, control characters in names."""

from __future__ import annotations

import os
import time

import psycopg
from prometheus_client import REGISTRY

from pgfleet import metrics
from pgfleet.worker.loop import NOTIFY_GAP
from tests.integration.test_maintenance import maintenance
from tests.support.workers import scalar, states, wait_for, worker_thread


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


def test_six_hundred_chosen_task_names_on_the_rescue_path_stay_bounded(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.jobs (queue, task, state, attempt, lease_holder,"
                     " lease_expires_at) SELECT 'chosen', 'chosen-' || g, 'running', 1,"
                     " 'host-a:77:aa', now() + interval '1h' FROM generate_series(1, 600) g")
    m = maintenance(dsn)
    os.write(m.write_end, b"host-a:77:aa\tworker died: SIGKILL\n")  # type: ignore[attr-defined]
    m.read_requests(1.0)
    try:
        m.pass_once()
        labels = {s.labels["task"] for family in REGISTRY.collect() for s in family.samples
                  if s.name == "pgfleet_jobs_finished_total" and s.labels["queue"] == "chosen"}
    finally:
        metrics._task_labels.clear()  # this process's other tests start afresh
    assert states(dsn) == {"queued": 600}
    assert len(labels) <= metrics.TASK_LABEL_LIMIT + 1
    assert metrics.UNKNOWN_TASK_LABEL in labels
