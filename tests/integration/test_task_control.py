"""Task control through real `pgfleet worker` processes: results (Python and SQL),
cancelling running jobs, Snooze, Retry(delay), retry_on, meta filters and progress."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet.runtime.exit_codes import EXIT_TIMEOUT
from pgfleet.sql import rescue as rescue_store, store
from tests.support import pg
from tests.support.roles import login_roles, role_dsn
from tests.support.workers import scalar, wait_for, worker_process, worker_thread

TASKS = "tests.support.controltasks"


@contextmanager
def worker(dsn: str, *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = worker_process(dsn, "default", "--tasks", TASKS, *extra)
    try:
        yield proc
    finally:
        proc.terminate()
        code = proc.wait(60)
        assert code == 0, proc.stderr.read().decode() if proc.stderr else code


def events(dsn: str, job_id: int) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT event FROM audit WHERE job_id = %s ORDER BY at",
                            (job_id,)).fetchall()
    return [r[0] for r in rows]


def job(dsn: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = store.get_job(conn, job_id)
    assert found is not None
    return found


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfleet", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_result_round_trip_from_python_and_sql(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.add", {"a": 2, "b": 40})
    waited: list[Any] = []
    # Waiting starts before any worker runs: the wait is marked and woken by the end.
    waiter = threading.Thread(target=lambda: waited.append(
        pgfleet.result(dsn, job_id, timeout=120)))
    waiter.start()
    wait_for(lambda: scalar(dsn, "SELECT result_waited FROM pgfleet.jobs WHERE id = %s",
                            (job_id,)))
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgfleet_job_end")
        with worker(dsn):
            waiter.join(120)
            assert waited == [{"sum": 42, "inputs": [2, 40]}]
            notes = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
    assert notes == [str(job_id)]  # the waited-for end sent its NOTIFY
    assert scalar(dsn, "SELECT pgfleet.job_result(%s)", (job_id,)) == {"sum": 42,
                                                                       "inputs": [2, 40]}
    with psycopg.connect(dsn, autocommit=True) as conn:  # an autocommit connection works too
        assert pgfleet.result(conn, job_id) == {"sum": 42, "inputs": [2, 40]}
    shown = cli("jobs", "show", str(job_id))
    assert shown.returncode == 0
    assert 'result: {"sum": 42, "inputs": [2, 40]}' in shown.stdout


def test_a_result_that_is_not_json_fails_the_job_for_good(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.unserialisable", max_attempts=5)
    with worker(dsn), pytest.raises(pgfleet.JobFailed) as failed:
        pgfleet.result(dsn, job_id, timeout=120)
    assert "could not be stored" in str(failed.value)
    assert "not JSON-serialisable" in str(failed.value)
    row = job(dsn, job_id)
    assert (row["state"], row["attempt"], row["result"]) == ("dead", 1, None)
    with psycopg.connect(dsn, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.RaiseException, match=f"job {job_id} is dead"):
        conn.execute("SELECT pgfleet.job_result(%s)", (job_id,))


def test_sql_job_result_names_unfinished_and_unknown_jobs(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.add", {"a": 1, "b": 1})
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                           match=rf"job {job_id} has not finished \(queued\)"):
            conn.execute("SELECT pgfleet.job_result(%s)", (job_id,))
        with pytest.raises(psycopg.errors.NoDataFound, match="no job with id 999999"):
            conn.execute("SELECT pgfleet.job_result(999999)")
    with pytest.raises(TimeoutError, match="has not finished"):
        pgfleet.result(dsn, job_id, timeout=0.2)
    with pytest.raises(pgfleet.PgfleetError, match="no job with id 999999"):
        pgfleet.result(dsn, 999999, timeout=1)


def test_a_running_job_is_cancelled_and_the_task_sees_it(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.until_cancelled", meta={"customer": 7})
    with worker(dsn):
        wait_for(lambda: "started" in events(dsn, job_id), timeout=120)
        # Progress is visible while the job runs: in the row, `jobs show` and `status`.
        wait_for(lambda: job(dsn, job_id)["progress"] == 0.5, timeout=60)
        shown = cli("jobs", "show", str(job_id))
        assert "progress: 0.5" in shown.stdout and 'meta: {"customer": 7}' in shown.stdout
        status = cli("status")
        assert f"job {job_id}  default  ctl.until_cancelled  50%" in status.stdout
        assert pgfleet.cancel(dsn, job_id) == "cancelling"
        with pytest.raises(pgfleet.JobCancelled):
            pgfleet.result(dsn, job_id, timeout=120)
    assert events(dsn, job_id) == ["started", "saw_cancel"]
    row = job(dsn, job_id)
    assert row["state"] == "cancelled" and row["cancel_requested_at"] is not None
    assert row["last_error"] == "cancelled while running (attempt 1)"
    assert pgfleet.cancel(dsn, job_id) is None  # finished: nothing to cancel
    with psycopg.connect(dsn, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.RaiseException, match=f"job {job_id} was cancelled"):
        conn.execute("SELECT pgfleet.job_result(%s)", (job_id,))


def test_the_progress_a_task_reports_last_is_kept_after_it_ends(dsn: str) -> None:
    """Reports are written at most about once a second while a job runs; the last one
    of a job that ends sooner used to be lost, leaving the row at its first report."""
    ids = pgfleet.enqueue_many(dsn, [{"task": "ctl.quick_progress", "args": {"steps": 50}}] * 3)
    with worker(dsn):
        for job_id in ids:
            assert pgfleet.result(dsn, job_id, timeout=120) == 50
    for job_id in ids:
        assert job(dsn, job_id)["progress"] == {"done": 50, "of": 50}, job_id


def test_a_task_that_ignores_the_cancel_is_interrupted(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.ignores_cancel")
    with worker(dsn):
        wait_for(lambda: "started" in events(dsn, job_id), timeout=120)
        out = cli("jobs", "cancel", str(job_id))
        assert out.returncode == 0, out.stderr
        assert f"job {job_id} is running: its worker stops it" in out.stdout
        wait_for(lambda: job(dsn, job_id)["state"] == "cancelled", timeout=60)
    # Interrupted, not left to run its two minutes; its `finally` ran.
    assert events(dsn, job_id) == ["started", "cleanup"]


def test_cancel_many_by_queue_and_task(dsn: str) -> None:
    mine = [pgfleet.enqueue(dsn, "ctl.add", {"a": i, "b": 0}, queue="batch") for i in range(3)]
    other_task = pgfleet.enqueue(dsn, "ctl.snooze_once", queue="batch")
    other_queue = pgfleet.enqueue(dsn, "ctl.add", {"a": 0, "b": 0}, queue="elsewhere")
    out = cli("jobs", "cancel", "--queue", "batch", "--task", "ctl.add", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"id": i, "state": "cancelled"} for i in mine]
    assert pgfleet.cancel_many(dsn, queue="elsewhere") == {other_queue: "cancelled"}
    assert job(dsn, other_task)["state"] == "queued"
    refused = cli("jobs", "cancel")
    assert refused.returncode == 2 and "give JOB_IDs, --queue or --task" in refused.stderr


def test_snooze_does_not_spend_an_attempt(dsn: str) -> None:
    # One attempt allowed: had the snooze spent it, the job could not run again.
    job_id = pgfleet.enqueue(dsn, "ctl.snooze_once", max_attempts=1)
    with worker(dsn):
        assert pgfleet.result(dsn, job_id, timeout=120) == "after the snooze"
    assert events(dsn, job_id) == ["snoozed", "finished"]
    row = job(dsn, job_id)
    assert (row["state"], row["attempt"], row["snoozes"]) == ("succeeded", 1, 1)
    assert row["errors"] == []


def test_retry_with_a_delay_spends_an_attempt_and_waits_that_long(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.retry_later", {"delay": 3600}, max_attempts=3)
    with worker(dsn):
        wait_for(lambda: job(dsn, job_id)["errors"], timeout=120)
    row = job(dsn, job_id)
    assert (row["state"], row["attempt"]) == ("queued", 1)
    assert row["last_error"].startswith("Retry: the upstream asked us to come back later")
    # The task's backoff would have been 0.01 s: the delay it asked for was used instead.
    ahead = scalar(dsn, "SELECT extract(epoch FROM run_at - now()) FROM pgfleet.jobs"
                        " WHERE id = %s", (job_id,))
    assert 3000 < ahead <= 3600


def test_retry_on_fails_an_unlisted_exception_at_once(dsn: str) -> None:
    bug = pgfleet.enqueue(dsn, "ctl.retry_on_tuple", {"kind": "bug"}, max_attempts=5)
    blip = pgfleet.enqueue(dsn, "ctl.retry_on_tuple", {"kind": "connection"}, max_attempts=3)
    decided = pgfleet.enqueue(dsn, "ctl.retry_on_callable", {"message": "a transient glitch"},
                              max_attempts=2)
    refused = pgfleet.enqueue(dsn, "ctl.retry_on_callable", {"message": "bad input"},
                              max_attempts=5)
    with worker(dsn):
        for job_id in (bug, blip, decided, refused):
            with pytest.raises(pgfleet.JobFailed):
                pgfleet.result(dsn, job_id, timeout=120)
    assert job(dsn, bug)["attempt"] == 1 and "ValueError" in job(dsn, bug)["last_error"]
    assert job(dsn, blip)["attempt"] == 3  # listed: retried until the attempts ran out
    assert job(dsn, decided)["attempt"] == 2
    assert job(dsn, refused)["attempt"] == 1


def test_a_timeout_is_retried_whatever_retry_on_lists(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.slow_listed", max_attempts=2)
    with worker(dsn), pytest.raises(pgfleet.JobFailed, match=r"timed out after 0\.3s"):
        pgfleet.result(dsn, job_id, timeout=120)
    assert job(dsn, job_id)["attempt"] == 2
    assert events(dsn, job_id) == ["started", "started"]


def test_jobs_list_filters_by_meta(dsn: str) -> None:
    a = pgfleet.enqueue(dsn, "ctl.add", {"a": 1, "b": 1}, meta={"customer": 42, "tier": "gold"})
    pgfleet.enqueue(dsn, "ctl.add", {"a": 1, "b": 1}, meta={"customer": 43, "tier": "gold"})
    c = pgfleet.enqueue(dsn, "ctl.add", {"a": 1, "b": 1}, meta={"customer": "42"})
    out = cli("jobs", "list", "--meta", "customer=42", "--json")
    assert out.returncode == 0, out.stderr
    assert [r["id"] for r in json.loads(out.stdout)] == [c, a]
    both = cli("jobs", "list", "--meta", "customer=42", "--meta", "tier=gold", "--json")
    assert [r["id"] for r in json.loads(both.stdout)] == [a]
    bad = cli("jobs", "list", "--meta", "customer")
    assert bad.returncode == 2 and "--meta 'customer': expected KEY=VALUE" in bad.stderr


def test_snoozes_are_bounded(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.snooze_always", max_attempts=1)
    # Set up a job one snooze short of the limit rather than snoozing it 99 times.
    scalar(dsn, "UPDATE pgfleet.jobs SET snoozes = 99 WHERE id = %s RETURNING id", (job_id,))
    with worker(dsn), pytest.raises(pgfleet.JobFailed, match="snoozed 100 times already"):
        pgfleet.result(dsn, job_id, timeout=120)
    row = job(dsn, job_id)
    assert (row["state"], row["attempt"], row["snoozes"]) == ("dead", 1, 100)
    assert events(dsn, job_id) == ["snoozed", "snoozed"]


def test_without_notifications_the_lease_renewal_delivers_the_cancel(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.until_cancelled")
    with worker(dsn, "--no-notify"):
        wait_for(lambda: "started" in events(dsn, job_id), timeout=120)
        assert pgfleet.cancel(dsn, job_id) == "cancelling"
        wait_for(lambda: job(dsn, job_id)["state"] == "cancelled", timeout=60)
    assert events(dsn, job_id) == ["started", "saw_cancel"]


def test_a_cancelled_running_job_ends_cancelled_however_its_attempt_ends(
    conn: psycopg.Connection[Any],
) -> None:
    """The trigger of migration 0011, on the statements that end an attempt without the
    worker's cancel: a rescue after the worker died, a give-back, a failed attempt."""
    ids = [pgfleet.enqueue(conn, "ctl.add", {"a": i, "b": 0}, max_attempts=1)
           for i in range(3)]
    claimed = store.claim(conn, queue="default", limit=3, worker="w1", lease=60)
    assert sorted(j.id for j in claimed) == ids
    assert pgfleet.cancel_many(conn, ids=ids) == {i: "cancelling" for i in ids}
    rescue_store.rescue_holder(conn, worker="w1", error="worker died: SIGKILL",
                               delays={ids[0]: 0}, shared=False)
    fences = {job.id: job.fence for job in claimed}
    store.give_back(conn, worker="w1", fences={ids[1]: fences[ids[1]]})
    store.complete_failed(conn, worker="w1", failures=[store.Failure(
        id=ids[2], fence=fences[ids[2]], error="boom", delay=0, final=False)])
    for job_id in ids:
        row = store.get_job(conn, job_id)
        assert row is not None and row["state"] == "cancelled" and row["finished_at"]
    # A retry runs the job again and forgets the cancel.
    assert store.retry_job(conn, ids[0]) == "default"
    row = store.get_job(conn, ids[0])
    assert row is not None
    assert (row["state"], row["cancel_requested_at"]) == ("queued", None)


def test_result_on_a_connection_inside_a_transaction_polls(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "ctl.add", {"a": 1, "b": 2})
    with worker(dsn), psycopg.connect(dsn) as conn:  # not autocommit: a transaction is open
        assert pgfleet.result(conn, job_id, timeout=120) == {"sum": 3, "inputs": [1, 2]}
        assert not scalar(dsn, "SELECT result_waited FROM pgfleet.jobs WHERE id = %s",
                          (job_id,))


@pytest.fixture
def owner_dsn(template_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated database as its owner, whatever PGFLEET_TEST_ROLE says: the test below
    grants to a role of its own."""
    with pg.fresh_database(template_db) as url:
        monkeypatch.setenv("PGFLEET_AUDIT_DSN", url)
        monkeypatch.setenv("PGFLEET_DATABASE_URL", url)
        yield url


def test_a_producer_may_wait_for_results_but_not_cancel(owner_dsn: str) -> None:
    with login_roles(owner_dsn) as make:
        producer = make("producer")
        applied = cli("--database-url", owner_dsn, "grants", "--producer", producer, "--apply")
        assert applied.returncode == 0, applied.stderr
        as_producer = role_dsn(owner_dsn, producer)
        job_id = pgfleet.enqueue(as_producer, "ctl.add", {"a": 1, "b": 1})
        with worker(owner_dsn):
            assert pgfleet.result(as_producer, job_id, timeout=120) == {"sum": 2,
                                                                        "inputs": [1, 1]}
        assert scalar(as_producer, "SELECT pgfleet.job_result(%s)", (job_id,))["sum"] == 2
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            pgfleet.cancel(as_producer, job_id)


def test_a_cancelled_task_stuck_in_c_gets_its_process_replaced(dsn: str) -> None:
    """Like a timeout: the interrupt cannot land in a blocking C call, so after kill_grace
    the worker exits (a supervisor starts a fresh one) and its rescue ends the job
    cancelled. In a thread, so that kill_grace can be short."""
    job_id = pgfleet.enqueue(dsn, "stubborn", {"seconds": 8.0})
    with worker_thread(dsn, kill_grace=0.5) as stuck:
        wait_for(lambda: "started" in events(dsn, job_id), timeout=120)
        assert pgfleet.cancel(dsn, job_id) == "cancelling"
        wait_for(lambda: stuck.events.stopped.is_set() or stuck.exit_code, timeout=60)
    assert stuck.exit_code == EXIT_TIMEOUT and stuck.events.timeouts == 0
    row = job(dsn, job_id)
    assert row["state"] == "running" and row["cancel_requested_at"] is not None
    with psycopg.connect(dsn, autocommit=True) as conn:  # the supervisor's rescue
        rescue_store.rescue_holder(conn, worker=stuck.s.worker_id,
                                   error="worker exited: job timeout",
                                   delays={job_id: 0.0}, shared=False)
    assert job(dsn, job_id)["state"] == "cancelled"
