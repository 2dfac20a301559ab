"""A middleware for the tests: it records every job run it wraps in the audit table
(on the audit connection of tests.support.jobtasks), with the outcome it saw."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pgfleet
from pgfleet.middleware import Enqueueing, JobRun
from tests.support.jobtasks import _audit_conn

ENQUEUES: list[Enqueueing] = []


@contextmanager
def record(event: JobRun | Enqueueing) -> Iterator[None]:
    if isinstance(event, Enqueueing):
        ENQUEUES.append(event)
        yield
        return
    inside = pgfleet.current_job()
    assert inside is not None and inside.id == event.job.id
    try:
        yield
    finally:
        _audit_conn().execute(
            "INSERT INTO audit (job_id, attempt, pid, event) VALUES (%s, %s, pg_backend_pid(),"
            " %s)", (event.job.id, event.job.attempt,
                     f"mw:{event.job.task}:{event.outcome}"))
