"""Cron schedules through `pgfleet run` (issue 4): once per fire time across hosts."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg

from tests.support.fleet import Fleet, settle
from tests.support.workers import wait_for

EVERY_SECOND = {"tick": {"cron": "* * * * * *", "task": "noop", "queue": "cron"}}


def fire_times(dsn: str, schedule: str = "tick") -> list[datetime]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT fire_time FROM pgfleet.schedule_runs WHERE schedule = %s"
                            " ORDER BY fire_time", (schedule,)).fetchall()
    return [r[0] for r in rows]


def jobs_of(dsn: str, task: str = "noop") -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgfleet.jobs WHERE task = %s",
                           (task,)).fetchone()
    return int(row[0]) if row else 0


def gaps(times: list[datetime]) -> list[float]:
    return [(b - a).total_seconds() for a, b in itertools.pairwise(times)]


def scheduler_pid(f: Fleet) -> int:
    found = wait_for(lambda: [p for p, t in f.children().items() if "scheduler" in t])
    return int(found[0])


def a_minute_turned_in(times: list[datetime], at_least: int) -> bool:
    """At least `at_least` fire times, one of them (not the first) at second 0."""
    return len(times) >= at_least and any(t.second == 0 for t in times[1:])


def test_three_supervisors_fire_once_per_second(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    queues: dict[str, Any] = {"cron": {"processes": 1}}
    hosts = [fleet(queues, name=f"host{i}", schedules=EVERY_SECOND) for i in range(3)]
    for host in hosts:
        host.wait_workers(1)
    wait_for(lambda: len(fire_times(dsn)) >= 1)
    # Twenty seconds and more of contention (four of the schedulers' 5 s refreshes) that
    # take in a turn of the minute, instead of a fixed minute that was sure to.
    wait_for(lambda: a_minute_turned_in(fire_times(dsn), at_least=21), timeout=120,
             interval=0.5)
    for host in hosts:
        host.signal(signal.SIGTERM)
    for host in hosts:
        assert host.wait(60) == 0
    times = fire_times(dsn)
    assert a_minute_turned_in(times, at_least=21)
    assert len(set(times)) == len(times)
    assert set(gaps(times)) == {1.0}, "a second was skipped or doubled"
    assert jobs_of(dsn) == len(times)


def test_a_stopped_supervisor_catches_up_once(dsn: str, fleet: Callable[..., Fleet]) -> None:
    schedules = {"tick": {"cron": "* * * * * *", "task": "noop", "queue": "cron",
                          "max_delay": "1m"}}
    first = fleet({"cron": {"processes": 1}}, name="first", schedules=schedules)
    wait_for(lambda: len(fire_times(dsn)) >= 2)
    first.signal(signal.SIGTERM)
    assert first.wait(60) == 0
    before = fire_times(dsn)
    settle(6.0)  # five or more fire times pass with nobody running
    second = fleet({"cron": {"processes": 1}}, name="second", schedules=schedules)
    wait_for(lambda: len(fire_times(dsn)) >= len(before) + 3)
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0
    after = fire_times(dsn)[len(before):]
    # One catch-up for the whole downtime, then one per second again.
    assert (after[0] - before[-1]).total_seconds() >= 5
    assert set(gaps(after)) == {1.0}
    assert "running only the latest" in second.log()
    assert jobs_of(dsn) == len(before) + len(after)


def test_a_killed_scheduler_is_replaced_and_loses_no_run(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    schedules = {"every3": {"cron": "*/3 * * * * *", "task": "noop", "queue": "cron"}}
    f = fleet({"cron": {"processes": 1}}, schedules=schedules)
    wait_for(lambda: len(fire_times(dsn, "every3")) >= 2, timeout=30)
    old = scheduler_pid(f)
    # Right after a fire, so the next one is due while the replacement starts.
    count = len(fire_times(dsn, "every3"))
    wait_for(lambda: len(fire_times(dsn, "every3")) > count, timeout=30)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: scheduler_pid(f) != old)
    mark = len(fire_times(dsn, "every3"))
    wait_for(lambda: len(fire_times(dsn, "every3")) >= mark + 3, timeout=30)
    times = fire_times(dsn, "every3")
    assert set(gaps(times)) == {3.0}
    assert all(t.second % 3 == 0 for t in times)
    assert "scheduler pid" in f.log() and "exited: SIGKILL" in f.log()


def test_hup_picks_up_added_and_removed_schedules(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    from tests.support.fleet import config_text

    f = fleet({"cron": {"processes": 1}}, schedules=EVERY_SECOND)
    wait_for(lambda: len(fire_times(dsn)) >= 2)
    f.config.write_text(config_text(
        {"cron": {"processes": 1}},
        schedules={"other": {"cron": "* * * * * *", "task": "noop", "queue": "cron"}}))
    f.signal(signal.SIGHUP)
    wait_for(lambda: len(fire_times(dsn, "other")) >= 2, timeout=30)
    stopped_at = fire_times(dsn)[-1]
    settle(2.0)  # two fire times of the removed schedule pass: neither may run
    assert fire_times(dsn)[-1] == stopped_at
    assert stopped_at < datetime.now(stopped_at.tzinfo) - timedelta(seconds=1)


def test_a_runtime_schedule_and_its_pause_survive_a_supervisor_restart(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    # A supervisor whose file has no schedule still fires the database's.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgfleet.schedule_add('rt', '* * * * * *', 'noop', queue => 'cron')")
    first = fleet({"cron": {"processes": 1}}, name="first")
    wait_for(lambda: len(fire_times(dsn, "rt")) >= 2, timeout=60)
    first.signal(signal.SIGHUP)  # a reload keeps it too
    mark = len(fire_times(dsn, "rt"))
    wait_for(lambda: len(fire_times(dsn, "rt")) >= mark + 2, timeout=60)
    first.signal(signal.SIGTERM)
    assert first.wait(60) == 0

    second = fleet({"cron": {"processes": 1}}, name="second")
    mark = len(fire_times(dsn, "rt"))
    wait_for(lambda: len(fire_times(dsn, "rt")) >= mark + 2, timeout=60)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgfleet.schedule_pause('rt')")
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0
    paused_at = fire_times(dsn, "rt")[-1]

    third = fleet({"cron": {"processes": 1}}, name="third")
    scheduler_pid(third)
    settle(3.0)  # three fire times pass under a running scheduler: none may run
    assert fire_times(dsn, "rt")[-1] == paused_at
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgfleet.schedule_pause('rt', false)")
    wait_for(lambda: fire_times(dsn, "rt")[-1] > paused_at, timeout=60)
    third.signal(signal.SIGTERM)  # no fire between the two counts below
    assert third.wait(60) == 0
    times = fire_times(dsn, "rt")
    assert len(set(times)) == len(times)
    assert jobs_of(dsn) == len(times)
