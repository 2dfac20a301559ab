"""The log lines of a job's outcomes: one per failed attempt, dead job, timeout, lost
lease and unknown task, plain text for people and the same facts as JSON fields (`extra=`,
emitted by logs.JsonFormatter) for machines."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from pgfleet.sql import store

log = logging.getLogger("pgfleet.worker")

# An unknown task name is logged at most once per this many seconds per name and worker:
# loud enough to be seen, not one line per retry of every such job.
UNKNOWN_TASK_EVERY = 60.0


def first_line(error: str) -> str:
    text = error.strip()
    return text.splitlines()[0] if text else ""


def _fields(event: str, job: store.ClaimedJob, queue: str, **more: Any) -> dict[str, Any]:
    return {"event": event, "job_id": job.id, "task": job.task, "queue": queue,
            "attempt": job.attempt, "max_attempts": job.max_attempts, **more}


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def attempt_failed(job: store.ClaimedJob, queue: str, error: str, *, timed_out: bool,
                   after: store.JobState) -> None:
    """A failed or timed-out attempt: retried (WARNING, with when) or dead (ERROR)."""
    what = "timed out" if timed_out else "failed"
    line = first_line(error)
    head = (f"job {job.id} (task {job.task!r}, queue {queue!r}) attempt "
            f"{job.attempt}/{job.max_attempts} {what}: {line}")
    if after.state == "dead":
        log.error("%s; the job is dead", head, extra=_fields(
            "job_dead", job, queue, error=line, timed_out=timed_out, state="dead"))
        return
    wait = max(0.0, after.run_at.timestamp() - time.time())
    log.warning("%s; runs again at %s (in %.0fs)", head, _when(after.run_at), wait,
                extra=_fields("job_retry", job, queue, error=line, timed_out=timed_out,
                              state=after.state, run_at=_when(after.run_at)))


def lease_lost(job: store.ClaimedJob, queue: str) -> None:
    log.warning("job %d (task %r, queue %r) attempt %d/%d: lease lost (taken over, "
                "cancelled or deleted); its outcome was discarded", job.id, job.task, queue,
                job.attempt, job.max_attempts, extra=_fields("lease_lost", job, queue))


def interrupted(job: store.ClaimedJob, queue: str, *, timed_out: bool, timeout: float) -> None:
    """The worker raised an interrupt in the job's thread: its timeout passed (WARNING), or
    its row is no longer this worker's: rescued, cancelled or deleted (WARNING)."""
    if timed_out:
        log.warning("job %d (task %r, queue %r) attempt %d/%d passed its timeout of %.1fs; "
                    "interrupting it", job.id, job.task, queue, job.attempt, job.max_attempts,
                    timeout, extra=_fields("job_timeout", job, queue, timeout=timeout))
    else:
        log.warning("job %d (task %r, queue %r) is no longer held by this worker (cancelled, "
                    "deleted or taken over); interrupting it", job.id, job.task, queue,
                    extra=_fields("job_cancelled", job, queue))


class UnknownTasks:
    """Rate-limits the loud line about a task name no module of this worker registers."""

    def __init__(self) -> None:
        self.logged: dict[str, float] = {}

    def report(self, job: store.ClaimedJob, queue: str, known: list[str]) -> None:
        now = time.monotonic()
        last = self.logged.get(job.task)
        if last is not None and now - last < UNKNOWN_TASK_EVERY:
            return
        if len(self.logged) > 1000:  # names are data: keep the memory bounded
            self.logged.clear()
        self.logged[job.task] = now
        log.error("job %d (queue %r): unknown task %r: no task module of this worker registers "
                  "it (registered: %s); the job fails and is retried until max_attempts. "
                  "Deploy the module or fix the name (logged once a minute per name)",
                  job.id, queue, job.task, ", ".join(known) or "none",
                  extra=_fields("unknown_task", job, queue))
