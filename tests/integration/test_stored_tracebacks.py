"""The traceback stored with a failed attempt starts at the task's own frame."""

from __future__ import annotations

import psycopg

import pgfleet
from pgfleet.testing import run_jobs
from tests.support.workers import scalar


def _inner_helper(n: int) -> int:
    raise ValueError(f"bad value {n}")


@pgfleet.task(name="tracebacks.fails", queue="tracebacks")
def fails(n: int) -> int:
    return _inner_helper(n) + 1


def test_the_stored_traceback_starts_at_the_task_without_pgfleet_frames(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, fails, {"n": 7}, max_attempts=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        [outcome] = run_jobs(conn, queue="tracebacks")
    assert outcome.state == "dead"
    error = scalar(dsn, "SELECT errors -> 0 ->> 'error' FROM pgfleet.jobs WHERE id = %s",
                   (job_id,))
    lines = error.splitlines()
    assert lines[0] == "ValueError: bad value 7"
    # The first frame is the task's, then its helper; no frame of the executor.
    assert "test_stored_tracebacks.py" in lines[1] and "in fails" in lines[1]
    assert any("in _inner_helper" in line for line in lines)
    assert "pgfleet/worker" not in error and "executor.py" not in error
