"""Issue 13 item 4: crash loops are contained. A worker that dies after starting is
restarted with backoff, too many crashes fail its queue while the others run, and a job
is never charged for a crash of a process it merely shared with the culprit."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from typing import Any

import psycopg

import pgfleet
from tests.faults import books
from tests.support.fleet import Fleet
from tests.support.prometheus import free_port, http_get
from tests.support.workers import scalar, wait_for


def row(dsn: str, job_id: int) -> tuple[Any, ...]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT state::text, attempt, crashes, last_error"
                             " FROM pgfleet.jobs WHERE id = %s", (job_id,)).fetchone()
    assert found is not None
    return tuple(found)


def final(dsn: str, ids: list[int]) -> bool:
    return bool(scalar(dsn, "SELECT count(*) = 0 FROM pgfleet.jobs WHERE id = ANY(%s)"
                            " AND state NOT IN ('succeeded', 'dead')", (ids,)))


def test_a_poison_job_is_found_and_its_neighbours_are_not_charged(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"default": {"processes": 1, "threads": 4}, "other": {"processes": 1}})
    f.wait_workers(1, "default")
    f.wait_workers(1, "other")
    # One transaction, claim order by id: the three sleepers ahead of the poison job are
    # claimed in its batch and still running when it segfaults its process.
    ahead = [{"task": "sleep", "args": {"seconds": 1.0}, "max_attempts": 1}] * 3
    behind = [{"task": "sleep", "args": {"seconds": 0.2}, "max_attempts": 1}] * 17
    ids = pgfleet.enqueue_many(dsn, [*ahead, {"task": "crash", "max_attempts": 2}, *behind])
    poison, innocent = ids[3], ids[:3] + ids[4:]
    others = pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": "other"}] * 20)
    wait_for(lambda: final(dsn, ids + others), timeout=90)

    assert row(dsn, poison) == ("dead", 2, 3, "worker died: SIGSEGV")
    for job_id in innocent:
        assert row(dsn, job_id)[:2] == ("succeeded", 1), job_id
    # The neighbours of the first crash counted it, but were not charged for it.
    assert [row(dsn, job_id)[2] for job_id in ids[:3]] == [1, 1, 1]
    assert all(row(dsn, job_id)[0] == "succeeded" for job_id in others)
    # One crash while shared, then one per charged attempt: no crash loop.
    # The supervisor may log the last exit just after the rows are final.
    wait_for(lambda: f.log().count("exited: SIGSEGV") >= 3)
    assert f.log().count("exited: SIGSEGV") == 3
    assert "queue 'default' failed" not in f.log()
    assert f.log().count("crashed (1 within 300s); next start in") == 1
    books.check(dsn, ids + others)


def test_too_many_crashes_fail_the_queue_while_another_drains(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    target = f"127.0.0.1:{free_port()}"
    f = fleet({"crashy": {"processes": 1}, "default": {"processes": 1}},
              supervisor={"crash_limit": {"count": 3, "window": "1m"}},
              metrics={"enabled": True, "listen": target})
    f.wait_workers(1, "crashy")
    poison = pgfleet.enqueue_many(dsn, [{"task": "crash", "queue": "crashy",
                                         "max_attempts": 1}] * 10)
    wait_for(lambda: "queue 'crashy' failed: its workers crashed 3 times" in f.log(),
             timeout=60)
    fine = pgfleet.enqueue_many(dsn, [{"task": "noop"}] * 20)
    wait_for(lambda: final(dsn, fine), timeout=30)
    assert f.workers("crashy") == {}
    assert f.log().count("exited: SIGSEGV") == 3
    assert int(scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE id = ANY(%s)"
                           " AND state = 'dead'", (poison,))) == 3
    status, body = http_get(f"http://{target}/metrics")
    assert status == 200
    assert re.search(rb'^pgfleet_queue_failed\{queue="crashy"\} 1\.0$', body, re.M), body
    assert "ERROR" in next(line for line in f.log().splitlines()
                           if "queue 'crashy' failed" in line)
    # A HUP gives the failed queue a fresh start: its workers run (and crash) again.
    f.signal(signal.SIGHUP)
    wait_for(lambda: f.log().count("exited: SIGSEGV") > 3, timeout=30)
