"""A worker's process title counts its running jobs in plain English."""

from __future__ import annotations

import psycopg

from pgfleet.client.enqueue import enqueue
from tests.support.workers import wait_for, worker_thread


def test_the_title_says_one_job_not_one_jobs(dsn: str) -> None:
    shown: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue(conn, "sleep", {"seconds": 2.0})
    with worker_thread(dsn, title=shown.append, threads=2):
        wait_for(lambda: "1 job" in shown, timeout=30)
        wait_for(lambda: shown[-1] == "0 jobs", timeout=30)
    assert "1 jobs" not in shown
    assert set(shown) == {"1 job", "0 jobs"}
