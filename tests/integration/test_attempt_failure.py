"""What a failed attempt writes, through each query that fails one: a worker's
complete_failed, the supervisor's rescue_holder and maintenance's rescue_stale. All three
go through pgfleet.failed_attempt; each is checked on both branches (queued again, dead)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet.sql import rescue as rescue_store, store
from tests.support.rescue import rescue_all

WORKER = "host-a:42:abc"
Conn = psycopg.Connection[Any]


@dataclass(frozen=True)
class Path:
    fail: Callable[[Conn, int, int], None]  # (conn, job id, fence)
    last_error: str
    logged_error: str  # the text kept in the errors history
    retry_in: float  # seconds after now() a retried job is due


def by_worker(final: bool) -> Path:
    def fail(conn: Conn, job_id: int, fence: int) -> None:
        failure = store.Failure(id=job_id, fence=fence, error="boom", delay=7.5, final=final)
        assert store.complete_failed(conn, worker=WORKER, failures=[failure]) != {}
    return Path(fail, "boom", "boom", 7.5)


def by_supervisor(conn: Conn, job_id: int, fence: int) -> None:
    assert rescue_store.rescue_holder(conn, worker=WORKER, error="worker died: SIGSEGV",
                                      delays={job_id: 7.5}, shared=False) != []


def by_lease_expiry(conn: Conn, job_id: int, fence: int) -> None:
    # What maintenance does once its lease watch saw the lease unrenewed for a lease.
    assert rescue_all(conn) != []


PATHS = {
    "complete_failed": by_worker(final=False),
    "rescue_holder": Path(by_supervisor, "worker died: SIGSEGV", "worker died: SIGSEGV", 7.5),
    "rescue_stale": Path(by_lease_expiry, f"lease expired (worker {WORKER} stopped"
                           " heartbeating)", f"lease expired (worker {WORKER})", 0.0),
}


def running_job(conn: Conn, max_attempts: int) -> tuple[int, int, datetime]:
    """A job claimed by WORKER with one earlier error in its history: (id, fence, the
    run_at it was claimed at)."""
    job_id = pgfleet.enqueue(conn, "noop", max_attempts=max_attempts)
    conn.execute("UPDATE pgfleet.jobs SET errors = '[{\"earlier\": true}]' WHERE id = %s",
                 (job_id,))
    run_at = conn.execute("SELECT run_at FROM pgfleet.jobs WHERE id = %s",
                          (job_id,)).fetchone()
    [job] = store.claim(conn, queue="default", limit=1, worker=WORKER, lease=30)
    assert job.id == job_id and run_at is not None
    return job_id, job.fence, run_at[0]


def fail_in_one_transaction(conn: Conn, path: Path, job_id: int, fence: int
                            ) -> tuple[dict[str, Any], datetime, str]:
    """Fail the attempt; the job's row, and now() and its JSON text as the failure saw
    them (one transaction: one now())."""
    with conn.transaction():
        path.fail(conn, job_id, fence)
        now = conn.execute("SELECT now(), to_jsonb(now())").fetchone()
    row = store.get_job(conn, job_id)
    assert row is not None and now is not None
    return row, now[0], now[1]


@pytest.mark.parametrize("attempts_left", [True, False], ids=["queued-again", "dead"])
@pytest.mark.parametrize("name", PATHS)
def test_a_failed_attempt(conn: Conn, name: str, attempts_left: bool) -> None:
    path = PATHS[name]
    job_id, fence, run_at = running_job(conn, max_attempts=2 if attempts_left else 1)
    row, now, now_json = fail_in_one_transaction(conn, path, job_id, fence)
    if attempts_left:  # due again after the path's delay
        expected = ("queued", now + timedelta(seconds=path.retry_in), None)
    else:  # run_at kept: when the last attempt was due
        expected = ("dead", run_at, now)
    assert (row["state"], row["run_at"], row["finished_at"]) == expected
    assert (row["attempt"], row["lease_holder"], row["lease_expires_at"]) == (1, None, None)
    assert row["last_error"] == path.last_error
    assert row["errors"] == [{"earlier": True},
                             {"attempt": 1, "at": now_json, "error": path.logged_error}]


def test_a_final_error_is_dead_with_attempts_left(conn: Conn) -> None:
    job_id, fence, run_at = running_job(conn, max_attempts=5)
    row, now, _ = fail_in_one_transaction(conn, by_worker(final=True), job_id, fence)
    assert (row["state"], row["finished_at"], row["run_at"]) == ("dead", now, run_at)


def test_a_failure_of_an_attempt_taken_over_changes_nothing(conn: Conn) -> None:
    job_id, fence, _ = running_job(conn, max_attempts=3)
    before = store.get_job(conn, job_id)
    failure = store.Failure(id=job_id, fence=fence + 1, error="late", delay=0, final=False)
    assert store.complete_failed(conn, worker=WORKER, failures=[failure]) == {}
    assert store.complete_failed(conn, worker="another", failures=[
        store.Failure(id=job_id, fence=fence, error="late", delay=0, final=False)]) == {}
    assert store.get_job(conn, job_id) == before


def test_a_worker_that_gave_up_its_leases_is_refunded_three_times_then_charged(
        conn: Conn) -> None:
    """rescue_gave_up: no crash counted, no solo, the attempt number kept and
    the attempt refunded like a stopping worker's give-back, at most MAX_REFUNDS times, so
    a job that itself takes the database down each time still ends dead."""
    job_id = pgfleet.enqueue(conn, "noop", max_attempts=1)
    for attempt in range(1, store.MAX_REFUNDS + 2):
        conn.execute("UPDATE pgfleet.jobs SET run_at = now() WHERE id = %s", (job_id,))
        [job] = store.claim(conn, queue="default", limit=1, worker=WORKER, lease=30)
        assert (job.id, job.attempt) == (job_id, attempt)
        [rescued] = rescue_store.rescue_gave_up(conn, worker=WORKER, error="given back: x",
                                                running=[job_id])
        row = conn.execute("SELECT state::text, attempt, refunds, crashes, solo, last_error,"
                           " run_at > now() FROM pgfleet.jobs WHERE id = %s",
                           (job_id,)).fetchone()
        assert row is not None and rescued.ran
        if attempt <= store.MAX_REFUNDS:
            assert row == ("queued", attempt, attempt, 0, False,
                           "given back: x (attempt refunded)", True)
        else:
            assert row == ("dead", attempt, store.MAX_REFUNDS, 0, False,
                           f"given back: x (attempt counted: {store.MAX_REFUNDS} refunds"
                           " used)", False)


def test_a_job_held_but_not_running_when_its_worker_gave_up_goes_back_uncharged(
        conn: Conn) -> None:
    ran, held = pgfleet.enqueue_many(conn, [{"task": "noop"}, {"task": "noop"}])
    assert len(store.claim(conn, queue="default", limit=2, worker=WORKER, lease=30)) == 2
    rescued = rescue_store.rescue_gave_up(conn, worker=WORKER, error="given back: x",
                                          running=[ran])
    assert sorted((r.id, r.ran) for r in rescued) == [(ran, True), (held, False)]
    row = conn.execute("SELECT state::text, attempt, refunds, crashes, run_at <= now(),"
                       " last_error FROM pgfleet.jobs WHERE id = %s", (held,)).fetchone()
    assert row == ("queued", 0, 0, 0, True, "given back: x (not running its task: not charged)")
