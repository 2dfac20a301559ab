"""What a running task may ask about the job it is running."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import psycopg

from pgfleet import store


@dataclass(frozen=True)
class JobContext:
    id: int
    queue: str
    task: str
    attempt: int
    max_attempts: int
    worker: str

    @property
    def token(self) -> tuple[str, int]:
        """The fencing token (holder, attempt): no two runs of a job share it, and the
        job's row carries it exactly while this run holds the job."""
        return (self.worker, self.attempt)

    def still_ours(self, conn: psycopg.Connection[Any]) -> bool:
        """One query: is the job still running under this token? The row stays locked
        until `conn`'s transaction ends, so an UPDATE in that same transaction is written
        only by the run that holds the job (docs/guarantees.md has an example). `conn`
        needs a role that may lock pgfleet.jobs rows (the worker's runtime role)."""
        return store.still_ours(conn, id=self.id, worker=self.worker, attempt=self.attempt)


_local = threading.local()


def current_job() -> JobContext | None:
    """The job this thread is running, or None outside a job."""
    job: JobContext | None = getattr(_local, "job", None)
    return job


def set_current(job: JobContext | None) -> None:
    _local.job = job
