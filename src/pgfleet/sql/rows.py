"""The row types of sql/queries.sql: one frozen dataclass per shape of result, filled by
column name (psycopg's class_row), so a reordered SELECT cannot swap two fields.
tests/unit/test_queries.py checks each against the columns the server reports."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple


class NewJobRow(NamedTuple):
    """A job to insert, validated (pgfleet.core.payload), from the enqueue call to the row:
    the one shape every enqueue path hands on (one, many, async, SQL text, eager mode). A
    tuple, so a bulk enqueue transposes tens of thousands of them with one zip(). A None
    queue or max_attempts is filled in by the database: the task's published default, then
    the queue's, then 'default' and 20."""
    task: str
    args_json: str
    queue: str | None
    priority: int
    delay: float
    run_at: datetime | None
    max_attempts: int | None
    unique_key: str | None
    meta_json: str | None
    concurrency_key: str | None


@dataclass(frozen=True)
class Enqueued:
    """What one enqueue did: the job's id, and whether this call created it (False: an
    unfinished job of the same task already held the unique key)."""
    job_id: int
    created: bool



@dataclass(frozen=True)
class KeyedJob:
    id: int
    task: str
    unique_key: str | None



@dataclass(frozen=True)
class KeyHolder:
    task: str
    unique_key: str
    id: int



# ClaimedJob and DoneOrClaimed, built for every job a worker claims, are slotted and not
# frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, ~3 us
# a row against ~0.4 us (nothing assigns to a claimed job; they are not hashed either).
@dataclass(slots=True)
class ClaimedJob:
    id: int
    task: str
    args: str | None  # JSON text, None when over the limit (never loaded); see args_size
    attempt: int
    max_attempts: int
    args_size: int
    wait_seconds: float
    solo: bool  # runs alone: it was among several running when their process crashed
    priority: int
    run_at: datetime
    meta: str | None = None  # JSON text of the job's meta; None when it is empty
    more: bool = False  # the claim's byte budget (max_bytes) left due jobs behind
    fence: int = 0  # this claim's fence: every write of the running job names it


@dataclass(slots=True)
class DoneOrClaimed:
    """A row of complete_and_claim: the ids completed (`done`, the rest NULL) or a claimed
    job (`done` None)."""

    done: list[int] | None
    id: int | None
    task: str | None
    args: str | None
    attempt: int | None
    max_attempts: int | None
    args_size: int | None
    wait_seconds: float | None
    solo: bool | None
    priority: int | None
    run_at: datetime | None
    meta: str | None
    more: bool | None
    fence: int | None



@dataclass(frozen=True)
class JobId:
    id: int



@dataclass(frozen=True)
class Failure:
    id: int
    fence: int
    error: str
    delay: float
    final: bool



@dataclass(frozen=True)
class JobState:
    id: int
    state: str
    run_at: datetime  # when a retried job runs next



@dataclass(frozen=True)
class RescuedJob:
    id: int
    queue: str
    task: str
    state: str


@dataclass(frozen=True)
class HolderRescue:
    """A dead worker's job given back, and whether its task was running (charged)."""

    id: int
    queue: str
    task: str
    state: str
    ran: bool



@dataclass(frozen=True)
class Lease:
    """A running job's lease as a rescuer sees it; equal while nobody renews it."""

    id: int
    holder: str
    fence: int | None  # None: claimed by a release before fences
    beats: int


@dataclass(frozen=True)
class HeldJob:
    id: int
    queue: str
    attempt: int
    task_backoff: dict[str, Any] | None



@dataclass(frozen=True)
class JobQueue:
    id: int
    queue: str



@dataclass(frozen=True)
class HeldKey:
    id: int
    task: str
    unique_key: str
    holder: int



@dataclass(frozen=True)
class JobRecord:
    id: int
    queue: str
    task: str
    args: Any
    state: str
    priority: int
    run_at: datetime
    attempt: int
    max_attempts: int
    lease_holder: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    last_error: str | None
    errors: Any
    unique_key: str | None
    meta: Any
    result: Any
    progress: Any
    snoozes: int
    cancel_requested_at: datetime | None
    refunds: int
    crashes: int



@dataclass(frozen=True)
class JobSummary:
    id: int
    queue: str
    task: str
    state: str
    priority: int
    run_at: datetime
    attempt: int
    max_attempts: int
    created_at: datetime
    finished_at: datetime | None
    last_error: str | None



@dataclass(frozen=True)
class QueueCount:
    queue: str
    state: str
    count: int



@dataclass(frozen=True)
class QueueAge:
    queue: str
    seconds: float



@dataclass(frozen=True)
class QueueName:
    name: str



@dataclass(frozen=True)
class QueueTally:
    queue: str
    count: int



@dataclass(frozen=True)
class ProcessRow:
    id: str
    host: str
    pid: int
    kind: str
    queue: str | None
    supervisor: str | None
    # A supervisor's queues it gave up on, queue → reason.
    failed_queues: dict[str, str]
    heartbeat_age: float



@dataclass(frozen=True)
class HeartbeatAge:
    host: str
    kind: str
    seconds: float



@dataclass(frozen=True)
class XminHolder:
    """The oldest holder of one kind (backend, prepared, slot, standby) of the xmin
    horizon: its pid (None for a prepared transaction or an idle slot), name
    (application_name, gid or slot name), state, transaction age in seconds (None where
    no time exists or the row is not visible), the longest such age of its kind, the age
    of the xmin in transaction ids, and the start of its query when visible."""
    holder: str
    pid: int | None
    name: str | None
    state: str | None
    seconds: float | None
    oldest_seconds: float | None
    xids: int
    query: str | None


@dataclass(frozen=True)
class ClaimCosts:
    dead_tuples: int
    claim_index_bytes: int



@dataclass(frozen=True)
class ScheduleFire:
    name: str
    fire_time: datetime | None



@dataclass(frozen=True)
class FireTime:
    fire_time: datetime



@dataclass(frozen=True)
class ScheduleJob:
    job_id: int



@dataclass(frozen=True)
class ScheduleLastRun:
    fire_time: datetime | None
    job_id: int | None
    state: str | None



@dataclass(frozen=True)
class PublishedSchedule:
    """A schedule every scheduler fires: a config one as published, or a runtime one."""

    name: str
    source: str
    definition: dict[str, Any]
    paused: bool


@dataclass(frozen=True)
class ScheduleRow:
    """`pgfleet cron list`: one row of pgfleet.schedules."""

    name: str
    source: str
    definition: dict[str, Any]
    paused: bool
    published_at: datetime


@dataclass(frozen=True)
class ScheduleHolderRow:
    """A live scheduler's own definition of a config schedule."""

    name: str
    host: str
    holder: str
    definition: dict[str, Any]
    first_published_at: datetime


@dataclass(frozen=True)
class ScheduleRunJob:
    name: str
    fire_time: datetime | None
    job_id: int | None
    state: str | None



@dataclass(frozen=True)
class NewJobs:
    queue: str
    count: int
    max_id: int



# Task control: cancellation and progress.


@dataclass(frozen=True)
class RenewedJob:
    id: int
    cancel_requested: bool  # someone asked to cancel it: its worker interrupts it



@dataclass(frozen=True)
class CancelledJob:
    id: int
    state: str  # 'cancelled' (it was waiting) or 'running' (its worker interrupts it)



@dataclass(frozen=True)
class JobOutcome:
    state: str
    result: str | None  # JSON text
    last_error: str | None



@dataclass(frozen=True)
class JobProgress:
    id: int
    queue: str
    task: str
    progress: str  # JSON text


@dataclass(frozen=True)
class FlowUsage:
    """A queue's published limits, their current use and the due jobs each holds back."""
    queue: str
    global_concurrency: int | None
    rate_limit: int | None
    rate_period: float | None
    key_concurrency: int | None
    running: int
    starts: int
    due: int
    keys_at_limit: int
    held_by_global: int
    held_by_rate: int
    held_by_key: int
