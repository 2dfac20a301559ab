"""One function per named SQL query in sql/queries.sql.

Every function takes the connection to run on, so the caller decides the transaction:
the application's own (transactional enqueue) or a worker's autocommit connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.rows import BaseRowFactory, RowMaker, class_row

from pgfleet.core import payload
from pgfleet.errors import PayloadError
from pgfleet.sql import arrays as bulk_arrays, bulk_plan as enqueue_plan
from pgfleet.sql.queries import Cardinality, CardinalityError, Query, catalogue
from pgfleet.sql.rows import (
    CancelledJob as CancelledJob,
    ClaimCosts as ClaimCosts,
    ClaimedJob as ClaimedJob,
    DoneOrClaimed as DoneOrClaimed,
    Enqueued as Enqueued,
    Failure as Failure,
    FireTime as FireTime,
    FlowUsage as FlowUsage,
    HeartbeatAge as HeartbeatAge,
    HeldJob as HeldJob,
    HeldKey as HeldKey,
    HolderRescue as HolderRescue,
    JobId as JobId,
    JobOutcome as JobOutcome,
    JobProgress as JobProgress,
    JobQueue as JobQueue,
    JobRecord as JobRecord,
    JobState as JobState,
    JobSummary as JobSummary,
    KeyedJob as KeyedJob,
    KeyHolder as KeyHolder,
    Lease as Lease,
    NewJobRow as NewJobRow,
    NewJobs as NewJobs,
    ProcessRow as ProcessRow,
    PublishedSchedule as PublishedSchedule,
    QueueAge as QueueAge,
    QueueCount as QueueCount,
    QueueName as QueueName,
    QueueTally as QueueTally,
    RenewedJob as RenewedJob,
    RescuedJob as RescuedJob,
    ScheduleFire as ScheduleFire,
    ScheduleHolderRow as ScheduleHolderRow,
    ScheduleJob as ScheduleJob,
    ScheduleLastRun as ScheduleLastRun,
    ScheduleRow as ScheduleRow,
    ScheduleRunJob as ScheduleRunJob,
    XminHolder as XminHolder,
)

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]
Row = TypeVar("Row")
# A position in claim order: (priority, run_at, id).
ClaimKey = tuple[int, datetime, int]
Params = Mapping[str, Any] | None

# Give-backs of one job that do not count as attempts; later ones do, so a task that stops
# its own worker cannot loop at the same count for ever.
MAX_REFUNDS = 3


def queries() -> dict[str, str]:
    """{name: statement} of every query in sql/queries.sql."""
    return {name: query.sql.decode() for name, query in catalogue().items()}


def q(name: str) -> bytes:
    return catalogue()[name].sql


def _query(name: str, runner: Cardinality) -> Query:
    query = catalogue()[name]
    if query.cardinality is not runner:
        raise CardinalityError(f"query {name} is :{query.cardinality.value}"
                               f" but was run as :{runner.value}")
    return query


def by_name(cls: type[Row]) -> BaseRowFactory[Row]:
    """psycopg's class_row, filled by column name alike, but positionally when the columns
    come in the order of the fields (the common case; a reordered SELECT is still matched
    by name): class_row builds a keyword dict per row, and a worker builds a row object
    for every job it claims."""
    order = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    by_keyword = class_row(cls)

    def factory(cursor: Any) -> RowMaker[Row]:
        names = [column.name for column in cursor.description or ()]
        if names == order:
            return lambda values: cls(*values)
        return by_keyword(cursor)

    return factory


def _fetch(conn: Conn, query: Query, params: Params, row: type[Row]) -> list[Row]:
    with conn.cursor(row_factory=by_name(row)) as cur:
        rows = cur.execute(query.sql, params).fetchall()
    query.check_rows(len(rows))
    return rows


def _one(conn: Conn, name: str, params: Params, row: type[Row]) -> Row:
    return _fetch(conn, _query(name, Cardinality.ONE), params, row)[0]


def _maybe(conn: Conn, name: str, params: Params, row: type[Row]) -> Row | None:
    rows = _fetch(conn, _query(name, Cardinality.MAYBE), params, row)
    return rows[0] if rows else None


def _many(conn: Conn, name: str, params: Params, row: type[Row]) -> list[Row]:
    return _fetch(conn, _query(name, Cardinality.MANY), params, row)


def _send_many(cur: psycopg.Cursor[Any], name: str, params: Params, row: type[Any]) -> None:
    """Run a :many query whose rows are read later by _tuples: in a pipeline the call
    returns without waiting for them. `row` is the dataclass naming its columns."""
    cur.execute(_query(name, Cardinality.MANY).sql, params)


def _send_scalar(cur: psycopg.Cursor[Any], name: str, params: Params) -> None:
    """Run a :scalar query whose value is read later, in binary (an array of thousands of
    ids loads faster so): in a pipeline the call returns without waiting for it."""
    cur.execute(_query(name, Cardinality.SCALAR).sql, params, binary=True)


def _tuples(cur: psycopg.Cursor[Any], row: type[Any]) -> list[Any]:
    """The rows of _send_many as plain tuples in the order of `row`'s fields, which the
    columns must have: tens of thousands of dataclasses would cost more than the query."""
    rows = cur.fetchall()
    names = [column.name for column in cur.description or ()]
    expected = [field.name for field in fields(row)]
    if names != expected:
        raise CardinalityError(f"columns {names} do not match {row.__name__} {expected}")
    return rows


def _scalar(conn: Conn, name: str, params: Params = None) -> Any:
    query = _query(name, Cardinality.SCALAR)
    cur = conn.execute(query.sql, params)
    rows = cur.fetchall()
    query.check_rows(len(rows))
    if len(rows[0]) != 1:
        raise CardinalityError(f"query {name} (:scalar) returned {len(rows[0])} columns")
    return rows[0][0]


def _exec(conn: Conn, name: str, params: Params = None) -> int:
    """Run a query that returns no columns; its row count."""
    cur = conn.execute(_query(name, Cardinality.EXEC).sql, params)
    if cur.description:
        raise CardinalityError(f"query {name} (:exec) returned columns")
    return cur.rowcount


def _as_dict(row: Any) -> dict[str, Any]:
    return {f.name: getattr(row, f.name) for f in fields(row)}


# Each row type sits beside the function that reads it; its fields are the columns its
# query names, matched by name (tests/unit/test_queries.py checks them against the server).


def enqueue(conn: Conn, job: NewJobRow) -> Enqueued:
    """Add one job; a None queue or max_attempts takes the configured default."""
    _, params = _enqueue_query(job)
    if job.run_at is not None:
        return _one(conn, "enqueue_at", params, Enqueued)
    return _one(conn, "enqueue", params, Enqueued)


def _enqueue_query(job: NewJobRow) -> tuple[str, dict[str, Any]]:
    """The enqueue query for one job (enqueue_at with a run_at), and its parameters."""
    params: dict[str, Any] = dict(
        task=job.task, args=job.args_json, queue=job.queue, priority=job.priority,
        max_attempts=job.max_attempts, unique_key=job.unique_key, meta=job.meta_json or "{}",
        concurrency_key=job.concurrency_key,
    )
    if job.run_at is not None:
        params["run_at"] = job.run_at
        return "enqueue_at", params
    params["delay"] = job.delay
    return "enqueue", params


Inserted = enqueue_plan.Inserted
enqueue_many_params = bulk_arrays.enqueue_many_params


def send_enqueue_many(cur: psycopg.Cursor[Any], rows: Sequence[NewJobRow]) -> bool:
    """Send the INSERT of `rows` on `cur`; in a pipeline this returns at once. True when no
    row has a unique key: the result is then one array of ids, else rows read with
    enqueue_many_result (pgfleet/client/bulk.py reads both)."""
    bulk_arrays.register(cur.adapters)
    params = enqueue_many_params(rows)
    if params["unique_keys"] is None:
        _send_scalar(cur, "enqueue_many_ids", params)
        return True
    _send_many(cur, "enqueue_many", params, KeyedJob)
    return False


def enqueue_many_result(cur: psycopg.Cursor[Any]) -> list[Inserted]:
    return _tuples(cur, KeyedJob)


def jobs_holding_keys(conn: Conn, params: Params) -> list[KeyHolder]:
    """The unfinished jobs holding (task, unique key) pairs: what enqueue_many skipped."""
    return _many(conn, "existing_by_unique_key", params, KeyHolder)


# ---- the enqueues on an asyncio connection (pgfleet.enqueue_async): the same queries,
# parameters and bulk plan, awaited.


async def _fetch_async(conn: AsyncConn, name: str, params: Params, row: type[Row]) -> list[Row]:
    query = catalogue()[name]
    async with conn.cursor(row_factory=by_name(row)) as cur:
        await cur.execute(query.sql, params)
        rows = await cur.fetchall()
    query.check_rows(len(rows))
    return rows


async def enqueue_async(conn: AsyncConn, job: NewJobRow) -> Enqueued:
    """store.enqueue on an AsyncConnection."""
    name, params = _enqueue_query(job)
    return (await _fetch_async(conn, name, params, Enqueued))[0]


async def _insert_async(conn: AsyncConn, rows: Sequence[NewJobRow]) -> list[Inserted]:
    async with conn.cursor() as cur:
        bulk_arrays.register(cur.adapters)
        await cur.execute(_query("enqueue_many", Cardinality.MANY).sql,
                          enqueue_many_params(rows))
        found = await cur.fetchall()
        names = [column.name for column in cur.description or ()]
    if names != [field.name for field in fields(KeyedJob)]:
        raise CardinalityError(f"enqueue_many returned columns {names}")
    return found


async def enqueue_many_async(conn: AsyncConn, rows: Sequence[NewJobRow]) -> list[int]:
    """store.enqueue_many on an AsyncConnection: the same plan of statements."""
    plan = enqueue_plan.enqueue_many(rows)
    try:
        step = next(plan)
        while True:
            kind, value = step
            if kind == "insert":
                found: list[Any] = await _insert_async(conn, value)
            else:
                found = await _fetch_async(conn, "existing_by_unique_key", value, KeyHolder)
            step = plan.send(found)
    except StopIteration as done:
        return list(done.value)


def claim(conn: Conn, *, queue: str, limit: int, worker: str, lease: float,
          args_limit: int = payload.MAX_ARGS_BYTES, held: int | None = None,
          held_solo: bool | None = None, after: ClaimKey | None = None,
          max_bytes: int | None = None) -> list[ClaimedJob]:
    """Claim up to `limit` due jobs, in claim order past `after` (None: from the head),
    within the queue's flow control when it has published limits.
    `held` / `held_solo`: how many jobs the worker runs and whether one of them is solo;
    None counts the worker's running rows instead. `max_bytes`: stop once the args of
    the jobs taken reach it (the first is always taken; None: no bound)."""
    return in_claim_order(_many(conn, "claim",
                                {"queue": queue, "limit": limit, "worker": worker,
                                 "lease": lease, "args_limit": args_limit, "held": held,
                                 "held_solo": held_solo, "max_bytes": max_bytes,
                                 **_after(after)},
                                ClaimedJob))


def in_claim_order(jobs: list[ClaimedJob]) -> list[ClaimedJob]:
    """Claimed jobs sorted by their claim key. UPDATE ... RETURNING comes in the order of
    its join, which the planner picks: over a small table a hash join returns the rows in
    heap order, not in the order they were locked."""
    return sorted(jobs, key=lambda job: (job.priority, job.run_at, job.id))


def _after(key: ClaimKey | None) -> dict[str, Any]:
    priority, run_at, id = key if key is not None else (None, None, None)
    return {"after_priority": priority, "after_run_at": run_at, "after_id": id}


def complete_and_claim(
    conn: Conn, *, queue: str, done: Sequence[tuple[int, int]], limit: int, worker: str,
    lease: float, held: int, held_solo: bool, args_limit: int = payload.MAX_ARGS_BYTES,
    after: ClaimKey | None = None, results: Sequence[str | None] | None = None,
    max_bytes: int | None = None,
) -> tuple[set[int], list[ClaimedJob]]:
    """complete_succeeded of the (id, fence) pairs (with their results) and claim, in one
    statement; returns the ids this worker still held and the jobs claimed. `held` /
    `held_solo` describe the jobs the worker keeps running besides `done`; `max_bytes`
    bounds the claim's args as in claim."""
    rows = _many(conn, "complete_and_claim",
                 {"queue": queue, "limit": limit, "worker": worker, "lease": lease,
                  "args_limit": args_limit, "held": held, "held_solo": held_solo,
                  "max_bytes": max_bytes, **done_params(done, results), **_after(after)},
                 DoneOrClaimed)
    completed: set[int] = set()
    claimed = []
    for row in rows:
        if row.done is not None:
            completed.update(row.done)
        else:
            claimed.append(_claimed(row))
    return completed, in_claim_order(claimed)


def done_params(done: Sequence[tuple[int, int]], results: Sequence[str | None] | None
                ) -> dict[str, Any]:
    """The ids, fences and results parameters of a successful completion: fences and
    results as JSON objects keyed by id (see complete_succeeded in sql/queries.sql); a
    None result has no key. Result texts are JSON already (payload.value_json)."""
    fences = ",".join(f'"{job_id}":{fence}' for job_id, fence in done)
    stored = "" if results is None else ",".join(
        f'"{job_id}":{result}' for (job_id, _), result in zip(done, results, strict=True)
        if result is not None)
    return {"ids": int_array(job_id for job_id, _ in done), "fences": "{" + fences + "}",
            "results": "{" + stored + "}"}


def int_array(values: Iterable[int]) -> str:
    """An array literal of integers ('{1,2,3}'), cast by the query (%(ids)s::bigint[]):
    psycopg dumps a list element by element in Python, ~160 us for the 100 ids of a
    batch against ~10 us for this text."""
    return "{" + ",".join(map(str, values)) + "}"


def _claimed(row: DoneOrClaimed) -> ClaimedJob:
    assert row.id is not None and row.task is not None and row.attempt is not None
    assert row.max_attempts is not None and row.args_size is not None
    assert row.priority is not None and row.run_at is not None
    assert row.fence is not None
    return ClaimedJob(row.id, row.task, row.args, row.attempt, row.max_attempts,
                      row.args_size, row.wait_seconds or 0.0, bool(row.solo), row.priority,
                      row.run_at, row.meta, bool(row.more), row.fence)


def complete_succeeded(
    conn: Conn, *, worker: str, done: Sequence[tuple[int, int]],
    results: Sequence[str | None] | None = None,
) -> set[int]:
    """Mark (id, fence) pairs succeeded, storing each one's result (JSON text, None for
    none); returns the ids whose row this worker still held."""
    if not done:
        return set()
    rows = _many(conn, "complete_succeeded",
                 {"worker": worker, **done_params(done, results)}, JobId)
    return {row.id for row in rows}


def complete_cancelled(conn: Conn, *, worker: str, done: Sequence[tuple[int, int]]) -> set[int]:
    """End (id, fence) pairs cancelled; the ids this worker still held."""
    if not done:
        return set()
    params = {"worker": worker, "ids": [d[0] for d in done], "fences": [d[1] for d in done]}
    return {row.id for row in _many(conn, "complete_cancelled", params, JobId)}


def complete_snoozed(conn: Conn, *, worker: str, done: Sequence[tuple[int, int, float]],
                     max_snoozes: int) -> set[int]:
    """Put (id, fence, delay) back without spending the attempt; the ids still held
    that had snoozed fewer than max_snoozes times."""
    if not done:
        return set()
    params = {"worker": worker, "ids": [d[0] for d in done], "max_snoozes": max_snoozes,
              "fences": [d[1] for d in done], "delays": [d[2] for d in done]}
    return {row.id for row in _many(conn, "complete_snoozed", params, JobId)}


def write_progress(conn: Conn, *, worker: str,
                   reports: Sequence[tuple[int, int, str]]) -> None:
    """Store (id, fence, progress JSON) of jobs this worker runs."""
    if reports:
        _exec(conn, "write_progress", {
            "worker": worker, "ids": [r[0] for r in reports],
            "fences": [r[1] for r in reports], "progress": [r[2] for r in reports]})


def cancels_requested(conn: Conn, *, worker: str, ids: Sequence[int]) -> set[int]:
    """Which of `ids` (running under `worker`) someone asked to cancel."""
    if not ids:
        return set()
    params = {"worker": worker, "ids": list(ids)}
    return {row.id for row in _many(conn, "cancels_requested", params, JobId)}


def cancel_jobs(conn: Conn, *, ids: Sequence[int] | None = None, queue: str | None = None,
                task: str | None = None) -> dict[int, str]:
    """Cancel waiting jobs and ask the workers of running ones to stop them:
    {id: 'cancelled' or 'running'} of the jobs it reached."""
    params = {"ids": list(ids) if ids is not None else None, "queue": queue, "task": task}
    return {row.id: row.state for row in _many(conn, "cancel_jobs", params, CancelledJob)}


def job_outcome(conn: Conn, job_id: int, *, wait: bool = False) -> JobOutcome | None:
    """A job's state, result and last error; with `wait`, its end will NOTIFY."""
    return _maybe(conn, "job_outcome", {"id": job_id, "wait": wait}, JobOutcome)


def running_progress(conn: Conn, limit: int = 20) -> list[JobProgress]:
    return _many(conn, "running_progress", {"limit": limit}, JobProgress)


def complete_failed(
    conn: Conn, *, worker: str, failures: Sequence[Failure]
) -> dict[int, JobState]:
    """Record failures; returns {id: new state and run_at} for rows this worker still held."""
    if not failures:
        return {}
    rows = _many(
        conn, "complete_failed",
        {
            "worker": worker,
            "ids": [f.id for f in failures],
            "fences": [f.fence for f in failures],
            "errors": [f.error for f in failures],
            "delays": [f.delay for f in failures],
            "finals": [f.final for f in failures],
        },
        JobState)
    return {row.id: row for row in rows}


def withdraw(conn: Conn, *, worker: str, fences: Mapping[int, int]) -> list[int]:
    """Requeue jobs no thread started (and none will), uncharged: their attempt goes back.
    `fences`: {id: fence}."""
    if not fences:
        return []
    params = {"worker": worker, "ids": list(fences), "fences": list(fences.values())}
    return [row.id for row in _many(conn, "withdraw", params, JobId)]


def give_back(conn: Conn, *, worker: str, fences: Mapping[int, int] | None = None
              ) -> list[int]:
    """Requeue jobs whose threads are known stopped ({id: fence}; None: every job `worker`
    holds); the first MAX_REFUNDS give-backs of a job do not count as attempts, later ones
    do (so no job loops on give-backs)."""
    params = {"worker": worker, "ids": list(fences) if fences is not None else None,
              "fences": list(fences.values()) if fences is not None else None,
              "max_refunds": MAX_REFUNDS}
    rows = _many(conn, "give_back", params, JobId)
    return [row.id for row in rows]


def still_ours(conn: Conn, *, id: int, worker: str, fence: int) -> bool:
    """True while job `id` runs under `worker` with `fence`; the row stays locked (FOR
    SHARE) until `conn`'s transaction ends."""
    params = {"id": id, "worker": worker, "fence": fence}
    return _maybe(conn, "still_ours", params, JobId) is not None


def renew_leases(conn: Conn, *, worker: str, lease: float,
                 fences: Mapping[int, int]) -> dict[int, bool]:
    """Extend the leases of the jobs ({id: fence}) that `worker` still holds under those
    fences; returns {id: whether someone asked to cancel it} of those."""
    if not fences:
        return {}
    params = {"worker": worker, "lease": lease, "ids": list(fences),
              "fences": list(fences.values())}
    return {row.id: row.cancel_requested
            for row in _many(conn, "renew_leases", params, RenewedJob)}


def prune_finished(conn: Conn, *, retention: float, limit: int) -> int:
    return _exec(conn, "prune_finished", {"retention": retention, "limit": limit})


def notify_queue(conn: Conn, queue: str) -> None:
    """Wake the workers of `queue` (a hint: they poll anyway)."""
    _exec(conn, "notify_queue", {"queue": queue})


def retry_job(conn: Conn, job_id: int) -> str | None:
    """Requeue a dead or cancelled job; returns its queue, or None if it was not retryable."""
    row = _maybe(conn, "retry_job", {"id": job_id}, JobQueue)
    if row is None:
        return None
    notify_queue(conn, row.queue)
    return row.queue


def retry_jobs(conn: Conn, ids: Sequence[int]) -> list[int]:
    """Requeue those of `ids` that are dead or cancelled and whose unique key is free;
    the ids requeued. An enqueue that takes a key during the statement fails it: tried
    again, as retry_dead_of_queue does."""
    for attempt in range(RETRY_ROUNDS):
        try:
            with conn.transaction():
                rows = _many(conn, "retry_jobs", {"ids": list(ids)}, JobQueue)
            break
        except psycopg.errors.UniqueViolation:
            if attempt == RETRY_ROUNDS - 1:
                raise
    for queue in sorted({row.queue for row in rows}):
        notify_queue(conn, queue)
    return [row.id for row in rows]


def delete_jobs(conn: Conn, ids: Sequence[int]) -> list[int]:
    """Delete those of `ids` that are not running; the ids deleted."""
    return [row.id for row in _many(conn, "delete_jobs", {"ids": list(ids)}, JobId)]


def retry_dead_of_queue(conn: Conn, queue: str) -> list[int]:
    """Requeue the dead jobs of `queue` whose unique key is free; dead_keys_held names
    the others. An enqueue that takes a key during the statement fails it: try again."""
    for attempt in range(RETRY_ROUNDS):
        try:
            with conn.transaction():
                rows = _many(conn, "retry_dead_of_queue", {"queue": queue}, JobQueue)
            break
        except psycopg.errors.UniqueViolation:
            if attempt == RETRY_ROUNDS - 1:
                raise
    if rows:
        notify_queue(conn, queue)
    return [row.id for row in rows]


RETRY_ROUNDS = 3


def dead_keys_held(conn: Conn, queue: str) -> list[HeldKey]:
    return _many(conn, "dead_keys_held", {"queue": queue}, HeldKey)


def cancel_job(conn: Conn, job_id: int) -> bool:
    """Cancel a waiting job, or ask a running one's worker to stop it; False if the job
    is finished or unknown."""
    return job_id in cancel_jobs(conn, ids=[job_id])


def set_paused(conn: Conn, queue: str, paused: bool) -> None:
    _exec(conn, "set_paused", {"queue": queue, "paused": paused})
    if not paused:
        notify_queue(conn, queue)


def get_job(conn: Conn, job_id: int) -> dict[str, Any] | None:
    """One job; its args and errors decoded, or left as their JSON text when decoding
    them is refused (too deep, too large), so that any row can be shown."""
    row = _maybe(conn, "get_job", {"id": job_id}, JobRecord)
    if row is None:
        return None
    job = _as_dict(row)
    for key, limit in (("args", payload.MAX_ARGS_BYTES), ("errors", None),
                       ("meta", None), ("result", payload.MAX_RESULT_BYTES),
                       ("progress", None)):
        text = job[key]
        if text is None:
            continue
        size = len(text.encode("utf-8"))
        with contextlib.suppress(PayloadError):
            job[key] = payload.load_args(text, size, limit or size, field=key)
    return job


def list_jobs(
    conn: Conn, *, queue: str | None, state: str | None, limit: int,
    meta: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The newest jobs; `meta` keeps those whose meta holds each key with that value
    (compared as text)."""
    keys, values = list((meta or {}).keys()), list((meta or {}).values())
    rows = _many(conn, "list_jobs", {"queue": queue, "state": state, "limit": limit,
                                     "meta_keys": keys, "meta_values": values}, JobSummary)
    return [_as_dict(row) for row in rows]


