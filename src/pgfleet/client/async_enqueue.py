"""Enqueueing from asyncio code: `await enqueue_async(aconn, ...)` on a
psycopg.AsyncConnection, in the caller's transaction.

The arguments and their checks are pgfleet.enqueue's (enqueue._row and enqueue._rows), so
a field added there is accepted here too; the statements are pgfleet/sql/store.py's,
awaited."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from pgfleet.client import producer
from pgfleet.client.enqueue import BULK_CHUNK, _row, _rows
from pgfleet.errors import PgfleetError
from pgfleet.sql import store
from pgfleet.sql.rows import Enqueued, NewJobRow
from pgfleet.tasks import Task

AsyncConn = psycopg.AsyncConnection[Any]

# enqueue._row's keyword arguments that have no default there.
_DEFAULTS: dict[str, Any] = {"queue": None, "priority": 0, "delay": None, "run_at": None,
                             "max_attempts": None, "unique_key": None}


def _check(conn: Any) -> None:
    if isinstance(conn, psycopg.Connection | str):
        raise PgfleetError("enqueue_async takes a psycopg.AsyncConnection; use "
                           "pgfleet.enqueue with a blocking connection or a URL")


async def enqueue_job_async(conn: AsyncConn, task: str | Task,
                            args: Mapping[str, Any] | None = None, **options: Any) -> Enqueued:
    """`pgfleet.enqueue_job` on an AsyncConnection: the same keyword arguments."""
    _check(conn)
    row = _row(task, args, **{**_DEFAULTS, **options})

    async def insert(rows: Sequence[NewJobRow]) -> Enqueued:
        return await store.enqueue_async(conn, rows[0])

    return await producer.send_async([row], insert, lambda done: [done.job_id],
                                     lambda ids: Enqueued(ids[0], True))


async def enqueue_async(conn: AsyncConn, task: str | Task,
                        args: Mapping[str, Any] | None = None, **options: Any) -> int:
    """`pgfleet.enqueue` on an AsyncConnection: add one job in the connection's current
    transaction and return its id. The keyword arguments are enqueue's (queue, priority,
    delay, run_at, max_attempts, unique_key, meta, ...)."""
    return (await enqueue_job_async(conn, task, args, **options)).job_id


async def enqueue_many_async(conn: AsyncConn, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
    """`pgfleet.enqueue_many` on an AsyncConnection: every job validated first, then
    thousands per statement; their ids in input order."""
    _check(conn)

    async def insert(rows: Sequence[NewJobRow]) -> list[int]:
        ids: list[int] = []
        for start in range(0, len(rows), BULK_CHUNK):
            ids.extend(await store.enqueue_many_async(conn, rows[start:start + BULK_CHUNK]))
        return ids

    return await producer.send_async(_rows(jobs), insert, lambda ids: ids, lambda ids: ids)


