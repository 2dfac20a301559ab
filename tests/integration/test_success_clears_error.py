"""last_error says why a job is where it is (waiting for a retry, dead, cancelled); a job
that succeeds has none (migration 0021), whichever path finished it, while the errors
history keeps what every earlier attempt ended with. Outside trial: a job that crashed once
and then succeeded showed `worker died` in `jobs show` and the web UI."""

from __future__ import annotations

from typing import Any

import psycopg

from pgfleet.client.enqueue import enqueue
from pgfleet.sql import store
from tests.support.workers import wait_for, worker_thread

WORKER = "host-a:42:abc"
HISTORY = '[{"attempt": 1, "at": "2026-01-01T00:00:00+00:00", "error": "worker died: SIGKILL"}]'


def crashed_once(conn: psycopg.Connection[Any], task: str = "noop") -> int:
    job_id = enqueue(conn, task)
    conn.execute("UPDATE pgfleet.jobs SET attempt = 1, last_error = 'worker died: SIGKILL',"
                 " errors = %s::jsonb WHERE id = %s", (HISTORY, job_id))
    return job_id


def error_and_history(dsn: str, job_id: int) -> tuple[str, str | None, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT state::text, last_error, jsonb_array_length(errors)"
                           " FROM pgfleet.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_a_worker_success_clears_last_error_and_keeps_the_history(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Several, so the batched completion (complete_and_claim) finishes some of them.
        ids = [crashed_once(conn) for _ in range(20)]
        failing = crashed_once(conn, "fail")
        conn.execute("UPDATE pgfleet.jobs SET max_attempts = 2 WHERE id = %s", (failing,))
    with worker_thread(dsn):
        wait_for(lambda: all(error_and_history(dsn, i)[0] == "succeeded" for i in ids))
        wait_for(lambda: error_and_history(dsn, failing)[0] == "dead")
    for job_id in ids:
        assert error_and_history(dsn, job_id) == ("succeeded", None, 1), job_id
    # A failure still sets it.
    state, last_error, history = error_and_history(dsn, failing)
    assert state == "dead" and last_error is not None and history == 2


def test_complete_succeeded_clears_last_error(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = crashed_once(conn)
        conn.execute("UPDATE pgfleet.jobs SET attempt = 0 WHERE id = %s", (job_id,))
        [job] = store.claim(conn, queue="default", limit=1, worker=WORKER, lease=30)
        assert store.complete_succeeded(conn, worker=WORKER, done=[(job.id, job.fence)])
    assert error_and_history(dsn, job_id) == ("succeeded", None, 1)
