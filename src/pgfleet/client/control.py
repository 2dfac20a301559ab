"""Task control from outside a task: wait for a job's result, cancel jobs.

`result` LISTENs on pgfleet_job_end, then marks the job as waited for (its end sends a
NOTIFY only then) and reads it; a notification ends a wait early, and the job is read
again at growing intervals regardless (NOTIFY is a hint, polling is the truth).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from pgfleet.client.enqueue import ConnOrDsn, _connection
from pgfleet.core import payload
from pgfleet.errors import (
    DatabaseUnavailable,
    JobCancelled,
    JobFailed,
    PayloadError,
    PgfleetError,
)
from pgfleet.sql import store
from pgfleet.sql.db import connect, is_permanent

END_CHANNEL = "pgfleet_job_end"
# Reads of the job while waiting: the first soon, then doubling up to POLL_MAX.
POLL_FIRST = 0.05
POLL_MAX = 2.0


def result(conn: ConnOrDsn, job_id: int, timeout: float | None = None) -> Any:
    """Wait for job `job_id` to end and return its result (the task's return value, None
    if it returned nothing). Raises JobFailed if the job is dead, JobCancelled if it was
    cancelled, TimeoutError after `timeout` seconds (None: wait for ever) and PgfleetError
    for an unknown id.

    Pass a URL or an autocommit connection: the wait is woken by NOTIFY. A connection in
    a transaction is only polled, without marking the job (a mark would hold the row's
    lock until the caller commits), and sees the job's end only at READ COMMITTED.

    With a URL the wait outlives a database restart: it reconnects until the deadline
    (DatabaseUnavailable if the database is still away then; at once for a wrong password
    or an unknown database). A connection of the caller's that breaks raises
    DatabaseUnavailable."""
    _check_id(job_id)
    deadline = None if timeout is None else time.monotonic() + _seconds(timeout)
    if isinstance(conn, str):
        return _wait_reconnecting(conn, job_id, deadline)
    try:
        return _wait(conn, job_id, deadline, listen=conn.autocommit)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"lost the database connection while waiting for job "
                                  f"{job_id}: {_first_line(exc)}") from None


# A bigint: an id past it names no job (and PostgreSQL would call it numeric).
_MAX_ID = 2**63 - 1
# Between reconnects while the database is away.
RECONNECT_PAUSE = 0.5


def _check_id(job_id: object) -> None:
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise PayloadError("job_id", f"must be an integer, got {type(job_id).__name__}")
    if not 1 <= job_id <= _MAX_ID:
        raise PgfleetError(f"no job with id {job_id}")


def _seconds(timeout: object) -> float:
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout) or timeout < 0):
        raise PayloadError("timeout", f"must be None or a number of seconds >= 0, got "
                                      f"{timeout!r}")
    return float(timeout)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _wait_reconnecting(dsn: str, job_id: int, deadline: float | None) -> Any:
    while True:
        try:
            with connect(dsn, autocommit=True) as own:
                return _wait(own, job_id, deadline, listen=True)
        except (psycopg.OperationalError, DatabaseUnavailable) as exc:
            # The wait reads the job again from the start, so nothing is missed.
            if isinstance(exc, DatabaseUnavailable) and is_permanent(exc):
                raise
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise DatabaseUnavailable(f"the database is unreachable while waiting for "
                                          f"job {job_id}: {_first_line(exc)}") from None
            time.sleep(RECONNECT_PAUSE if left is None else min(RECONNECT_PAUSE, left))


def _wait(conn: psycopg.Connection[Any], job_id: int, deadline: float | None,
          listen: bool) -> Any:
    if listen:
        conn.execute(f"LISTEN {END_CHANNEL}")
    try:
        pause = POLL_FIRST
        while True:
            outcome = store.job_outcome(conn, job_id, wait=listen)
            if outcome is None:
                raise PgfleetError(f"no job with id {job_id}")
            if outcome.state in ("succeeded", "dead", "cancelled"):
                return _ended(job_id, outcome)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"job {job_id} has not finished ({outcome.state})")
            wait = pause if left is None else min(pause, left)
            if listen:
                _notified(conn, str(job_id), wait)
            else:
                time.sleep(wait)
            pause = min(pause * 2, POLL_MAX)
    finally:
        if listen and not conn.closed:
            conn.execute(f"UNLISTEN {END_CHANNEL}")


def _notified(conn: psycopg.Connection[Any], payload_id: str, seconds: float) -> None:
    """Wait up to `seconds` for the end of job `payload_id` (other jobs' ends are skipped)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        for note in conn.notifies(timeout=left, stop_after=1):
            if note.payload == payload_id:
                return


def _ended(job_id: int, outcome: store.JobOutcome) -> Any:
    if outcome.state == "dead":
        raise JobFailed(job_id, outcome.last_error)
    if outcome.state == "cancelled":
        raise JobCancelled(job_id)
    if outcome.result is None:
        return None
    text = outcome.result
    return payload.load_args(text, len(text.encode("utf-8")), payload.MAX_RESULT_BYTES,
                             field="result")


def cancel(conn: ConnOrDsn, job_id: int) -> str | None:
    """Cancel a job: 'cancelled' if it was waiting (it will not run), 'cancelling' if it
    is running (its worker stops it within about a second and it ends cancelled), None
    if it is finished or unknown."""
    return cancel_many(conn, ids=[job_id]).get(job_id)


def cancel_many(conn: ConnOrDsn, *, ids: Sequence[int] | None = None, queue: str | None = None,
                task: str | None = None) -> dict[int, str]:
    """Cancel the unfinished jobs matching every filter given (ids, queue, task; at least
    one): {id: 'cancelled' or 'cancelling'} as `cancel` says."""
    if ids is None and queue is None and task is None:
        raise PgfleetError("cancel_many: give ids, queue or task")
    with _connection(conn) as c:
        found = store.cancel_jobs(c, ids=ids, queue=queue, task=task)
    return {job_id: "cancelling" if state == "running" else state
            for job_id, state in found.items()}
