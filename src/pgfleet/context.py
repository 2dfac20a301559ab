"""What a running task may ask about the job it is running."""

from __future__ import annotations

import numbers
import threading
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgfleet.core import payload
from pgfleet.errors import PayloadError
from pgfleet.sql import store


class JobControl:
    """What passes between a running task and its worker's main thread. Plain attributes,
    each written by one side only (no lock: a task reporting progress must never wait
    for the main thread)."""

    def __init__(self) -> None:
        self.cancelled = False  # set by the main thread when someone cancels the job
        self.progress: str | None = None  # JSON text; replaced whole by the task's thread
        self.reported = 0  # progress reports so far (the task's thread)
        self.written = 0  # reports the main thread has written (the main thread)


@dataclass(frozen=True)
class JobContext:
    id: int
    queue: str
    task: str
    attempt: int
    max_attempts: int
    worker: str
    # This run's fence, drawn at random by its claim (token).
    fence: int = 0
    control: JobControl = field(default_factory=JobControl, compare=False, repr=False)

    @property
    def cancelled(self) -> bool:
        """True once someone cancelled this job (`pgfleet jobs cancel`): stop soon. The
        worker raises an interrupt in the task's thread CANCEL_GRACE seconds later (see
        docs/tasks.md) and records the job cancelled however it ends."""
        return self.control.cancelled

    def progress(self, value: float | dict[str, Any]) -> None:
        """Report progress: a number from 0 to 1, or a small JSON object (at most 4 KiB).
        Cheap: it only keeps the value; the worker writes the latest one to the job's row
        at most about once a second, and `pgfleet jobs show` and `status` show it."""
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            if not 0 <= float(value) <= 1:
                raise PayloadError("progress", f"a number must be between 0 and 1, got {value}")
            text = payload.value_json("progress", float(value), payload.MAX_PROGRESS_BYTES)
        elif isinstance(value, dict):
            text = payload.value_json("progress", value, payload.MAX_PROGRESS_BYTES)
        else:
            raise PayloadError("progress", "expected a number from 0 to 1 or a dict, got "
                                           f"{type(value).__name__}")
        self.control.progress = text
        self.control.reported += 1

    @property
    def token(self) -> int:
        """The fencing token: 62 random bits drawn by this run's claim. No other run of
        the job gets it, not even after a failover rewound the database, and the job's
        row carries it exactly while this run holds the job."""
        return self.fence

    def still_ours(self, conn: psycopg.Connection[Any]) -> bool:
        """One query: is the job still running under this token? The row stays locked
        until `conn`'s transaction ends, so an UPDATE in that same transaction is written
        only by the run that holds the job (docs/guarantees.md has an example). `conn`
        needs a role that may lock pgfleet.jobs rows (the worker's runtime role)."""
        return store.still_ours(conn, id=self.id, worker=self.worker, fence=self.fence)


_local = threading.local()


def current_job() -> JobContext | None:
    """The job this thread is running, or None outside a job."""
    job: JobContext | None = getattr(_local, "job", None)
    return job


def set_current(job: JobContext | None) -> None:
    _local.job = job
