"""Helpers for an application's own tests.

- `run_jobs(conn)` runs the due jobs now, in the calling thread and on the caller's
  connection, through the statements a worker uses (claim, fenced completion, retries with
  backoff, dead after max_attempts, unknown tasks retried) and returns what happened.
- `eager()` makes enqueue calls run their task at once in-process, with no database at
  all: for unit tests of code that enqueues.
- The pytest plugin (pgfleet.pytest_plugin, loaded through the `pytest11` entry point)
  gives a migrated, empty database per test.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from pgfleet.client import producer
from pgfleet.core import payload
from pgfleet.core.backoff import Backoff
from pgfleet.errors import PgfleetError
from pgfleet.sql import fleet as fleet_store, store
from pgfleet.sql.rows import ClaimedJob, NewJobRow
from pgfleet.tasks import Registry, load_registry
from pgfleet.worker.completer import complete, ended
from pgfleet.worker.executor import Executor, Outcome

# The queue defaults of the configuration models, without importing pydantic here.
DEFAULT_TIMEOUT = 3600.0
DEFAULT_BACKOFF = Backoff()
LEASE = 3600.0


@dataclass(frozen=True)
class JobOutcome:
    """One attempt run by run_jobs. `state` is the job's state after it: succeeded,
    queued (to be retried, at `run_at` of its row, or snoozed), dead or cancelled."""

    id: int
    queue: str
    task: str
    attempt: int
    state: str
    error: str | None


def run_jobs(
    conn: psycopg.Connection[Any],
    queue: str | None = None,
    *,
    tasks: Registry | Iterable[str] | None = None,
    backoff: Backoff | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    limit: int = 1000,
) -> list[JobOutcome]:
    """Run the jobs due now on `queue` (every queue when None), one at a time, until none
    is due; return their outcomes in the order they ran.

    `tasks` is the registry to run from (modules to import, or a Registry); by default
    every task registered in this process. A retry due at once (backoff 0) runs again in
    the same call; a later one is left queued. At most `limit` attempts run: a task that
    enqueues itself cannot loop for ever. The statements run on `conn`: in autocommit mode
    each is committed; inside a transaction, the caller decides (a rollback undoes them).
    """
    registry = tasks if isinstance(tasks, Registry) else load_registry(tasks or [])
    worker = f"pgfleet.testing:{os.getpid()}:{random.getrandbits(32):08x}"
    executors: dict[str, Executor] = {}
    outcomes: list[JobOutcome] = []
    try:
        while len(outcomes) < limit:
            claimed = _claim_one(conn, queue, worker)
            if claimed is None:
                break
            queue_name, job = claimed
            executor = executors.get(queue_name)
            if executor is None:
                executor = executors[queue_name] = Executor(
                    queue=queue_name, worker_id=worker, args_limit=payload.MAX_ARGS_BYTES,
                    wake=lambda: None)
            ran = executor.run_inline(job, registry, timeout)
            outcomes.append(_complete(conn, worker, queue_name, ran,
                                      backoff or DEFAULT_BACKOFF))
    finally:
        for executor in executors.values():
            executor.loops.close()
    return outcomes


def _claim_one(conn: psycopg.Connection[Any], queue: str | None,
               worker: str) -> tuple[str, ClaimedJob] | None:
    names = [queue] if queue is not None else sorted(
        {name for name, state, _ in fleet_store.queue_counts(conn) if state == "queued"})
    for name in names:
        jobs = store.claim(conn, queue=name, limit=1, worker=worker, lease=LEASE)
        if jobs:
            return name, jobs[0]
    return None


def _complete(conn: psycopg.Connection[Any], worker: str, queue: str, outcome: Outcome,
              default_backoff: Backoff) -> JobOutcome:
    """Record the outcome as a worker does (results, snoozes, Retry delays, cancels)."""
    job = outcome.running.job
    held, states = complete(conn, worker, [outcome], default_backoff)
    kind = ended(outcome)
    if kind == "failed":
        state = states[job.id].state if job.id in states else "lost"
    else:
        state = {"snoozed": "queued"}.get(kind, kind) if job.id in held else "lost"
    return JobOutcome(id=job.id, queue=queue, task=job.task, attempt=job.attempt,
                      state=state, error=outcome.error)


# ---- eager mode -------------------------------------------------------------------------


@dataclass
class EagerRuns:
    """What ran while eager mode was on: one JobOutcome per job (state succeeded or
    failed; ids are counted from 1 and exist in no database)."""

    outcomes: list[JobOutcome] = field(default_factory=list)
    raise_errors: bool = True
    registry: Registry | None = None

    def run(self, rows: Sequence[NewJobRow]) -> list[int]:
        ids = []
        for spec in rows:
            job_id = len(self.outcomes) + 1
            queue = spec.queue or "default"
            job = ClaimedJob(id=job_id, task=spec.task, args=spec.args_json, attempt=1,
                             max_attempts=spec.max_attempts or 1,
                             args_size=len(spec.args_json.encode()), wait_seconds=0.0,
                             solo=False, priority=0, run_at=datetime.now(UTC),
                             meta=spec.meta_json)
            ran = _run_eagerly(job, queue, self.registry or load_registry([]))
            self.outcomes.append(JobOutcome(
                id=job_id, queue=queue, task=spec.task, attempt=1,
                state="succeeded" if ran.error is None else "failed", error=ran.error))
            if ran.error is not None and self.raise_errors:
                raise EagerJobFailed(spec.task, ran.error)
            ids.append(job_id)
        return ids

    def tasks(self) -> list[str]:
        """The names of the tasks run, in order."""
        return [outcome.task for outcome in self.outcomes]


def _run_eagerly(job: ClaimedJob, queue: str, registry: Registry) -> Outcome:
    """Run a job in this thread; from inside a running event loop (enqueue_async), in a
    helper thread that the caller waits for, since a loop cannot run inside another."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(job, queue, registry)
    with ThreadPoolExecutor(1, thread_name_prefix="pgfleet-eager") as helper:
        return helper.submit(_run_here, job, queue, registry).result()


def _run_here(job: ClaimedJob, queue: str, registry: Registry) -> Outcome:
    executor = Executor(queue=queue, worker_id="pgfleet.testing.eager",
                        args_limit=payload.MAX_ARGS_BYTES, wake=lambda: None)
    try:
        return executor.run_inline(job, registry, DEFAULT_TIMEOUT)
    finally:
        executor.loops.close()


class EagerJobFailed(PgfleetError):
    """A task run by eager mode failed; the message carries the task's error."""

    def __init__(self, task: str, error: str) -> None:
        super().__init__(f"eager job {task!r} failed: {error}")
        self.task = task
        self.error = error


@contextmanager
def eager(*, raise_errors: bool = True, tasks: Registry | Iterable[str] | None = None
          ) -> Iterator[EagerRuns]:
    """While the block runs, `pgfleet.enqueue`, `enqueue_many`, `enqueue_async` and
    `enqueue_many_async` of this process run each task at once, in the calling thread,
    instead of writing a row: the connection argument is not used (pass None). Delays,
    run_at, unique keys and queues are ignored; every job runs once. A failure raises
    EagerJobFailed from the enqueue call unless `raise_errors` is False."""
    registry = tasks if isinstance(tasks, Registry) or tasks is None else load_registry(tasks)
    runs = EagerRuns(raise_errors=raise_errors, registry=registry)
    with producer.diverted(runs.run):
        yield runs
