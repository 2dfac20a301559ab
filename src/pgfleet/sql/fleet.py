"""The store's functions for rows about the fleet rather than its jobs: processes and
their heartbeats, queue counts for `pgfleet status`, cron fire times, the enqueue watermark
of the metrics, and what supervisors publish (task and queue defaults, flow limits, failed
queues). One function per named query, run by the runners of pgfleet/sql/store.py, like
the store itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pgfleet.core.flow import FlowLimits
from pgfleet.sql.rows import (
    ClaimCosts,
    FireTime,
    FlowUsage,
    HeartbeatAge,
    NewJobs,
    ProcessRow,
    PublishedSchedule,
    QueueAge,
    QueueCount,
    QueueName,
    QueueTally,
    ScheduleFire,
    ScheduleHolderRow,
    ScheduleJob,
    ScheduleLastRun,
    ScheduleRow,
    ScheduleRunJob,
    XminHolder,
)
from pgfleet.sql.store import Conn, _as_dict, _exec, _many, _maybe, _one, _scalar


def publish_limits(conn: Conn, *, published_by: str,
                   limits: Mapping[str, FlowLimits | None]) -> None:
    """Write each queue's flow control (None: none) to pgfleet.queue_limits."""
    names = sorted(limits)
    params = [found.params() if (found := limits[name]) else {} for name in names]
    _exec(conn, "publish_limits", {
        "published_by": published_by, "queues": names,
        **{key: [p.get(key) for p in params]
           for key in ("global_concurrency", "rate_limit", "rate_period", "key_concurrency")},
    })


def publish_fallback_limits(conn: Conn, *, queue: str, published_by: str,
                            limits: FlowLimits) -> None:
    """A worker's own flow control for `queue`, kept only while no supervisor published
    the queue's (the claim reads whichever row is there)."""
    _exec(conn, "publish_fallback_limits",
          {"queue": queue, "published_by": published_by, **limits.params()})


def queue_has_limits(conn: Conn, queue: str) -> bool:
    return bool(_scalar(conn, "queue_has_limits", {"queue": queue}))


def flow_usage(conn: Conn) -> list[FlowUsage]:
    return _many(conn, "flow_usage", None, FlowUsage)


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


# queue_counts and flow_usage count waiting and dead jobs up to COUNT_BOUND + 1, so that
# their cost does not grow with a backlog or the dead-letter history: a count above
# COUNT_BOUND means "more than COUNT_BOUND".
COUNT_BOUND = 10_000


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


def xmin_holders(conn: Conn) -> list[XminHolder]:
    """The oldest holder of each kind of the xmin horizon, oldest first (by xid age)."""
    return _many(conn, "xmin_holders", None, XminHolder)


def claim_costs(conn: Conn) -> ClaimCosts:
    return _one(conn, "claim_costs", None, ClaimCosts)


def epoch_check(conn: Conn, *, lease: float) -> datetime | None:
    """When the claims resume after the database changed under the fleet (a new WAL
    timeline or system identifier); None when they are not held."""
    value = _scalar(conn, "epoch_check", {"lease": lease})
    return value if isinstance(value, datetime) else None


def move_heads(conn: Conn) -> int:
    """Move the claims' heads past the jobs claimed since the last move; how many moved."""
    return int(_scalar(conn, "move_heads", {}) or 0)


def find_heads(conn: Conn) -> int:
    """Give a head to every queue and priority with waiting rows and none; how many."""
    return int(_scalar(conn, "find_heads", {}) or 0)


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


def publish_task_defaults(
        conn: Conn, rows: Sequence[tuple[str, str | None, int | None, str | None]]) -> int:
    """Write (task, queue, max_attempts, backoff JSON) rows to pgfleet.task_defaults;
    returns the rows changed."""
    return _exec(conn, "publish_task_defaults", {
        "tasks": [r[0] for r in rows], "queues": [r[1] for r in rows],
        "max_attempts": [r[2] for r in rows], "backoffs": [r[3] for r in rows]})


def report_failed_queues(conn: Conn, *, id: str, failed: Mapping[str, str]) -> None:
    """Record on supervisor `id`'s row the queues it gave up on (queue → reason)."""
    _exec(conn, "report_failed_queues", {"id": id, "failed": json.dumps(dict(failed))})


def publish_queue_defaults(conn: Conn, rows: Mapping[str, int]) -> int:
    """Write queue → max_attempts to pgfleet.queue_defaults; rows changed."""
    return _exec(conn, "publish_queue_defaults", {
        "queues": list(rows), "max_attempts": list(rows.values())})


def publish_schedules(conn: Conn, *, holder: str, host: str,
                      definitions: Mapping[str, Mapping[str, Any]]) -> list[PublishedSchedule]:
    """Publish this scheduler's config definitions; returns every schedule to fire."""
    return _many(conn, "publish_schedules",
                 {"holder": holder, "host": host, "definitions": json.dumps(definitions)},
                 PublishedSchedule)


def schedules_all(conn: Conn) -> list[ScheduleRow]:
    return _many(conn, "schedules_all", None, ScheduleRow)


def schedule_live_holders(conn: Conn) -> list[ScheduleHolderRow]:
    return _many(conn, "schedule_live_holders", None, ScheduleHolderRow)


def schedule_add(conn: Conn, *, name: str, cron: str, task: str, args: Mapping[str, Any],
                 timezone: str, queue: str, priority: int, max_delay: float) -> None:
    _exec(conn, "schedule_add", {"name": name, "cron": cron, "task": task,
                                 "args": json.dumps(args), "timezone": timezone,
                                 "queue": queue, "priority": priority,
                                 "max_delay": max_delay})


def schedule_pause(conn: Conn, name: str, paused: bool) -> None:
    _exec(conn, "schedule_pause", {"name": name, "paused": paused})


def schedule_remove(conn: Conn, name: str) -> None:
    _exec(conn, "schedule_remove", {"name": name})


def schedule_run_now(conn: Conn, name: str) -> int:
    return int(_scalar(conn, "schedule_run_now", {"name": name}))


def retire_schedule_holder(conn: Conn, holder: str) -> None:
    _exec(conn, "retire_schedule_holder", {"holder": holder})
