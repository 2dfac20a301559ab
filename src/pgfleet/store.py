"""One function per named SQL query in sql/queries.sql.

Every function takes the connection to run on, so the caller decides the transaction:
the application's own (transactional enqueue) or a worker's autocommit connection.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]

_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def queries() -> dict[str, str]:
    """Parse sql/queries.sql once per process into {name: statement}."""
    text = (resources.files("pgfleet") / "sql" / "queries.sql").read_text("utf-8")
    parts = _BLOCK.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def q(name: str) -> bytes:
    return queries()[name].encode()


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    task: str
    args: Any
    attempt: int
    max_attempts: int
    args_size: int
    wait_seconds: float


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
        row = conn.execute(q("enqueue_at"), params).fetchone()
    else:
        params["delay"] = delay
        row = conn.execute(q("enqueue"), params).fetchone()
    assert row is not None
    return int(row[0])


def enqueue_many(conn: Conn, rows: Sequence[tuple[Any, ...]]) -> list[int]:
    """Insert rows in one statement; returns ids in input order (existing ids for keys
    an unfinished job already holds).

    Each row is (task, args JSON, queue, priority, delay, run_at, max_attempts,
    unique_key), as client._row makes it."""
    if not rows:
        return []
    tasks, args, queues, priorities, delays, run_ats, max_attempts, unique_keys = (
        list(column) for column in zip(*rows, strict=True))
    params = {
        "queues": queues, "tasks": tasks, "args": args, "priorities": priorities,
        "run_ats": run_ats, "delays": delays, "max_attempts": max_attempts,
        "unique_keys": unique_keys,
    }
    inserted = conn.execute(q("enqueue_many"), params).fetchall()
    if not any(unique_keys):
        # RETURNING follows the insertion order, which follows ORDER BY ord.
        return [row[0] for row in inserted]
    # Unique keys are scoped per task: a job is known by (task, unique key).
    keyless = [row[0] for row in inserted if row[2] is None]
    by_key = {(row[1], row[2]): row[0] for row in inserted if row[2] is not None}
    missing = [(task, key) for task, key in zip(tasks, unique_keys, strict=True)
               if key and (task, key) not in by_key]
    if missing:
        found = conn.execute(q("existing_by_unique_key"), {
            "tasks": [task for task, _ in missing],
            "unique_keys": [key for _, key in missing]}).fetchall()
        by_key.update({(task, key): job_id for task, key, job_id in found})
    keyless_iter = iter(keyless)
    return [by_key[(task, key)] if key else next(keyless_iter)
            for task, key in zip(tasks, unique_keys, strict=True)]


def claim(conn: Conn, *, queue: str, limit: int, worker: str, lease: float) -> list[ClaimedJob]:
    rows = conn.execute(
        q("claim"), {"queue": queue, "limit": limit, "worker": worker, "lease": lease}
    ).fetchall()
    return [ClaimedJob(*row) for row in rows]


def complete_succeeded(
    conn: Conn, *, worker: str, done: Sequence[tuple[int, int]]
) -> set[int]:
    """Mark (id, attempt) pairs succeeded; returns the ids whose row this worker still held."""
    if not done:
        return set()
    rows = conn.execute(
        q("complete_succeeded"),
        {"worker": worker, "ids": [d[0] for d in done], "attempts": [d[1] for d in done]},
    ).fetchall()
    return {row[0] for row in rows}


@dataclass(frozen=True)
class Failure:
    id: int
    attempt: int
    error: str
    delay: float
    final: bool


def complete_failed(conn: Conn, *, worker: str, failures: Sequence[Failure]) -> dict[int, str]:
    """Record failures; returns {id: new state} for rows this worker still held."""
    if not failures:
        return {}
    rows = conn.execute(
        q("complete_failed"),
        {
            "worker": worker,
            "ids": [f.id for f in failures],
            "attempts": [f.attempt for f in failures],
            "errors": [f.error for f in failures],
            "delays": [f.delay for f in failures],
            "finals": [f.final for f in failures],
        },
    ).fetchall()
    return {row[0]: row[1] for row in rows}


def give_back(conn: Conn, *, worker: str, ids: Sequence[int] | None = None) -> list[int]:
    rows = conn.execute(
        q("give_back"), {"worker": worker, "ids": list(ids) if ids is not None else None}
    ).fetchall()
    return [row[0] for row in rows]


def renew_leases(conn: Conn, *, worker: str, lease: float, ids: Sequence[int]) -> set[int]:
    """Extend the leases of the jobs `ids` that `worker` still holds; returns those ids."""
    if not ids:
        return set()
    rows = conn.execute(
        q("renew_leases"), {"worker": worker, "lease": lease, "ids": list(ids)}).fetchall()
    return {row[0] for row in rows}


def rescue_holder(conn: Conn, *, worker: str, error: str) -> list[tuple[int, str, str, str]]:
    """Give back a dead worker's jobs: (id, queue, task, new state) of each."""
    rows = conn.execute(q("rescue_holder"), {"worker": worker, "error": error}).fetchall()
    return [(row[0], row[1], row[2], row[3]) for row in rows]


def rescue_expired(conn: Conn, *, limit: int) -> list[tuple[int, str, str]]:
    rows = conn.execute(q("rescue_expired"), {"limit": limit}).fetchall()
    return [(row[0], row[1], row[2]) for row in rows]


def prune_finished(conn: Conn, *, retention: float, limit: int) -> int:
    cur = conn.execute(q("prune_finished"), {"retention": retention, "limit": limit})
    return cur.rowcount


def retry_job(conn: Conn, job_id: int) -> str | None:
    """Requeue a dead or cancelled job; returns its queue, or None if it was not retryable."""
    row = conn.execute(q("retry_job"), {"id": job_id}).fetchone()
    if row is None:
        return None
    conn.execute(q("notify_queue"), {"queue": row[1]})
    return str(row[1])


def retry_dead_of_queue(conn: Conn, queue: str) -> list[int]:
    rows = conn.execute(q("retry_dead_of_queue"), {"queue": queue}).fetchall()
    if rows:
        conn.execute(q("notify_queue"), {"queue": queue})
    return [row[0] for row in rows]


def cancel_job(conn: Conn, job_id: int) -> bool:
    return conn.execute(q("cancel_job"), {"id": job_id}).fetchone() is not None


def set_paused(conn: Conn, queue: str, paused: bool) -> None:
    conn.execute(q("set_paused"), {"queue": queue, "paused": paused})
    if not paused:
        conn.execute(q("notify_queue"), {"queue": queue})


_JOB_FIELDS = (
    "id", "queue", "task", "args", "state", "priority", "run_at", "attempt", "max_attempts",
    "lease_holder", "lease_expires_at", "created_at", "started_at", "finished_at",
    "last_error", "errors", "unique_key",
)
_LIST_FIELDS = (
    "id", "queue", "task", "state", "priority", "run_at", "attempt", "max_attempts",
    "created_at", "finished_at", "last_error",
)


def get_job(conn: Conn, job_id: int) -> dict[str, Any] | None:
    row = conn.execute(q("get_job"), {"id": job_id}).fetchone()
    return dict(zip(_JOB_FIELDS, row, strict=True)) if row else None


def list_jobs(
    conn: Conn, *, queue: str | None, state: str | None, limit: int
) -> list[dict[str, Any]]:
    rows = conn.execute(
        q("list_jobs"), {"queue": queue, "state": state, "limit": limit}
    ).fetchall()
    return [dict(zip(_LIST_FIELDS, row, strict=True)) for row in rows]


def register_process(
    conn: Conn, *, id: str, host: str, pid: int, kind: str, queue: str | None,
    supervisor: str | None,
) -> None:
    conn.execute(
        q("register_process"),
        {"id": id, "host": host, "pid": pid, "kind": kind, "queue": queue,
         "supervisor": supervisor},
    )


def heartbeat_process(conn: Conn, id: str) -> None:
    conn.execute(q("heartbeat_process"), {"id": id})


def unregister_process(conn: Conn, id: str) -> None:
    conn.execute(q("unregister_process"), {"id": id})


def prune_processes(conn: Conn, stale_after: float) -> int:
    return conn.execute(q("prune_processes"), {"stale_after": stale_after}).rowcount


def queue_counts(conn: Conn) -> list[tuple[str, str, int]]:
    return [(r[0], r[1], int(r[2])) for r in conn.execute(q("queue_counts")).fetchall()]


def oldest_waiting(conn: Conn) -> dict[str, float]:
    return {r[0]: float(r[1]) for r in conn.execute(q("oldest_waiting")).fetchall()}


def paused_queues(conn: Conn) -> set[str]:
    return {r[0] for r in conn.execute(q("paused_queues")).fetchall()}


def finished_last_minute(conn: Conn) -> dict[str, int]:
    return {r[0]: int(r[1]) for r in conn.execute(q("finished_last_minute")).fetchall()}


def processes(conn: Conn) -> list[dict[str, Any]]:
    cur = conn.execute(q("processes"))
    names = [c.name for c in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def db_now(conn: Conn) -> datetime:
    row = conn.execute(q("db_now")).fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def schedule_last_runs(conn: Conn, names: Sequence[str]) -> dict[str, datetime | None]:
    """The latest recorded fire time per schedule, None for one that never fired."""
    rows = conn.execute(q("schedule_last_runs"), {"names": list(names)}).fetchall()
    return {row[0]: row[1] for row in rows}


def insert_schedule_run(conn: Conn, *, schedule: str, fire_time: datetime) -> bool:
    """Claim one fire time; False if any scheduler (on any host) already recorded it."""
    cur = conn.execute(q("schedule_run_insert"), {"schedule": schedule, "fire_time": fire_time})
    return cur.fetchone() is not None


def enqueue_schedule_run(
    conn: Conn, *, schedule: str, fire_time: datetime, task: str, args_json: str,
    queue: str, priority: int, max_attempts: int,
) -> int:
    """Enqueue the job of a fire time claimed in this transaction; returns its id."""
    row = conn.execute(
        q("schedule_run_enqueue"),
        {"schedule": schedule, "fire_time": fire_time, "task": task, "args": args_json,
         "queue": queue, "priority": priority, "max_attempts": max_attempts},
    ).fetchone()
    assert row is not None, "the schedule run row vanished inside its own transaction"
    return int(row[0])


@dataclass(frozen=True)
class ScheduleLastRun:
    fire_time: datetime | None
    job_id: int | None
    state: str | None


def schedule_last_run_jobs(conn: Conn, names: Sequence[str]) -> dict[str, ScheduleLastRun]:
    rows = conn.execute(q("schedule_last_run_jobs"), {"names": list(names)}).fetchall()
    return {row[0]: ScheduleLastRun(row[1], row[2], row[3]) for row in rows}


def max_job_id(conn: Conn) -> int:
    row = conn.execute(q("max_job_id")).fetchone()
    return int(row[0]) if row else 0


def jobs_created_since(conn: Conn, after: int) -> tuple[dict[str, int], int]:
    """({queue: jobs created with id > after}, the highest id seen)."""
    rows = conn.execute(q("jobs_created_since"), {"after": after}).fetchall()
    return {r[0]: int(r[1]) for r in rows}, max([after, *(int(r[2]) for r in rows)])
