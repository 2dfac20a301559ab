"""A bulk enqueue on a blocking connection: chunks of rows, one INSERT each, sent back to
back in one pipeline, then each chunk's unique keys held elsewhere looked up (the steps of
pgfleet/sql/bulk_plan.py; store.enqueue_many_async drives the same plan on an asyncio
connection).

Pipelined, the server inserts chunk k while the client validates and encodes chunk k+1
(`chunks` may be a generator that validates lazily): on two cores that hides most of the
client's time behind the server's (bench/bulk_ab.py measures it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from pgfleet.errors import PgfleetError
from pgfleet.sql import bulk_plan as enqueue_plan, store
from pgfleet.sql.rows import NewJobRow

Conn = psycopg.Connection[Any]
Rows = Sequence[NewJobRow]
# What a chunk's INSERT returned: its ids when no row had a unique key (one array,
# _ids), else None and pgfleet.enqueue_jobs' rows for the bulk plan.
Done = tuple[list[int] | None, list[enqueue_plan.Inserted]]
_SAVEPOINT = b"pgfleet_enqueue_many"


def enqueue_chunks(conn: Conn, chunks: Iterable[Rows], atomic: bool) -> list[int]:
    """Insert each chunk of rows (pgfleet.client.enqueue._row's tuples); their ids in input
    order (the existing job's id for a unique key an unfinished job already holds).

    `atomic`: the chunks go in one transaction (an autocommit connection) or under a
    savepoint (the caller's transaction), so that an exception raised by `chunks` (a
    PayloadError while validating a later chunk) removes the rows already sent and leaves
    the caller's transaction usable, as when every row was validated before the first
    was sent."""
    sent: list[Rows] = []
    if not atomic:
        return _finish(conn, sent, _insert(conn, chunks, sent))
    if conn.autocommit:
        with conn.transaction():
            return _finish(conn, sent, _insert(conn, chunks, sent))
    conn.execute(b"SAVEPOINT " + _SAVEPOINT)
    try:
        inserted = _insert(conn, chunks, sent)
    except BaseException:
        # Raised on this side (a refused job, or the caller's iterable failing): undo the
        # chunks sent. A database error has aborted the transaction anyway.
        if conn.info.transaction_status is TransactionStatus.INTRANS:
            conn.execute(b"ROLLBACK TO SAVEPOINT " + _SAVEPOINT)
            conn.execute(b"RELEASE SAVEPOINT " + _SAVEPOINT)
        raise
    ids = _finish(conn, sent, inserted)
    conn.execute(b"RELEASE SAVEPOINT " + _SAVEPOINT)
    return ids


def _insert(conn: Conn, chunks: Iterable[Rows], sent: list[Rows]) -> list[Done]:
    """Send each chunk's INSERT without waiting for the previous one's result; the chunks
    sent are appended to `sent`."""
    cursors = []
    with conn.pipeline():
        for rows in chunks:
            cur = conn.cursor()
            cursors.append((cur, store.send_enqueue_many(cur, rows), len(rows)))
            sent.append(rows)
    results: list[Done] = []
    for cur, keyless, count in cursors:
        with cur:
            results.append((_ids(cur, count), []) if keyless
                           else (None, store.enqueue_many_result(cur)))
    return results


def _ids(cur: psycopg.Cursor[Any], count: int) -> list[int]:
    """The ids of a chunk of `count` rows sent as enqueue_many_ids, in input order."""
    row = cur.fetchone()
    ids: list[int] = row[0] if row is not None and row[0] is not None else []
    if len(ids) != count:
        raise PgfleetError(f"enqueue_many_ids returned {len(ids)} ids for {count} rows")
    return ids


def _finish(conn: Conn, chunks: Sequence[Rows], inserted: Sequence[Done]) -> list[int]:
    ids: list[int] = []
    for rows, (chunk_ids, done) in zip(chunks, inserted, strict=True):
        ids.extend(_rest_of_plan(conn, rows, done) if chunk_ids is None else chunk_ids)
    return ids


def _rest_of_plan(conn: Conn, rows: Rows, inserted: list[enqueue_plan.Inserted]) -> list[int]:
    """Run the steps of the bulk plan (pgfleet/sql/bulk_plan.py) after a chunk's first
    insert."""
    plan = enqueue_plan.enqueue_many(rows)
    try:
        next(plan)
        step = plan.send(inserted)
        while True:
            kind, value = step
            if kind == "insert":  # rows with unique keys again: never an id array
                step = plan.send(_insert(conn, [value], [])[0][1])
            else:
                step = plan.send(store.jobs_holding_keys(conn, value))
    except StopIteration as done:
        return list(done.value)
