"""What a running task may ask about the job it is running."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class JobContext:
    id: int
    queue: str
    task: str
    attempt: int
    max_attempts: int
    worker: str


_local = threading.local()


def current_job() -> JobContext | None:
    """The job this thread is running, or None outside a job."""
    job: JobContext | None = getattr(_local, "job", None)
    return job


def set_current(job: JobContext | None) -> None:
    _local.job = job
