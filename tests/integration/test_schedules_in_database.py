"""Schedules kept in the database: hosts that disagree about a schedule fire only the
newest config's definition, a rolling deploy fires each period once, and schedules added,
paused, resumed, run and removed at runtime (SQL and `pgfleet cron`)."""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from pgfleet.config import Config, parse_config_text
from pgfleet.cron.scheduler import Scheduler
from tests.support.fleet import settle
from tests.support.workers import scalar, wait_for

ROOT = Path(__file__).resolve().parents[2]
LOGGER = "pgfleet.cron.scheduler"


def config(schedules: str = "") -> Config:
    text = "queues:\n  default: {}\n"
    if schedules:
        text += "schedules:\n" + schedules
    return parse_config_text(text)


def tick(cron: str, timezone: str = "UTC") -> str:
    return f'  tick:\n    cron: "{cron}"\n    timezone: {timezone}\n    task: noop\n'


def fire_times(dsn: str, schedule: str = "tick") -> list[datetime]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT fire_time FROM pgfleet.schedule_runs WHERE schedule = %s"
                            " ORDER BY fire_time", (schedule,)).fetchall()
    return [r[0] for r in rows]


def first_published(dsn: str, scheduler: Scheduler) -> datetime | None:
    value: datetime | None = scalar(
        dsn, "SELECT first_published_at FROM pgfleet.schedule_holders WHERE holder = %s",
        (scheduler.holder,))
    return value


def db_now(dsn: str) -> datetime:
    value: datetime = scalar(dsn, "SELECT now()")
    return value


def gaps(times: list[datetime]) -> set[float]:
    return {(b - a).total_seconds() for a, b in itertools.pairwise(times)}


class Running:
    """A scheduler in a thread of the test process, as a supervisor's child runs it."""

    def __init__(self, cfg: Config, dsn: str) -> None:
        self.scheduler = Scheduler(cfg, dsn)
        self.thread = threading.Thread(target=self.scheduler.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.scheduler.request_stop()
        self.thread.join(15)
        assert not self.thread.is_alive()


@contextmanager
def running(cfg: Config, dsn: str) -> Iterator[Running]:
    r = Running(cfg, dsn)
    try:
        yield r
    finally:
        if r.thread.is_alive():
            r.stop()


def test_two_hosts_with_different_definitions_fire_only_the_newest(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Host A: even seconds in UTC. Host B, configured later: odd seconds in Kathmandu.
    caplog.set_level(logging.INFO, logger=LOGGER)
    with running(config(tick("*/2 * * * * *")), dsn) as a:
        wait_for(lambda: len(fire_times(dsn)) >= 2, timeout=30, interval=0.1)
        assert all(t.second % 2 == 0 for t in fire_times(dsn))
        with running(config(tick("1-59/2 * * * * *", "Asia/Kathmandu")), dsn) as b:
            cutover = wait_for(lambda: first_published(dsn, b.scheduler), timeout=30)
            # A host's pass in flight at the cutover may still fire once by the old
            # definition; two seconds later every scheduler has passed again.
            settled = cutover + timedelta(seconds=2)
            wait_for(lambda: len([t for t in fire_times(dsn) if t > settled]) >= 4,
                     timeout=60, interval=0.2)
        a.stop()
    after = [t for t in fire_times(dsn) if t > settled]
    assert after and all(t.second % 2 == 1 for t in after), after
    assert gaps(after) == {2.0}, "a fire time was doubled or skipped"
    times = fire_times(dsn)
    assert len(set(times)) == len(times)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == len(times)
    errors = [r.getMessage() for r in caplog.records
              if r.levelno == logging.ERROR and "a newer config published" in r.getMessage()]
    assert len(errors) == 1, errors  # host A's, once
    assert '"*/2 * * * * *"' in errors[0] and "Asia/Kathmandu" in errors[0]


def test_a_rolling_deploy_fires_each_period_once(
    dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The period is six seconds: "*/6" stands for 0 9 * * * and "3-59/6" for 0 10 * * *.
    caplog.set_level(logging.INFO, logger=LOGGER)
    old, new = config(tick("*/6 * * * * *")), config(tick("3-59/6 * * * * *"))
    old_file = tmp_path / "old.yaml"
    old_file.write_text("queues:\n  default: {}\nschedules:\n" + tick("*/6 * * * * *"))
    a1, a2 = Running(old, dsn), Running(old, dsn)
    hosts = [a1, a2]
    try:
        wait_for(lambda: len(fire_times(dsn)) >= 1, timeout=30, interval=0.1)
        assert all(t.second % 6 == 0 for t in fire_times(dsn))
        b1 = Running(new, dsn)
        hosts.append(b1)
        cutover = wait_for(lambda: first_published(dsn, b1.scheduler), timeout=30)
        a1.stop()
        hosts.append(Running(new, dsn))
        a2.stop()
        # A host of the old release restarted after the deploy: its definition is older.
        a3 = Running(old, dsn)
        hosts.append(a3)
        wait_for(lambda: first_published(dsn, a3.scheduler), timeout=30)
        listed = subprocess.run(
            [sys.executable, "-m", "pgfleet", "--database-url", dsn, "cron", "list",
             "-c", str(old_file), "--json"],
            capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
        settled = cutover + timedelta(seconds=2)
        wait_for(lambda: len([t for t in fire_times(dsn) if t > settled]) >= 3,
                 timeout=60, interval=0.2)
    finally:
        for host in hosts:
            if host.thread.is_alive():
                host.stop()
    after = [t for t in fire_times(dsn) if t > settled]
    assert after and all(t.second % 6 == 3 for t in after), after
    assert gaps(after) == {6.0}
    # Across the whole deploy no six-second period ran twice.
    times = fire_times(dsn)
    assert all(g >= 3.0 for g in gaps(times)), times
    assert any("a newer config published" in r.getMessage() for r in caplog.records)

    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)
    assert entry["cron"] == "3-59/6 * * * * *"  # what fires, not what the file says
    assert entry["this_config_differs"] is True
    disagreeing = {d["scheduler"]: d["cron"] for d in entry["disagreeing"]}
    assert disagreeing.get(a3.scheduler.holder) == "*/6 * * * * *"


def test_when_the_newer_hosts_stop_the_older_definition_fires_again(dsn: str) -> None:
    # A rollback: once no running scheduler holds the newer config, the older one fires.
    with running(config(tick("*/2 * * * * *")), dsn) as a:
        wait_for(lambda: first_published(dsn, a.scheduler), timeout=30)  # A is older
        with running(config(tick("1-59/2 * * * * *")), dsn) as b:
            wait_for(lambda: first_published(dsn, b.scheduler), timeout=30)
            wait_for(lambda: any(t.second % 2 for t in fire_times(dsn)), timeout=30)
        stopped = db_now(dsn) + timedelta(seconds=2)
        wait_for(lambda: len([t for t in fire_times(dsn) if t > stopped]) >= 2, timeout=30,
                 interval=0.2)
    assert all(t.second % 2 == 0 for t in fire_times(dsn) if t > stopped)


def sql(dsn: str, statement: str, params: tuple[object, ...] = ()) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(statement, params).fetchone()
    return row[0] if row else None


def fires_stop(dsn: str, name: str) -> datetime:
    """Wait until a paused or removed schedule has been passed over, then show that two
    more fire times go by without a run; returns the last run."""
    last = fire_times(dsn, name)[-1]
    settle(2.5)
    return last


def test_runtime_schedules_through_sql_fire_once_across_two_schedulers(dsn: str) -> None:
    sql(dsn, "SELECT pgfleet.schedule_add('rt', '* * * * * *', 'noop', '{\"n\": 1}')")
    with running(config(), dsn), running(config(), dsn):
        wait_for(lambda: len(fire_times(dsn, "rt")) >= 3, timeout=30, interval=0.1)
        sql(dsn, "SELECT pgfleet.schedule_pause('rt')")
        settle(1.2)  # a pass already under way may still fire once
        paused_at = fires_stop(dsn, "rt")
        assert fire_times(dsn, "rt")[-1] == paused_at
        sql(dsn, "SELECT pgfleet.schedule_pause('rt', false)")
        wait_for(lambda: fire_times(dsn, "rt")[-1] > paused_at, timeout=30, interval=0.1)
        job = sql(dsn, "SELECT pgfleet.schedule_run_now('rt')")
        assert scalar(dsn, "SELECT task || ' ' || args::text FROM pgfleet.jobs WHERE id = %s",
                      (job,)) == 'noop {"n": 1}'
        sql(dsn, "SELECT pgfleet.schedule_remove('rt')")
        settle(1.2)
        removed_at = fires_stop(dsn, "rt")
        assert fire_times(dsn, "rt")[-1] == removed_at
    runs = fire_times(dsn, "rt")
    assert len(set(runs)) == len(runs)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == len(runs)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.schedule_runs WHERE job_id IS NULL") == 0


def test_runtime_schedule_functions_refuse_with_one_clear_message(dsn: str) -> None:
    sql(dsn, "SELECT pgfleet.schedule_add('rt', '@daily', 'noop')")
    with running(config(tick("@hourly")), dsn) as r:
        wait_for(lambda: first_published(dsn, r.scheduler), timeout=30)
    cases = [
        ("SELECT pgfleet.schedule_add('rt', '@daily', 'noop')", "'rt' exists already"),
        ("SELECT pgfleet.schedule_add('x', '@daily', 'noop', '[]')", "args must be a JSON"),
        ("SELECT pgfleet.schedule_add('x', '', 'noop')", "must be non-empty"),
        ("SELECT pgfleet.schedule_add('x', '@daily', 'noop', max_delay => -1)", "max_delay"),
        # What a fire's enqueue would refuse is refused here, and names stay printable.
        ("SELECT pgfleet.schedule_add('x', '@daily', 'noop',"
         " jsonb_build_object('x', repeat('a', 2000000)))", "over the limit of 1048576 bytes"),
        ("SELECT pgfleet.schedule_add('x', '@daily', 'noop', (repeat('{\"a\":', 70)"
         " || '1' || repeat('}', 70))::jsonb)", "nested deeper than 64 levels"),
        ("SELECT pgfleet.schedule_add(E'evil\\nname', '@daily', 'noop')",
         "must not contain control characters"),
        ("SELECT pgfleet.schedule_add('x', E'* * * * *\\n', 'noop')",
         "must not contain control characters"),
        ("SELECT pgfleet.schedule_add('x', '@daily', E'no\\x07task')",
         "must not contain control characters"),
        ("SELECT pgfleet.schedule_remove('tick')", "'tick' comes from a config file"),
        ("SELECT pgfleet.schedule_remove('nope')", "no schedule named 'nope'"),
        ("SELECT pgfleet.schedule_pause('nope')", "no schedule named 'nope'"),
        ("SELECT pgfleet.schedule_run_now('nope')", "no schedule named 'nope'"),
    ]
    for statement, message in cases:
        with pytest.raises(psycopg.Error, match=message):
            sql(dsn, statement)
    # A config schedule pauses like a runtime one.
    sql(dsn, "SELECT pgfleet.schedule_pause('tick')")
    assert sql(dsn, "SELECT paused FROM pgfleet.schedules WHERE name = 'tick'") is True


def pgfleet(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PGFLEET_DATABASE_URL",)}
    return subprocess.run([sys.executable, "-m", "pgfleet", "--database-url", dsn, *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT,
                          check=False)


def test_cron_commands_add_pause_resume_run_now_and_remove(dsn: str) -> None:
    bad = pgfleet(dsn, "cron", "add", "rt", "--cron", "61 * * * * *", "--task", "noop")
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "--cron" in bad.stderr, bad.stderr
    bad = pgfleet(dsn, "cron", "add", "rt", "--cron", "@daily", "--task", "noop",
                  "--args", "{oops")
    assert bad.returncode == 2 and "--args is not JSON" in bad.stderr

    added = pgfleet(dsn, "cron", "add", "rt", "--cron", "* * * * * *", "--task", "noop",
                    "--timezone", "Europe/Berlin", "--args", '{"n": 2}', "--max-delay", "10m")
    assert added.returncode == 0, added.stderr
    assert "schedule 'rt' added; next fire" in added.stdout
    again = pgfleet(dsn, "cron", "add", "rt", "--cron", "@daily", "--task", "noop")
    assert again.returncode == 1 and "exists already" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    with running(config(), dsn):
        wait_for(lambda: len(fire_times(dsn, "rt")) >= 2, timeout=30, interval=0.1)
        listed = pgfleet(dsn, "cron", "list")
        assert listed.returncode == 0, listed.stderr
        assert "rt (enabled, added at runtime)" in listed.stdout
        assert "timezone: Europe/Berlin" in listed.stdout
        assert pgfleet(dsn, "cron", "pause", "rt").stdout == "schedule 'rt' paused\n"
        settle(1.2)
        paused_at = fires_stop(dsn, "rt")
        assert fire_times(dsn, "rt")[-1] == paused_at
        [entry] = json.loads(pgfleet(dsn, "cron", "list", "--json").stdout)
        assert entry["paused"] is True and entry["next"] == []
        assert entry["max_delay_seconds"] == 600
        assert pgfleet(dsn, "cron", "resume", "rt").returncode == 0
        wait_for(lambda: fire_times(dsn, "rt")[-1] > paused_at, timeout=30, interval=0.1)
        ran = pgfleet(dsn, "cron", "run-now", "rt")
        assert ran.returncode == 0 and "job" in ran.stdout and "enqueued" in ran.stdout
        assert pgfleet(dsn, "cron", "remove", "rt").stdout == "schedule 'rt' removed\n"
        settle(1.2)
        removed_at = fires_stop(dsn, "rt")
        assert fire_times(dsn, "rt")[-1] == removed_at
    gone = pgfleet(dsn, "cron", "remove", "rt")
    assert gone.returncode == 1 and "no schedule named 'rt'" in gone.stderr
    assert pgfleet(dsn, "cron", "list").stdout == "no schedules\n"
    assert scalar(dsn, "SELECT args::text FROM pgfleet.jobs ORDER BY id LIMIT 1") == '{"n": 2}'


def test_a_bad_definition_added_by_sql_logs_one_error_and_fires_nothing(
        dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    # SQL cannot check a cron expression; the scheduler refuses it, and only it.
    caplog.set_level(logging.INFO, logger=LOGGER)
    sql(dsn, "SELECT pgfleet.schedule_add('bad', '61 * * * *', 'noop')")
    sql(dsn, "SELECT pgfleet.schedule_add('good', '* * * * * *', 'noop')")
    with running(config(), dsn):
        wait_for(lambda: len(fire_times(dsn, "good")) >= 3, timeout=30, interval=0.1)
    assert fire_times(dsn, "bad") == []
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert errors[0].startswith("schedule bad: its definition in pgfleet.schedules is refused")
    assert "61" in errors[0]


def test_a_long_pause_is_not_caught_up_on_resume(dsn: str) -> None:
    # Fires at :00 and :30. Paused over one fire time and resumed more than a scheduler's
    # continuity window (15 s) later, a catch-up would run that missed fire at once.
    sql(dsn, "SELECT pgfleet.schedule_add('rt', '0,30 * * * * *', 'noop')")
    with running(config(), dsn):
        wait_for(lambda: fire_times(dsn, "rt"), timeout=60, interval=0.2)
        sql(dsn, "SELECT pgfleet.schedule_pause('rt')")
        paused_at = fire_times(dsn, "rt")[-1]
        missed = paused_at + timedelta(seconds=30)
        wait_for(lambda: db_now(dsn) > missed + timedelta(seconds=16), timeout=90,
                 interval=0.5)
        resumed = db_now(dsn)
        sql(dsn, "SELECT pgfleet.schedule_pause('rt', false)")
        wait_for(lambda: fire_times(dsn, "rt")[-1] > paused_at, timeout=60, interval=0.2)
    after = [t for t in fire_times(dsn, "rt") if t > paused_at]
    assert missed not in after
    assert after[0] == paused_at + timedelta(seconds=60), (paused_at, resumed, after)


def test_a_schedule_whose_job_is_refused_stops_no_other(dsn: str) -> None:
    """A row written straight into pgfleet.schedules with args no enqueue takes: its fires
    fail alone, named in the log, while the other schedules keep firing every time."""
    big = "x" * 1_100_000
    sql(dsn, "INSERT INTO pgfleet.schedules (name, source, definition) VALUES"
             " ('big', 'runtime', jsonb_build_object('cron', '* * * * * *', 'timezone', 'UTC',"
             " 'task', 'noop', 'args', jsonb_build_object('x', %s::text), 'queue', 'default',"
             " 'priority', 0, 'enabled', true, 'max_delay', 3600)) RETURNING name", (big,))
    with running(config(tick("* * * * * *")), dsn):
        wait_for(lambda: len(fire_times(dsn)) >= 3, timeout=30, interval=0.1)
    runs = fire_times(dsn)
    # Every second from the first fire to the last, none skipped.
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(runs)] \
        == [1.0] * (len(runs) - 1)
    assert fire_times(dsn, "big") == []
