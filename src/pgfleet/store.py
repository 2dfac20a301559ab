"""One function per named SQL query in sql/queries.sql.

Every function takes the connection to run on, so the caller decides the transaction:
the application's own (transactional enqueue) or a worker's autocommit connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.rows import class_row

from pgfleet import payload
from pgfleet.errors import PayloadError, PgfleetError
from pgfleet.queries import Cardinality, CardinalityError, Query, catalogue
from pgfleet.rows import (
    ClaimedJob as ClaimedJob,
)
from pgfleet.rows import (
    DoneOrClaimed as DoneOrClaimed,
)
from pgfleet.rows import (
    Failure as Failure,
)
from pgfleet.rows import (
    FireTime as FireTime,
)
from pgfleet.rows import (
    HeartbeatAge as HeartbeatAge,
)
from pgfleet.rows import (
    HeldJob as HeldJob,
)
from pgfleet.rows import (
    HeldKey as HeldKey,
)
from pgfleet.rows import (
    JobId as JobId,
)
from pgfleet.rows import (
    JobQueue as JobQueue,
)
from pgfleet.rows import (
    JobRecord as JobRecord,
)
from pgfleet.rows import (
    JobState as JobState,
)
from pgfleet.rows import (
    JobSummary as JobSummary,
)
from pgfleet.rows import (
    KeyedJob as KeyedJob,
)
from pgfleet.rows import (
    KeyHolder as KeyHolder,
)
from pgfleet.rows import (
    NewJobs as NewJobs,
)
from pgfleet.rows import (
    ProcessRow as ProcessRow,
)
from pgfleet.rows import (
    QueueAge as QueueAge,
)
from pgfleet.rows import (
    QueueCount as QueueCount,
)
from pgfleet.rows import (
    QueueName as QueueName,
)
from pgfleet.rows import (
    QueueTally as QueueTally,
)
from pgfleet.rows import (
    RescuedJob as RescuedJob,
)
from pgfleet.rows import (
    ScheduleFire as ScheduleFire,
)
from pgfleet.rows import (
    ScheduleJob as ScheduleJob,
)
from pgfleet.rows import (
    ScheduleLastRun as ScheduleLastRun,
)
from pgfleet.rows import (
    ScheduleRunJob as ScheduleRunJob,
)

Conn = psycopg.Connection[Any]
Row = TypeVar("Row")
# A position in claim order: (priority, run_at, id).
ClaimKey = tuple[int, datetime, int]
Params = Mapping[str, Any] | None

# Give-backs of one job that do not count as attempts (migration 0008); later ones do, so
# a task that stops its own worker cannot loop at the same count for ever.
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


def _fetch(conn: Conn, query: Query, params: Params, row: type[Row]) -> list[Row]:
    with conn.cursor(row_factory=class_row(row)) as cur:
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


def enqueue(
    conn: Conn,
    *,
    task: str,
    args_json: str,
    queue: str,
    priority: int,
    delay: float,
    run_at: datetime | None,
    max_attempts: int,
    unique_key: str | None,
) -> int:
    params: dict[str, Any] = dict(
        task=task, args=args_json, queue=queue, priority=priority,
        max_attempts=max_attempts, unique_key=unique_key,
    )
    if run_at is not None:
        params["run_at"] = run_at
        return int(_scalar(conn, "enqueue_at", params))
    params["delay"] = delay
    return int(_scalar(conn, "enqueue", params))


def enqueue_many(conn: Conn, rows: Sequence[tuple[Any, ...]]) -> list[int]:
    """Insert rows in one statement; returns ids in input order (existing ids for keys
    an unfinished job already holds).

    Each row is (task, args JSON, queue, priority, delay, run_at, max_attempts,
    unique_key), as client._row makes it."""
    if not rows:
        return []
    inserted = _insert_many(conn, rows)
    tasks = [row[0] for row in rows]
    unique_keys = [row[7] for row in rows]
    if not any(unique_keys):
        # RETURNING follows the insertion order, which follows ORDER BY ord.
        return [job.id for job in inserted]
    # Unique keys are scoped per task: a job is known by (task, unique key).
    keyless = [job.id for job in inserted if job.unique_key is None]
    by_key = {(job.task, job.unique_key): job.id for job in inserted
              if job.unique_key is not None}
    for _ in range(KEY_ROUNDS):
        missing = [(task, key) for task, key in zip(tasks, unique_keys, strict=True)
                   if key and (task, key) not in by_key]
        if not missing:
            break
        found = _many(conn, "existing_by_unique_key", {
            "tasks": [task for task, _ in missing],
            "unique_keys": [key for _, key in missing]}, KeyHolder)
        by_key.update({(job.task, job.unique_key): job.id for job in found})
        # A key whose holder finished between the two statements is free again: insert
        # those rows once more (their first row of each key, as the first insert did).
        gone = {pair for pair in missing if pair not in by_key}
        again = [row for row in rows if (row[0], row[7]) in gone]
        by_key.update({(job.task, job.unique_key): job.id
                       for job in _insert_many(conn, again) if job.unique_key is not None})
    keyless_iter = iter(keyless)
    try:
        return [by_key[(task, key)] if key else next(keyless_iter)
                for task, key in zip(tasks, unique_keys, strict=True)]
    except KeyError as exc:
        raise PgfleetError(f"unique key {exc.args[0]!r} changed hands {KEY_ROUNDS} times "
                           "during one enqueue_many; try again") from None


# Rounds of look-up and re-insert for keys whose holder finished meanwhile; each round
# needs a holder to finish within a few milliseconds, so more than two is rare.
KEY_ROUNDS = 5


def _insert_many(conn: Conn, rows: Sequence[tuple[Any, ...]]) -> list[KeyedJob]:
    if not rows:
        return []
    tasks, args, queues, priorities, delays, run_ats, max_attempts, unique_keys = (
        list(column) for column in zip(*rows, strict=True))
    params = {
        "queues": queues, "tasks": tasks, "args": args, "priorities": priorities,
        "run_ats": run_ats, "delays": delays, "max_attempts": max_attempts,
        "unique_keys": unique_keys,
    }
    return _many(conn, "enqueue_many", params, KeyedJob)


def claim(conn: Conn, *, queue: str, limit: int, worker: str, lease: float,
          args_limit: int = payload.MAX_ARGS_BYTES, held: int | None = None,
          held_solo: bool | None = None, after: ClaimKey | None = None) -> list[ClaimedJob]:
    """Claim up to `limit` due jobs, in claim order past `after` (None: from the head).
    `held` / `held_solo`: how many jobs the worker runs and whether one of them is solo;
    None counts the worker's running rows instead."""
    return _many(conn, "claim",
                 {"queue": queue, "limit": limit, "worker": worker, "lease": lease,
                  "args_limit": args_limit, "held": held, "held_solo": held_solo,
                  **_after(after)},
                 ClaimedJob)


def _after(key: ClaimKey | None) -> dict[str, Any]:
    priority, run_at, id = key if key is not None else (None, None, None)
    return {"after_priority": priority, "after_run_at": run_at, "after_id": id}


def complete_and_claim(
    conn: Conn, *, queue: str, done: Sequence[tuple[int, int]], limit: int, worker: str,
    lease: float, held: int, held_solo: bool, args_limit: int = payload.MAX_ARGS_BYTES,
    after: ClaimKey | None = None,
) -> tuple[set[int], list[ClaimedJob]]:
    """complete_succeeded of the (id, attempt) pairs and claim, in one statement; returns
    the ids this worker still held and the jobs claimed. `held` / `held_solo` describe the
    jobs the worker keeps running besides `done`."""
    rows = _many(conn, "complete_and_claim",
                 {"queue": queue, "limit": limit, "worker": worker, "lease": lease,
                  "args_limit": args_limit, "held": held, "held_solo": held_solo,
                  "ids": [d[0] for d in done], "attempts": [d[1] for d in done],
                  **_after(after)},
                 DoneOrClaimed)
    completed = {row.id for row in rows if not row.claimed}
    claimed = [_claimed(row) for row in rows if row.claimed]
    return completed, claimed


def _claimed(row: DoneOrClaimed) -> ClaimedJob:
    assert row.task is not None and row.attempt is not None
    assert row.max_attempts is not None and row.args_size is not None
    assert row.priority is not None and row.run_at is not None
    return ClaimedJob(id=row.id, task=row.task, args=row.args, attempt=row.attempt,
                      max_attempts=row.max_attempts, args_size=row.args_size,
                      wait_seconds=row.wait_seconds or 0.0, solo=bool(row.solo),
                      priority=row.priority, run_at=row.run_at)


def complete_succeeded(
    conn: Conn, *, worker: str, done: Sequence[tuple[int, int]]
) -> set[int]:
    """Mark (id, attempt) pairs succeeded; returns the ids whose row this worker still held."""
    if not done:
        return set()
    rows = _many(
        conn, "complete_succeeded",
        {"worker": worker, "ids": [d[0] for d in done], "attempts": [d[1] for d in done]},
        JobId)
    return {row.id for row in rows}


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
            "attempts": [f.attempt for f in failures],
            "errors": [f.error for f in failures],
            "delays": [f.delay for f in failures],
            "finals": [f.final for f in failures],
        },
        JobState)
    return {row.id: row for row in rows}


def give_back(conn: Conn, *, worker: str, ids: Sequence[int] | None = None) -> list[int]:
    """Requeue jobs whose threads are known stopped; the first MAX_REFUNDS give-backs of a
    job do not count as attempts, later ones do (so no job loops on give-backs)."""
    params = {"worker": worker, "ids": list(ids) if ids is not None else None,
              "max_refunds": MAX_REFUNDS}
    rows = _many(conn, "give_back", params, JobId)
    return [row.id for row in rows]


def still_ours(conn: Conn, *, id: int, worker: str, attempt: int) -> bool:
    """True while job `id` runs under `worker` at `attempt`; the row stays locked (FOR
    SHARE) until `conn`'s transaction ends."""
    params = {"id": id, "worker": worker, "attempt": attempt}
    return _maybe(conn, "still_ours", params, JobId) is not None


def renew_leases(conn: Conn, *, worker: str, lease: float, ids: Sequence[int]) -> set[int]:
    """Extend the leases of the jobs `ids` that `worker` still holds; returns those ids."""
    if not ids:
        return set()
    params = {"worker": worker, "lease": lease, "ids": list(ids)}
    return {row.id for row in _many(conn, "renew_leases", params, JobId)}


def held_by(conn: Conn, *, worker: str) -> list[HeldJob]:
    return _many(conn, "held_by", {"worker": worker}, HeldJob)


def rescue_holder(conn: Conn, *, worker: str, error: str, delays: dict[int, float],
                  shared: bool) -> list[tuple[int, str, str, str]]:
    """Give back a dead worker's jobs (those of `delays`, due after their delay); charge
    an attempt only when not `shared`. (id, queue, task, new state) of each."""
    rows = _many(conn, "rescue_holder",
                 {"worker": worker, "error": error, "ids": list(delays),
                  "delays": list(delays.values()), "shared": shared}, RescuedJob)
    return [(row.id, row.queue, row.task, row.state) for row in rows]


def rescue_expired(conn: Conn, *, limit: int) -> list[tuple[int, str, str]]:
    """Give back jobs whose lease ran out: (id, queue, new state) of each."""
    rows = _many(conn, "rescue_expired", {"limit": limit}, RescuedJob)
    return [(row.id, row.queue, row.state) for row in rows]


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
    return _maybe(conn, "cancel_job", {"id": job_id}, JobId) is not None


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
    for key, limit in (("args", payload.MAX_ARGS_BYTES), ("errors", None)):
        text = job[key]
        size = len(text.encode("utf-8"))
        with contextlib.suppress(PayloadError):
            job[key] = payload.load_args(text, size, limit or size, field=key)
    return job


def list_jobs(
    conn: Conn, *, queue: str | None, state: str | None, limit: int
) -> list[dict[str, Any]]:
    rows = _many(conn, "list_jobs", {"queue": queue, "state": state, "limit": limit},
                 JobSummary)
    return [_as_dict(row) for row in rows]


def register_process(
    conn: Conn, *, id: str, host: str, pid: int, kind: str, queue: str | None,
    supervisor: str | None,
) -> None:
    _exec(conn, "register_process",
          {"id": id, "host": host, "pid": pid, "kind": kind, "queue": queue,
           "supervisor": supervisor})


def heartbeat_process(conn: Conn, id: str) -> None:
    _exec(conn, "heartbeat_process", {"id": id})


def unregister_process(conn: Conn, id: str) -> None:
    _exec(conn, "unregister_process", {"id": id})


def prune_processes(conn: Conn, stale_after: float) -> int:
    return _exec(conn, "prune_processes", {"stale_after": stale_after})


def queue_counts(conn: Conn) -> list[tuple[str, str, int]]:
    return [(r.queue, r.state, int(r.count))
            for r in _many(conn, "queue_counts", None, QueueCount)]


def oldest_waiting(conn: Conn) -> dict[str, float]:
    return {r.queue: float(r.seconds) for r in _many(conn, "oldest_waiting", None, QueueAge)}


def paused_queues(conn: Conn) -> set[str]:
    return {r.name for r in _many(conn, "paused_queues", None, QueueName)}


def finished_last_minute(conn: Conn) -> dict[str, int]:
    return {r.queue: int(r.count)
            for r in _many(conn, "finished_last_minute", None, QueueTally)}


def processes(conn: Conn) -> list[dict[str, Any]]:
    return [_as_dict(row) for row in _many(conn, "processes", None, ProcessRow)]


def heartbeat_ages(conn: Conn) -> list[HeartbeatAge]:
    return _many(conn, "heartbeat_ages", None, HeartbeatAge)


def db_now(conn: Conn) -> datetime:
    now: datetime = _scalar(conn, "db_now")
    return now


def schedule_last_runs(conn: Conn, names: Sequence[str]) -> dict[str, datetime | None]:
    """The latest recorded fire time per schedule, None for one that never fired."""
    rows = _many(conn, "schedule_last_runs", {"names": list(names)}, ScheduleFire)
    return {row.name: row.fire_time for row in rows}


def insert_schedule_run(conn: Conn, *, schedule: str, fire_time: datetime) -> bool:
    """Claim one fire time; False if any scheduler (on any host) already recorded it."""
    row = _maybe(conn, "schedule_run_insert", {"schedule": schedule, "fire_time": fire_time},
                 FireTime)
    return row is not None


def enqueue_schedule_run(
    conn: Conn, *, schedule: str, fire_time: datetime, task: str, args_json: str,
    queue: str, priority: int, max_attempts: int,
) -> int:
    """Enqueue the job of a fire time claimed in this transaction; returns its id."""
    # :one, so a run row that vanished inside its own transaction is an error, not None.
    row = _one(conn, "schedule_run_enqueue",
               {"schedule": schedule, "fire_time": fire_time, "task": task, "args": args_json,
                "queue": queue, "priority": priority, "max_attempts": max_attempts},
               ScheduleJob)
    return row.job_id


def schedule_last_run_jobs(conn: Conn, names: Sequence[str]) -> dict[str, ScheduleLastRun]:
    rows = _many(conn, "schedule_last_run_jobs", {"names": list(names)}, ScheduleRunJob)
    return {row.name: ScheduleLastRun(fire_time=row.fire_time, job_id=row.job_id,
                                      state=row.state) for row in rows}


def max_job_id(conn: Conn) -> int:
    return int(_scalar(conn, "max_job_id"))


def jobs_created_since(conn: Conn, after: int) -> tuple[dict[str, int], int]:
    """({queue: jobs created with id > after}, the highest id seen)."""
    rows = _many(conn, "jobs_created_since", {"after": after}, NewJobs)
    return {r.queue: int(r.count) for r in rows}, max([after, *(int(r.max_id) for r in rows)])


def queue_known(conn: Conn, queue: str) -> bool:
    return bool(_scalar(conn, "queue_known", {"queue": queue}))
