"""Enqueueing from Python: one job, or many per round trip.

Pass a psycopg connection and the job commits or rolls back with the caller's transaction;
pass a DSN string and pgfleet opens, commits and closes a connection of its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgfleet.client import bulk as bulk_enqueue, producer
from pgfleet.core import payload
from pgfleet.errors import PayloadError
from pgfleet.sql import store
from pgfleet.sql.db import connect
from pgfleet.sql.rows import Enqueued, NewJobRow
from pgfleet.tasks import Task

# The built-in defaults; the database applies them (with the configured ones before them)
# to whatever an enqueue leaves out: see pgfleet.enqueue_job and pgfleet.enqueue_jobs.
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


_JOB_FIELDS = frozenset({"task", "args", "queue", "priority", "delay", "run_at",
                         "max_attempts", "unique_key", "meta", "concurrency_key"})


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
    meta: Mapping[str, Any] | None = None,
    concurrency_key: str | None = None,
) -> NewJobRow:
    """Validate one job's fields; raises PayloadError before anything is written.

    Precedence of defaults: the call, then the task (a Task object here; a name is looked
    up in what the supervisors published), then the queue's config, then built-in."""
    if isinstance(task, Task):
        queue = task.queue if queue is None else queue
        max_attempts = task.max_attempts if max_attempts is None else max_attempts
        task = task.name
    if delay is not None and run_at is not None:
        raise PayloadError("run_at", "give either delay or run_at, not both")
    return NewJobRow(
        payload.name("task", task),
        payload.args_json(args),
        payload.name("queue", queue) if queue is not None else None,
        payload.bounded_int("priority", priority, payload.PRIORITY_RANGE),
        payload.delay_seconds(delay) if delay is not None else 0.0,
        payload.run_at(run_at) if run_at is not None else None,
        (payload.bounded_int("max_attempts", max_attempts, payload.ATTEMPTS_RANGE)
         if max_attempts is not None else None),
        payload.name("unique_key", unique_key) if unique_key is not None else None,
        payload.meta_json(meta) if meta else None,
        (payload.name("concurrency_key", concurrency_key)
         if concurrency_key is not None else None),
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
    meta: Mapping[str, Any] | None = None,
    concurrency_key: str | None = None,
) -> int:
    """Add one job and return its id.

    With `unique_key`, if an unfinished job of the same task already holds that key,
    nothing is added and that job's id is returned (`enqueue_job` also says which
    happened). Lower `priority` runs first. `meta` is a small JSON object stored with the
    job; `concurrency_key` groups jobs for per-key limits.
    """
    return enqueue_job(
        conn, task, args, queue=queue, priority=priority, delay=delay, run_at=run_at,
        max_attempts=max_attempts, unique_key=unique_key, meta=meta,
        concurrency_key=concurrency_key,
    ).job_id


def enqueue_job(
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
    meta: Mapping[str, Any] | None = None,
    concurrency_key: str | None = None,
) -> Enqueued:
    """Like `enqueue`, returning `Enqueued(job_id, created)`: `created` is False when an
    unfinished job of the same task already held `unique_key` and nothing was added."""
    row = _row(
        task, args, queue=queue, priority=priority, delay=delay, run_at=run_at,
        max_attempts=max_attempts, unique_key=unique_key, meta=meta,
        concurrency_key=concurrency_key,
    )
    return producer.send([row], lambda rows: _insert_one(conn, rows[0]),
                         lambda done: [done.job_id], lambda ids: Enqueued(ids[0], True))


def _insert_one(conn: ConnOrDsn, row: NewJobRow) -> Enqueued:
    with _connection(conn) as c:
        return store.enqueue(c, row)



def enqueue_many(conn: ConnOrDsn, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
    """Add many jobs, thousands per round trip; returns their ids in input order.

    Each job is a mapping with `task` and optionally `args`, `queue`, `priority`, `delay`,
    `run_at`, `max_attempts`, `unique_key`, `meta` and `concurrency_key`. Every job is
    validated before it is sent, and a bad one leaves nothing behind: the rows already
    sent are rolled back (a savepoint in the caller's transaction) before PayloadError.
    On an autocommit connection the chunks of one call commit together.
    """
    if producer.direct():
        return _stream(conn, jobs)
    return producer.send(_rows(jobs), lambda rows: _insert_rows(conn, rows),
                         lambda ids: ids, lambda ids: ids)


def _stream(conn: ConnOrDsn, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
    """enqueue_many without middleware: chunk k+1 is validated and encoded while the
    server inserts chunk k (pgfleet.client.bulk.enqueue_chunks), which roughly halves the time of a
    large batch on a machine with a core for each side."""
    batches = _batches(jobs)
    first = next(batches, None)
    if first is None:
        return []
    second = next(batches, None)
    raw = [first] if second is None else itertools.chain((first, second), batches)
    validated = (_rows(batch, start) for start, batch in raw)
    with _connection(conn) as c:
        return bulk_enqueue.enqueue_chunks(c, validated, atomic=second is not None)


def _batches(jobs: Iterable[Mapping[str, Any]]) -> Iterator[tuple[int, list[Mapping[str, Any]]]]:
    """The jobs in BULK_CHUNK slices, each with the index of its first job."""
    it = iter(jobs)
    start = 0
    while batch := list(itertools.islice(it, BULK_CHUNK)):
        yield start, batch
        start += len(batch)


def _rows(jobs: Iterable[Mapping[str, Any]], start: int = 0) -> list[NewJobRow]:
    """Validate the jobs of a bulk enqueue; PayloadError names the first bad one by its
    index among all the jobs (`start` is the index of the first of these)."""
    rows: list[NewJobRow] = []
    append = rows.append
    for index, job in enumerate(jobs, start):
        try:
            keys = job.keys()
        except AttributeError:
            raise PayloadError(f"jobs[{index}]", "must be a mapping of the job's fields, got "
                               f"{type(job).__name__}") from None
        if not keys <= _JOB_FIELDS:
            unknown = set(job) - _JOB_FIELDS
            raise PayloadError(f"jobs[{index}]", f"unknown field(s) {sorted(unknown)}")
        try:
            append(_plain_row(job) if keys <= _PLAIN_FIELDS else _job_row(job))
        except KeyError:
            raise PayloadError(f"jobs[{index}].task", "is missing") from None
        except PayloadError as exc:
            raise PayloadError(f"jobs[{index}].{exc.field}", exc.problem) from None
    return rows


def _job_row(job: Mapping[str, Any]) -> NewJobRow:
    get = job.get
    return _row(job["task"], get("args"), queue=get("queue"), priority=get("priority", 0),
                delay=get("delay"), run_at=get("run_at"), max_attempts=get("max_attempts"),
                unique_key=get("unique_key"), meta=get("meta"),
                concurrency_key=get("concurrency_key"))


# The fields of most jobs in a large batch; the others take their defaults.
_PLAIN_FIELDS = frozenset({"task", "args", "queue"})


def _plain_row(job: Mapping[str, Any]) -> NewJobRow:
    """_job_row for a job of only task, args and queue, without the keyword call and the
    checks of absent fields (~0.5 us of a bulk enqueue's ~2.5 us per job)."""
    task, queue = job["task"], job.get("queue")
    if isinstance(task, Task):
        return _job_row(job)
    return NewJobRow(payload.name("task", task), payload.args_json(job.get("args")),
            payload.name("queue", queue) if queue is not None else None,
            0, 0.0, None, None, None, None, None)


def _insert_rows(conn: ConnOrDsn, rows: Sequence[NewJobRow]) -> list[int]:
    """Rows already validated (and shown to the middleware): nothing on this side can fail
    once they are sent, so no savepoint; an autocommit connection commits each chunk on
    its own."""
    chunks = [rows[start:start + BULK_CHUNK] for start in range(0, len(rows), BULK_CHUNK)]
    with _connection(conn) as c:
        return bulk_enqueue.enqueue_chunks(c, chunks, atomic=False)
