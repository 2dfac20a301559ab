"""Enqueue defaults published to the database, so an enqueue by name from any language or
path (Python, SQL, the CLI, bulk) gets the configured queue and attempts.

What is published: each configured queue's `max_attempts` (pgfleet.queue_defaults) and the
`queue`, `max_attempts` and `backoff` each registered @task declares (pgfleet.task_defaults,
NULL for what it leaves out; the backoff prices crashed attempts, see
pgfleet/maintenance/process.py). pgfleet.enqueue_job and pgfleet.enqueue_jobs apply them
in this order: the call, the task, its queue, then built-in ('default', 20).

Who publishes: the arbiter runs no task code, so the first worker each queue starts after
`pgfleet run` starts or reloads (HUP) publishes its queue and the tasks of its registry; it
imports them anyway. Later workers of the same configuration (restarts, recycles, TTIN) do
not, so two hosts with different files do not overwrite each other at every recycle: the
last to start or reload wins. Entries of tasks and queues no longer configured are kept
(another host may still run them) until a configuration naming them overwrites them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgfleet.config import Config
from pgfleet.core import payload
from pgfleet.sql import fleet as fleet_store
from pgfleet.sql.db import scrub
from pgfleet.tasks import Registry

log = logging.getLogger("pgfleet.worker.defaults")


@dataclass(frozen=True)
class Defaults:
    """What one worker publishes: queue → max_attempts, and each task's (name, queue,
    max_attempts, backoff as JSON)."""

    queues: dict[str, int] = field(default_factory=dict)
    tasks: list[tuple[str, str | None, int | None, str | None]] = field(default_factory=list)


def for_worker(config: Config, queue: str, registry: Registry) -> Defaults:
    """The defaults a worker of `queue` publishes: that queue's and its registry's."""
    tasks = []
    low, high = payload.ATTEMPTS_RANGE
    for name in registry.names():
        task = registry.get(name)
        assert task is not None
        attempts = task.max_attempts
        if attempts is not None and not low <= attempts <= high:
            # The database would refuse the whole batch; this task's enqueues then take
            # the queue's attempts, and the operator learns why.
            log.warning("task %r declares max_attempts=%r, outside %d..%d; not published",
                        name, attempts, low, high)
            attempts = None
        # The task's own backoff prices its crashed attempts too (maintenance/process.py).
        backoff = json.dumps(dataclasses.asdict(task.backoff)) if task.backoff else None
        tasks.append((name, task.queue, attempts, backoff))
    return Defaults(queues={queue: config.queues[queue].max_attempts}, tasks=tasks)


def publish(conn: psycopg.Connection[Any] | None, defaults: Defaults | None,
            dsn: str) -> None:
    """Write `defaults` (nothing when either is None). A failure is logged, never raised: jobs run
    without it, and the next start or HUP publishes again."""
    if conn is None or defaults is None:
        return
    try:
        with conn.transaction():
            changed = fleet_store.publish_queue_defaults(conn, defaults.queues)
            changed += fleet_store.publish_task_defaults(conn, defaults.tasks)
    except psycopg.Error as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("could not publish the enqueue defaults of queue(s) %s: %s",
                    ", ".join(map(repr, defaults.queues)), scrub(text, dsn))
        return
    log.info("published the enqueue defaults of queue(s) %s and %d task(s) (%d changed)",
             ", ".join(map(repr, defaults.queues)), len(defaults.tasks), changed,
             extra={"event": "defaults_published"})
