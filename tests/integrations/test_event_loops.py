"""Async jobs of a worker share one long-lived event loop per executor thread, and their
timeouts still work: a coroutine's own timeout keeps the loop, an interrupt from outside
(a loop blocked in sync code) replaces it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pgfleet
from pgfleet import middleware
from pgfleet.worker import Worker
from tests.support.workers import TASKS, scalar, wait_for, worker_thread

LOOP_TASKS = "tests.integrations.looptasks"


def one_thread_worker(dsn: str) -> AbstractContextManager[Worker]:
    return worker_thread(dsn, threads=1, modules=[TASKS, LOOP_TASKS])


def loop_of(dsn: str, job_id: int) -> int:
    event = scalar(dsn, "SELECT event FROM audit WHERE job_id = %s AND event LIKE 'loop:%%'",
                   (job_id,))
    return int(event.split(":")[1])


def finished(dsn: str, *ids: int) -> bool:
    return scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE id = ANY(%s)"
                  " AND state IN ('succeeded', 'dead')", (list(ids),)) == len(ids)


def test_two_async_jobs_in_a_row_share_an_object_bound_to_the_loop(dsn: str) -> None:
    first = pgfleet.enqueue(dsn, "loop.bind_event", priority=1, max_attempts=1)
    second = pgfleet.enqueue(dsn, "loop.bind_event", priority=2, max_attempts=1)
    with one_thread_worker(dsn):
        wait_for(lambda: finished(dsn, first, second))
    # With a loop per job the second wait raised "bound to a different event loop".
    for job_id in (first, second):
        assert scalar(dsn, "SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                      (job_id,)) == "succeeded"
    assert loop_of(dsn, first) == loop_of(dsn, second)


def test_an_async_timeout_keeps_the_loop_for_the_next_job(dsn: str) -> None:
    slow = pgfleet.enqueue(dsn, "loop.await_forever", priority=1, max_attempts=1)
    after = pgfleet.enqueue(dsn, "loop.which", priority=2, max_attempts=1)
    seen: list[tuple[int, str | None]] = []

    @contextmanager
    def outcomes(event: Any) -> Iterator[None]:
        try:
            yield
        finally:
            seen.append((event.job.id, event.outcome))

    middleware.register(outcomes)
    try:
        with one_thread_worker(dsn):
            wait_for(lambda: finished(dsn, slow, after))
    finally:
        middleware.unregister(outcomes)
    assert seen == [(slow, "timed_out"), (after, "succeeded")]
    assert scalar(dsn, "SELECT state::text || ' ' || last_error FROM pgfleet.jobs"
                  " WHERE id = %s", (slow,)).startswith("dead timed out after 0.5s")
    assert scalar(dsn, "SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                  (after,)) == "succeeded"
    assert loop_of(dsn, slow) == loop_of(dsn, after)


def test_a_job_blocking_its_loop_is_interrupted_and_the_next_gets_a_fresh_loop(
        dsn: str) -> None:
    stuck = pgfleet.enqueue(dsn, "loop.block_loop", priority=1, max_attempts=1)
    after = pgfleet.enqueue(dsn, "loop.which", priority=2, max_attempts=1)
    with one_thread_worker(dsn) as worker:
        wait_for(lambda: finished(dsn, stuck, after))
        assert worker.events.timeouts == 1
    assert scalar(dsn, "SELECT state::text || ' ' || last_error FROM pgfleet.jobs"
                  " WHERE id = %s", (stuck,)).startswith("dead timed out after 0.5s")
    assert scalar(dsn, "SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                  (after,)) == "succeeded"
    assert loop_of(dsn, stuck) != loop_of(dsn, after)
