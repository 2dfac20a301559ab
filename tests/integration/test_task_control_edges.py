"""Findings of an outside trial of task control (docs/tasks.md), each fixed."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet.errors import DatabaseUnavailable, PayloadError, PgfleetError
from pgfleet.sql import migrate as migrations
from pgfleet.testing import run_jobs
from tests.support.cluster import started_cluster
from tests.support.workers import scalar, wait_for


@pgfleet.task(name="edges.retry_on_raises", queue="edges",
              retry_on=lambda exc: (_ for _ in ()).throw(SystemExit(1)))
def retry_on_raises() -> None:
    raise ValueError("boom")


@pgfleet.task(name="edges.returns", queue="edges")
def returns(value: int) -> dict[str, int]:
    return {"value": value}


def test_a_retry_on_function_that_raises_system_exit_counts_as_no(dsn: str) -> None:
    # It escaped the job's thread: the job stayed `running` for good and the thread died.
    job_id = pgfleet.enqueue(dsn, retry_on_raises, max_attempts=5)
    with psycopg.connect(dsn, autocommit=True) as conn:
        [outcome] = run_jobs(conn, queue="edges")
    assert (outcome.state, outcome.attempt) == ("dead", 1)
    assert scalar(dsn, "SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                  (job_id,)) == "dead"


def test_run_jobs_stores_the_return_value_like_a_worker(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = pgfleet.enqueue(conn, returns, {"value": 9})
        assert [o.state for o in run_jobs(conn, queue="edges")] == ["succeeded"]
        assert pgfleet.result(conn, job_id) == {"value": 9}


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, "3", True])
def test_result_refuses_a_timeout_that_is_not_seconds(dsn: str, timeout: Any) -> None:
    job_id = pgfleet.enqueue(dsn, "noop")
    with pytest.raises(PayloadError, match=r"^timeout: must be None or a number of seconds"):
        pgfleet.result(dsn, job_id, timeout=timeout)


@pytest.mark.parametrize("job_id", [2**70, 0, -5])
def test_result_of_an_id_no_job_can_have_is_a_clear_error(dsn: str, job_id: int) -> None:
    with pytest.raises(PgfleetError, match=f"^no job with id {job_id}$"):
        pgfleet.result(dsn, job_id, timeout=1)


def test_a_wait_for_a_result_outlives_a_database_restart() -> None:
    # It raised psycopg's OperationalError as soon as the server restarted.
    cluster = started_cluster()
    try:
        url = cluster.url(cluster.create_database())
        migrations.migrate(url)
        job_id = pgfleet.enqueue(url, "noop")
        got: list[Any] = []
        waiter = threading.Thread(
            target=lambda: got.append(_outcome(url, job_id)), daemon=True)
        waiter.start()
        wait_for(lambda: scalar(url, "SELECT count(*) FROM pg_stat_activity"
                                     " WHERE query LIKE '%%job_outcome%%'"
                                     " AND pid <> pg_backend_pid()") == 1, timeout=30)
        cluster.restart("fast")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE pgfleet.jobs SET state = 'succeeded', finished_at = now(),"
                         " result = '{\"ok\": true}' WHERE id = %s", (job_id,))
        waiter.join(60)
        assert got == [{"ok": True}]
        cluster.stop("fast")
        with pytest.raises(DatabaseUnavailable, match="unreachable while waiting for job"):
            pgfleet.result(url, job_id + 1, timeout=2)
    finally:
        cluster.destroy()


def _outcome(url: str, job_id: int) -> Any:
    try:
        return pgfleet.result(url, job_id, timeout=60)
    except BaseException as exc:  # reported by the assertion, not lost in the thread
        return exc


def test_a_wait_on_a_url_that_can_never_connect_fails_at_once(dsn: str) -> None:
    # timeout=None: a wait that retried a permanent error would never end.
    missing = dsn.replace("dbname=", "dbname=no_such_db_") if "dbname=" in dsn else dsn + "x"
    with pytest.raises(DatabaseUnavailable, match="does not exist"):
        pgfleet.result(missing, 1, timeout=None)


def test_a_wait_on_the_callers_connection_that_breaks_says_so(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "noop")
    got: list[Any] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid

        def wait() -> None:
            try:
                got.append(pgfleet.result(conn, job_id, timeout=60))
            except BaseException as exc:  # reported by the assertion below
                got.append(exc)

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
                                     " AND query LIKE '%%job_outcome%%'", (pid,)) == 1,
                 timeout=30)
        scalar(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
        waiter.join(30)
    assert len(got) == 1 and isinstance(got[0], DatabaseUnavailable), got
    assert f"lost the database connection while waiting for job {job_id}" in str(got[0])
