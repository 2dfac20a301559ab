"""Enqueueing from Python: one job, or many per round trip.

Pass a psycopg connection and the job commits or rolls back with the caller's transaction;
pass a DSN string and pgfleet opens, commits and closes a connection of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgfleet import payload, store
from pgfleet.db import connect
from pgfleet.errors import PayloadError
from pgfleet.tasks import Task

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 20
# Rows per INSERT in enqueue_many: large enough to amortise the round trip, small enough
# to keep one statement's arrays well below any message size limit.
BULK_CHUNK = 5000

ConnOrDsn = psycopg.Connection[Any] | str


@contextmanager
def _connection(target: ConnOrDsn) -> Iterator[psycopg.Connection[Any]]:
    if isinstance(target, str):
        with connect(target, autocommit=False) as conn:
            yield conn
            conn.commit()
    else:
        yield target


# One validated job, in the column order of store.enqueue_many: task, args JSON, queue,
# priority, delay, run_at, max_attempts, unique_key. A tuple rather than a dict: a bulk
# enqueue builds tens of thousands of them and transposes them with zip().
Row = tuple[str, str, str, int, float, datetime | None, int, str | None]
_JOB_FIELDS = frozenset({"task", "args", "queue", "priority", "delay", "run_at",
                         "max_attempts", "unique_key"})


def _row(
    task: str | Task,
    args: Mapping[str, Any] | None,
    *,
    queue: str | None,
    priority: int,
    delay: float | timedelta | None,
    run_at: datetime | None,
    max_attempts: int | None,
    unique_key: str | None,
) -> Row:
    """Validate one job's fields; raises PayloadError before anything is written."""
    if isinstance(task, Task):
        queue = task.queue if queue is None else queue
        max_attempts = task.max_attempts if max_attempts is None else max_attempts
        task = task.name
    if delay is not None and run_at is not None:
        raise PayloadError("run_at", "give either delay or run_at, not both")
    return (
        payload.name("task", task),
        payload.args_json(args),
        payload.name("queue", DEFAULT_QUEUE if queue is None else queue),
        payload.bounded_int("priority", priority, payload.PRIORITY_RANGE),
        payload.delay_seconds(delay) if delay is not None else 0.0,
        payload.run_at(run_at) if run_at is not None else None,
        payload.bounded_int(
            "max_attempts",
            DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts,
            payload.ATTEMPTS_RANGE,
        ),
        payload.name("unique_key", unique_key) if unique_key is not None else None,
    )


def enqueue(
    conn: ConnOrDsn,
    task: str | Task,
    args: Mapping[str, Any] | None = None,
    *,
    queue: str | None = None,
    priority: int = 0,
    delay: float | timedelta | None = None,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    unique_key: str | None = None,
) -> int:
    """Add one job and return its id.

    With `unique_key`, if an unfinished job already holds that key, nothing is added and
    that job's id is returned. Lower `priority` runs first.
    """
    row = _row(
        task, args, queue=queue, priority=priority, delay=delay, run_at=run_at,
        max_attempts=max_attempts, unique_key=unique_key,
    )
    task_name, args_json, queue_name, priority, delay_s, at, attempts, key = row
    with _connection(conn) as c:
        return store.enqueue(
            c, task=task_name, args_json=args_json, queue=queue_name, priority=priority,
            delay=delay_s, run_at=at, max_attempts=attempts, unique_key=key,
        )


def enqueue_many(conn: ConnOrDsn, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
    """Add many jobs, thousands per round trip; returns their ids in input order.

    Each job is a mapping with `task` and optionally `args`, `queue`, `priority`, `delay`,
    `run_at`, `max_attempts` and `unique_key`. Every job is validated before the first
    row is sent, so a bad one leaves nothing behind.
    """
    rows: list[Row] = []
    append = rows.append
    for index, job in enumerate(jobs):
        if not job.keys() <= _JOB_FIELDS:
            unknown = set(job) - _JOB_FIELDS
            raise PayloadError(f"jobs[{index}]", f"unknown field(s) {sorted(unknown)}")
        get = job.get
        try:
            append(_row(
                job["task"], get("args"), queue=get("queue"), priority=get("priority", 0),
                delay=get("delay"), run_at=get("run_at"), max_attempts=get("max_attempts"),
                unique_key=get("unique_key"),
            ))
        except KeyError:
            raise PayloadError(f"jobs[{index}].task", "is missing") from None
        except PayloadError as exc:
            raise PayloadError(f"jobs[{index}].{exc.field}", exc.problem) from None
    ids: list[int] = []
    with _connection(conn) as c:
        for start in range(0, len(rows), BULK_CHUNK):
            ids.extend(store.enqueue_many(c, rows[start : start + BULK_CHUNK]))
    return ids

