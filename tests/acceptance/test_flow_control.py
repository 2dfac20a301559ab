"""Issue 20, flow control across hosts: two real supervisors share one database, and the
limits hold between them. Every job of these tests records its own start and end (the
`sleep` task writes them to the audit table with the server's clock_timestamp())."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg

import pgfleet
from pgfleet.status.fleet import gather
from tests.support.fleet import Fleet, config_text
from tests.support.workers import scalar, wait_for

Interval = tuple[datetime, datetime]


def two_supervisors(fleet: Callable[..., Fleet], queue: dict[str, Any],
                    threads: int = 4) -> list[Fleet]:
    """Two supervisors with the same queue of `threads` threads each, both ready. A worker
    reclaims the slot its finished job frees in the same transaction, so one host could
    keep every slot; recycling each worker after 3 jobs hands its slots over, so both
    hosts run jobs."""
    queue = {"processes": 1, "threads": threads, "max_jobs": 3, **queue}
    fleets = [fleet({"limited": queue}, name=name)
              for name in ("host-a", "host-b")]
    for f in fleets:
        f.wait_workers(1, "limited")
    return fleets


def done(dsn: str, ids: list[int]) -> bool:
    return bool(scalar(dsn, "SELECT count(*) = %s FROM pgfleet.jobs"
                            " WHERE id = ANY(%s) AND state = 'succeeded'", (len(ids), ids)))


def intervals(dsn: str) -> dict[int, tuple[Interval, int]]:
    """job id → ((start, end) as the task recorded them, the pid that ran it)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT job_id, min(at) FILTER (WHERE event = 'started'),"
            "       max(at) FILTER (WHERE event = 'finished'), min(pid)"
            "  FROM audit GROUP BY job_id").fetchall()
    return {r[0]: ((r[1], r[2]), r[3]) for r in rows}


def depth(spans: list[Interval]) -> int:
    """The most intervals open at one instant (an end and a start at the same instant do
    not overlap)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans],
                    key=lambda e: (e[0], e[1]))
    open_now = deepest = 0
    for _, step in events:
        open_now += step
        deepest = max(deepest, open_now)
    return deepest


def jobs_per_supervisor(dsn: str, fleets: list[Fleet]) -> list[int]:
    """How many jobs each supervisor's workers ran (the task names its worker's parent)."""
    with psycopg.connect(dsn) as conn:
        ran = dict(conn.execute(
            "SELECT event, count(*) FROM audit WHERE event LIKE 'supervisor %%'"
            " GROUP BY event").fetchall())
    return [ran.get(f"supervisor {f.pid}", 0) for f in fleets]


def test_global_concurrency_two_across_two_supervisors(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    fleets = two_supervisors(fleet, {"global_concurrency": 2})
    # Lengths that do not line up with the polls, so slots free at varied moments.
    ids = pgfleet.enqueue_many(dsn, [
        {"task": "sleep_on_host", "queue": "limited",
         "args": {"seconds": 0.15 + 0.07 * (i % 5)}}
        for i in range(30)])
    wait_for(lambda: done(dsn, ids), timeout=120)
    ran = intervals(dsn)
    assert set(ran) == set(ids)
    assert depth([span for span, _ in ran.values()]) == 2
    # Both supervisors ran jobs, so the limit held between hosts, not within one.
    assert sum(jobs_per_supervisor(dsn, fleets)) == 30
    assert all(jobs_per_supervisor(dsn, fleets))
    assert scalar(dsn, "SELECT max(attempt) FROM pgfleet.jobs") == 1


def test_rate_limit_five_a_second_with_forty_waiting(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    ids = pgfleet.enqueue_many(dsn, [{"task": "sleep_on_host", "queue": "limited",
                                      "args": {"seconds": 0.05}}] * 40)
    fleets = two_supervisors(fleet, {"rate_limit": "5/s"})
    wait_for(lambda: done(dsn, ids), timeout=120)
    # A start is the claim; its time is the job's started_at, taken by the database.
    with psycopg.connect(dsn) as conn:
        starts = [r[0] for r in conn.execute(
            "SELECT started_at FROM pgfleet.jobs WHERE id = ANY(%s) ORDER BY 1",
            (ids,)).fetchall()]
    second = timedelta(seconds=1)
    most = max(sum(1 for s in starts if end - second < s <= end) for end in starts)
    assert most == 5
    # Eight windows' worth of starts cannot fit in less than seven seconds.
    assert starts[-1] - starts[0] >= 7 * second
    assert all(jobs_per_supervisor(dsn, fleets))


def test_one_job_per_key_while_keys_overlap(dsn: str, fleet: Callable[..., Fleet]) -> None:
    # Two threads a host for three keys: no host can hold every key, so both run jobs.
    fleets = two_supervisors(fleet, {"key_concurrency": 1}, threads=2)
    jobs = [{"task": "sleep_on_host", "queue": "limited", "concurrency_key": f"customer-{k}",
             "args": {"seconds": 0.2 + 0.05 * (i % 3)}}
            for i in range(20) for k in range(3)]
    ids = pgfleet.enqueue_many(dsn, jobs)
    key_of = {job_id: job["concurrency_key"] for job_id, job in zip(ids, jobs, strict=True)}
    wait_for(lambda: done(dsn, ids), timeout=120)
    ran = intervals(dsn)
    for key in {"customer-0", "customer-1", "customer-2"}:
        mine = sorted((ran[j][0], j) for j in ids if key_of[j] == key)
        assert depth([span for span, _ in mine]) == 1, key
        # First in, first out per key: they ran in enqueue order.
        assert [j for _, j in mine] == sorted(j for _, j in mine), key
    assert depth([span for span, _ in ran.values()]) > 1  # different keys did overlap
    assert all(jobs_per_supervisor(dsn, fleets))
    # Waiting spent no attempt.
    assert scalar(dsn, "SELECT max(attempt) FROM pgfleet.jobs") == 1


def test_status_shows_the_published_limits_and_their_use(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"limited": {"processes": 1, "threads": 4, "global_concurrency": 1,
                           "rate_limit": "100/m"},
               "default": {"processes": 1}})
    f.wait_workers(1, "limited")
    ids = pgfleet.enqueue_many(dsn, [{"task": "sleep_on_host", "queue": "limited",
                                      "args": {"seconds": 30}}] * 3)
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE id = ANY(%s)"
                                 " AND state = 'running'", (ids,)) == 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        [limits] = gather(conn)["limits"]
    assert limits["queue"] == "limited"
    assert (limits["global_concurrency"], limits["running"]) == (1, 1)
    assert (limits["rate_limit"], limits["starts_in_window"]) == ("100/m", 1)
    assert limits["key_concurrency"] == 1
    assert limits["held"] == {"global_concurrency": 2, "rate_limit": 0, "key_concurrency": 0}
    shown = subprocess.run([sys.executable, "-m", "pgfleet", "status"], capture_output=True,
                           text=True, timeout=60, check=True).stdout.splitlines()
    table = shown[shown.index(next(line for line in shown if line.startswith("LIMITS"))):]
    assert table[1].split() == ["limited", "1/1", "running", "1", "of", "100/m", "1", "(0",
                                "keys", "full)", "2/0/0"]


def published(dsn: str) -> tuple[Any, ...] | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT global_concurrency, rate_limit, rate_period, key_concurrency"
                           " FROM pgfleet.queue_limits WHERE queue = 'limited'").fetchone()
    return None if row is None else tuple(row)


def test_a_reload_publishes_the_new_limits(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"limited": {"processes": 1, "global_concurrency": 1}})
    f.wait_workers(1, "limited")
    wait_for(lambda: published(dsn) == (1, None, None, 1))
    f.config.write_text(config_text({"limited": {"processes": 1, "rate_limit": "10/m",
                                                 "key_concurrency": 3}}))
    f.signal(signal.SIGHUP)
    wait_for(lambda: published(dsn) == (None, 10, 60.0, 3))
    # Dropping every limit lifts them: the queue is written without flow control.
    f.config.write_text(config_text({"limited": {"processes": 1}}))
    f.signal(signal.SIGHUP)
    wait_for(lambda: published(dsn) == (None, None, None, None))
