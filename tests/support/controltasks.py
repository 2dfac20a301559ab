"""Tasks for the task-control tests (tests/integration/test_task_control.py): results,
cancellation, snoozes, retry rules and progress. Each records what it saw in the audit
table (tests.support.jobtasks.audit), so a test can tell what ran inside the worker."""

from __future__ import annotations

import time
from typing import Any

import pgfleet
from tests.support.jobtasks import _audit_conn, audit

# A bound on the waits inside tasks: a task the test forgot must not run for ever.
TASK_BOUND = 120.0


def _job() -> pgfleet.JobContext:
    job = pgfleet.current_job()
    assert job is not None
    return job


@pgfleet.task(name="ctl.add")
def add(a: int, b: int) -> dict[str, Any]:
    audit("finished")
    return {"sum": a + b, "inputs": [a, b]}


@pgfleet.task(name="ctl.unserialisable")
def unserialisable() -> object:
    audit("finished")
    return {"when": object()}


@pgfleet.task(name="ctl.until_cancelled")
def until_cancelled() -> str:
    """Reports progress, then waits for a cancel and stops cleanly when it sees one."""
    job = _job()
    job.progress(0.5)
    job.progress({"step": "waiting", "done": 1, "of": 2})
    job.progress(0.5)
    audit("started")
    end = time.monotonic() + TASK_BOUND
    while time.monotonic() < end:
        if job.cancelled:
            audit("saw_cancel")
            return "stopped cleanly"
        time.sleep(0.01)
    audit("never_cancelled")
    return "never cancelled"


@pgfleet.task(name="ctl.quick_progress")
def quick_progress(steps: int) -> int:
    """Reports every step within far less than a second, then returns: only the last
    report can be in the row, and it must be."""
    job = _job()
    for step in range(1, steps + 1):
        job.progress({"done": step, "of": steps})
    audit("finished")
    return steps


@pgfleet.task(name="ctl.ignores_cancel")
def ignores_cancel() -> None:
    """Never looks at current_job().cancelled: the worker has to interrupt it."""
    audit("started")
    try:
        end = time.monotonic() + TASK_BOUND
        while time.monotonic() < end:
            time.sleep(0.01)
        audit("never_interrupted")
    finally:
        audit("cleanup")


@pgfleet.task(name="ctl.snooze_once")
def snooze_once() -> str:
    job = _job()
    if job.attempt == 1 and not _snoozed_before(job.id):
        audit("snoozed")
        raise pgfleet.Snooze(0.05)
    audit("finished")
    return "after the snooze"


def _snoozed_before(job_id: int) -> bool:
    row = _audit_conn().execute(
        "SELECT count(*) FROM audit WHERE job_id = %s AND event = 'snoozed'",
        (job_id,)).fetchone()
    return bool(row and row[0])


@pgfleet.task(name="ctl.snooze_always")
def snooze_always() -> None:
    audit("snoozed")
    raise pgfleet.Snooze(0)


@pgfleet.task(name="ctl.retry_later", backoff={"initial": 0.01, "max": 0.01, "jitter": 0.0})
def retry_later(delay: float) -> None:
    audit("started")
    raise pgfleet.Retry("the upstream asked us to come back later", delay=delay)


@pgfleet.task(name="ctl.retry_on_tuple", retry_on=(ConnectionError, TimeoutError),
              backoff={"initial": 0.01, "max": 0.01, "jitter": 0.0})
def retry_on_tuple(kind: str) -> None:
    audit("started")
    if kind == "connection":
        raise ConnectionError("connection reset by peer")
    raise ValueError("a bug, not a network blip")


def _transient(exc: BaseException) -> bool:
    return "transient" in str(exc)


@pgfleet.task(name="ctl.retry_on_callable", retry_on=_transient,
              backoff={"initial": 0.01, "max": 0.01, "jitter": 0.0})
def retry_on_callable(message: str) -> None:
    audit("started")
    raise RuntimeError(message)


@pgfleet.task(name="ctl.slow_listed", retry_on=(ConnectionError,), timeout=0.3,
              backoff={"initial": 0.01, "max": 0.01, "jitter": 0.0})
def slow_listed() -> None:
    """Runs past its timeout (in Python, so the interrupt lands): a timeout is retried
    whatever retry_on lists."""
    audit("started")
    end = time.monotonic() + TASK_BOUND
    while time.monotonic() < end:
        time.sleep(0.01)
