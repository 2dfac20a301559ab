"""pgfleet.testing: run_jobs on a real database (the worker's statements: retries,
dead, unknown tasks, queues, the caller's transaction) and eager mode without one; and
middleware around enqueues (meta added there reaches the run)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import pgfleet
import pgfleet.testing
from pgfleet import middleware
from pgfleet.middleware import Enqueueing, JobRun
from tests.integrations import eagertasks
from tests.support.workers import scalar

TASKS = ["tests.integrations.eagertasks"]


def test_run_jobs_runs_due_jobs_of_one_queue_or_all(conn: psycopg.Connection[Any]) -> None:
    a = pgfleet.enqueue(conn, "eager.record", {"value": "a"}, queue="q1")
    b = pgfleet.enqueue(conn, "eager.record", {"value": "b"}, queue="q2")
    later = pgfleet.enqueue(conn, "eager.record", {"value": "later"}, delay=3600)
    first = pgfleet.testing.run_jobs(conn, "q2", tasks=TASKS)
    assert [(o.id, o.queue, o.state) for o in first] == [(b, "q2", "succeeded")]
    rest = pgfleet.testing.run_jobs(conn, tasks=TASKS)
    assert [(o.id, o.state) for o in rest] == [(a, "succeeded")]
    assert scalar(conn.info.dsn, "SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                  (later,)) == "queued"


def test_run_jobs_retries_with_backoff_and_ends_dead(conn: psycopg.Connection[Any]) -> None:
    job = pgfleet.enqueue(conn, "eager.broken", max_attempts=2)
    unknown = pgfleet.enqueue(conn, "eager.nobody", max_attempts=1)
    outcomes = pgfleet.testing.run_jobs(conn, tasks=TASKS)
    # The default backoff delays the retry: the first call leaves it queued.
    assert [(o.id, o.attempt, o.state) for o in outcomes] == [
        (job, 1, "queued"), (unknown, 1, "dead")]
    assert "ValueError: broken on purpose" in (outcomes[0].error or "")
    assert "unknown task 'eager.nobody'" in (outcomes[1].error or "")
    conn.execute("UPDATE pgfleet.jobs SET run_at = now() WHERE id = %s", (job,))
    [last] = pgfleet.testing.run_jobs(conn, tasks=TASKS)
    assert (last.id, last.attempt, last.state) == (job, 2, "dead")


def test_run_jobs_in_the_callers_transaction_rolls_back(dsn: str) -> None:
    job = pgfleet.enqueue(dsn, "eager.record", {"value": "tx"})
    with psycopg.connect(dsn) as conn:
        [outcome] = pgfleet.testing.run_jobs(conn, tasks=TASKS)
        assert outcome.state == "succeeded"
        conn.rollback()
    assert scalar(dsn, "SELECT state::text || ' ' || attempt FROM pgfleet.jobs WHERE id = %s",
                  (job,)) == "queued 0"


def test_run_jobs_applies_an_async_tasks_own_timeout(conn: psycopg.Connection[Any]) -> None:
    job = pgfleet.enqueue(conn, "loop.await_forever", max_attempts=1)
    [outcome] = pgfleet.testing.run_jobs(conn, tasks=["tests.integrations.looptasks"])
    assert (outcome.id, outcome.state, outcome.error) == (job, "dead", "timed out after 0.5s")


def test_run_jobs_stops_at_its_limit(conn: psycopg.Connection[Any]) -> None:
    pgfleet.enqueue(conn, "eager.again")
    outcomes = pgfleet.testing.run_jobs(conn, tasks=TASKS, limit=5)
    assert [o.state for o in outcomes] == ["succeeded"] * 5
    assert scalar(conn.info.dsn, "SELECT count(*) FROM pgfleet.jobs WHERE state = 'queued'") == 1


def test_eager_runs_every_enqueue_form_without_a_database() -> None:
    eagertasks.DONE.clear()

    async def enqueue_async_forms() -> None:
        await pgfleet.enqueue_async(None, "eager.record_async", {"value": 3})  # type: ignore[arg-type]
        await pgfleet.enqueue_many_async(None, [{"task": "eager.record", "args": {"value": 4}}])  # type: ignore[arg-type]

    with pgfleet.testing.eager() as runs:
        first = pgfleet.enqueue(None, "eager.record", {"value": 1}, delay=3600)  # type: ignore[arg-type]
        ids = pgfleet.enqueue_many(None, [{"task": "eager.record", "args": {"value": 2}}])  # type: ignore[arg-type]
        asyncio.run(enqueue_async_forms())
    assert eagertasks.DONE == [1, 2, ("async", 3), 4]
    assert (first, ids) == (1, [2])
    assert runs.tasks() == ["eager.record", "eager.record", "eager.record_async", "eager.record"]
    assert all(o.state == "succeeded" for o in runs.outcomes)


def test_eager_raises_a_failure_unless_told_not_to() -> None:
    with pgfleet.testing.eager(), pytest.raises(pgfleet.testing.EagerJobFailed,
                                                match="broken on purpose"):
        pgfleet.enqueue(None, "eager.broken")  # type: ignore[arg-type]
    with pgfleet.testing.eager(raise_errors=False) as runs:
        pgfleet.enqueue(None, "eager.broken")  # type: ignore[arg-type]
    assert [o.state for o in runs.outcomes] == ["failed"]


@contextmanager
def tag_and_watch(event: JobRun | Enqueueing) -> Iterator[None]:
    if isinstance(event, Enqueueing):
        for job in event.jobs:
            job.meta["tag"] = "from-middleware"
        yield
        SEEN.append(("enqueued", tuple(event.ids)))
    else:
        yield
        SEEN.append(("ran", event.job.id, dict(event.meta), event.outcome))


SEEN: list[Any] = []


def test_middleware_wraps_enqueues_and_its_meta_reaches_the_run(
        conn: psycopg.Connection[Any]) -> None:
    SEEN.clear()
    middleware.register(tag_and_watch)
    try:
        job = pgfleet.enqueue(conn, "eager.record", {"value": "m"}, meta={"own": 1})
        pgfleet.testing.run_jobs(conn, tasks=TASKS)
    finally:
        middleware.unregister(tag_and_watch)
    stored = scalar(conn.info.dsn, "SELECT meta::text FROM pgfleet.jobs WHERE id = %s", (job,))
    assert json.loads(stored) == {"own": 1, "tag": "from-middleware"}
    assert [("enqueued", (job,)),
                    ("ran", job, {"own": 1, "tag": "from-middleware"}, "succeeded")] == SEEN
