"""The scheduler against a real PostgreSQL: once per fire time across schedulers, the
catch-up rule, crash safety of the fire transaction, daylight saving, `pgfleet cron list`."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from pgfleet.config import Config, parse_config_text
from pgfleet.core.crontab import fire_times_after, previous_fire_time
from pgfleet.cron.scheduler import Scheduler
from tests.support.workers import scalar, wait_for

ROOT = Path(__file__).resolve().parents[2]


def config_text(schedules: str) -> str:
    return (
        "queues:\n"
        "  default: {}\n"
        "  reports: {max_attempts: 7}\n"
        "schedules:\n" + schedules
    )


def make_config(schedules: str) -> Config:
    return parse_config_text(config_text(schedules))


def runs(dsn: str, schedule: str) -> list[tuple[datetime, int | None]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT fire_time, job_id FROM pgfleet.schedule_runs WHERE schedule = %s"
            " ORDER BY fire_time", (schedule,)).fetchall()
    return [(r[0], r[1]) for r in rows]


def job_count(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"))


def db_now(dsn: str) -> datetime:
    value: datetime = scalar(dsn, "SELECT now()")
    return value


def record_run(dsn: str, schedule: str, fire_time: datetime) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.schedule_runs (schedule, fire_time) VALUES (%s, %s)",
                     (schedule, fire_time))


# ------------------------------------------------------------- (a) three schedulers


def test_three_schedulers_fire_every_second_exactly_once(dsn: str) -> None:
    config = make_config('  tick:\n    cron: "* * * * * *"\n    task: noop\n'
                         "    args: {kind: tick}\n")
    schedulers = [Scheduler(config, dsn) for _ in range(3)]
    threads = [threading.Thread(target=s.run, daemon=True) for s in schedulers]
    for t in threads:
        t.start()
    try:
        # About ten seconds of fires; the bound only guards against a hang.
        wait_for(lambda: len(runs(dsn, "tick")) >= 10, timeout=60, interval=0.2)
    finally:
        for s in schedulers:
            s.request_stop()
        for t in threads:
            t.join(15)
    assert not any(t.is_alive() for t in threads)

    recorded = runs(dsn, "tick")
    times = [r[0] for r in recorded]
    # One job per recorded fire time, each recorded with its job.
    assert job_count(dsn) == len(recorded)
    assert all(job_id is not None for _, job_id in recorded)
    assert len({job_id for _, job_id in recorded}) == len(recorded)
    # No gap between the first and the last fire time: consecutive whole seconds.
    span = int((times[-1] - times[0]).total_seconds())
    assert span + 1 == len(times), times
    assert all(t.microsecond == 0 for t in times)
    with psycopg.connect(dsn, autocommit=True) as conn:
        jobs = conn.execute("SELECT DISTINCT task, queue, args::text, max_attempts"
                            " FROM pgfleet.jobs").fetchall()
    assert jobs == [("noop", "default", '{"kind": "tick"}', 20)]


# ------------------------------------------------------------------ (b) catch-up


def test_downtime_across_five_fire_times_gives_one_catch_up_run(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config('  minutely:\n    cron: "* * * * *"\n    task: report\n'
                         "    queue: reports\n")
    now = db_now(dsn)
    minute = now.replace(second=0, microsecond=0)
    record_run(dsn, "minutely", minute - timedelta(minutes=5))

    caplog.set_level(logging.INFO, logger="pgfleet.cron.scheduler")
    first = Scheduler(config, dsn).tick()
    assert len(first) == 1
    fired = first[0]
    # The latest fire time at or before the database's now (it may have rolled over a
    # minute between the two reads); never one of the older misses.
    assert minute <= fired.fire_time <= db_now(dsn)
    assert fired.fire_time == previous_fire_time("* * * * *", "UTC", fired.fire_time)
    assert fired.fire_time.second == 0 and fired.fire_time.microsecond == 0
    assert any("skipped" in r.getMessage() and "missed" in r.getMessage()
               for r in caplog.records)
    assert scalar(dsn, "SELECT max_attempts FROM pgfleet.jobs WHERE id = %s",
                  (fired.job_id,)) == 7

    # A second pass, of this scheduler or of a restarted one, adds no catch-up run.
    again = Scheduler(config, dsn).tick()
    assert all(f.fire_time > fired.fire_time for f in again)  # only a new minute, if any
    behind = [r for r in runs(dsn, "minutely") if r[0] <= fired.fire_time]
    assert len(behind) == 2  # the row from before the downtime and the catch-up run
    assert job_count(dsn) == 1 + len(again)


# -------------------------------------------------------------- (c) max_delay


def test_a_miss_older_than_max_delay_is_skipped(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A daily time twelve hours away from now: its latest fire is ~12 h old, max_delay 1 h.
    hour = (db_now(dsn).astimezone(UTC).hour + 12) % 24
    config = make_config(f'  daily:\n    cron: "0 {hour} * * *"\n    task: report\n'
                         "    max_delay: 1h\n"
                         f'  never-ran:\n    cron: "0 {hour} * * *"\n    task: report\n')
    record_run(dsn, "daily", db_now(dsn) - timedelta(days=3))
    caplog.set_level(logging.INFO, logger="pgfleet.cron.scheduler")

    assert Scheduler(config, dsn).tick() == []
    assert job_count(dsn) == 0
    assert len(runs(dsn, "daily")) == 1
    assert runs(dsn, "never-ran") == []
    skipped = [r.getMessage() for r in caplog.records if "older than max_delay" in r.getMessage()]
    assert len(skipped) == 1 and "daily" in skipped[0] and "skipped 3 " in skipped[0]


# ---------------------------------------------------------- (d) crash safety


def test_a_crash_between_the_two_writes_leaves_nothing_and_the_next_pass_fires(
    dsn: str,
) -> None:
    config = make_config('  minutely:\n    cron: "* * * * *"\n    task: report\n')

    def crash(schedule: str, fire_time: datetime) -> None:
        raise RuntimeError(f"crash after recording {schedule} at {fire_time}")

    with psycopg.connect(dsn, autocommit=True) as conn:
        # It ran before; the fire times since then are due (a schedule that never ran
        # waits for its next fire time instead).
        conn.execute("INSERT INTO pgfleet.schedule_runs (schedule, fire_time) VALUES"
                     " ('minutely', date_trunc('minute', now()) - interval '2 minutes')")
    seeded = runs(dsn, "minutely")
    scheduler = Scheduler(config, dsn, fire_hook=crash)
    with pytest.raises(RuntimeError, match="crash after recording minutely"):
        scheduler.tick()
    assert runs(dsn, "minutely") == seeded
    assert job_count(dsn) == 0

    # The same process after the "crash", and a replacement process: one run in total.
    scheduler.fire_hook = None
    fired = scheduler.tick()
    assert len(fired) == 1
    again = Scheduler(config, dsn).tick()
    assert all(f.fire_time > fired[0].fire_time for f in again)  # a new minute only
    recorded = [r for r in runs(dsn, "minutely") if r not in seeded]
    assert recorded[0] == (fired[0].fire_time, fired[0].job_id)
    assert job_count(dsn) == len(recorded)


def test_a_killed_connection_mid_loop_reconnects_and_catches_up(dsn: str) -> None:
    config = make_config('  tick:\n    cron: "* * * * * *"\n    task: noop\n')
    scheduler = Scheduler(config, dsn)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(runs(dsn, "tick")) >= 2, timeout=30, interval=0.1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()
        assert killed is not None and killed[0] >= 1
        before = len(runs(dsn, "tick"))
        wait_for(lambda: len(runs(dsn, "tick")) >= before + 3, timeout=30, interval=0.1)
    finally:
        scheduler.request_stop()
        thread.join(15)
    assert not thread.is_alive()
    assert job_count(dsn) == len(runs(dsn, "tick"))


# ------------------------------------------------------- (e) daylight saving


def walk(schedulers: list[tuple[Scheduler, timedelta]], start: datetime,
         end: datetime) -> None:
    """Drive each scheduler's pass with a simulated clock from start to end, each at its
    own step; the inserts and the dedupe are the real ones."""
    due = [start for _ in schedulers]
    while min(due) <= end:
        i = due.index(min(due))
        scheduler, step = schedulers[i]
        scheduler.tick(at=due[i])
        due[i] += step


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        # Spring forward: 02:30 does not exist; it runs once at 03:00 CEST = 01:00 UTC.
        (datetime(2026, 3, 29, 0, 0, tzinfo=UTC), datetime(2026, 3, 29, 2, 0, tzinfo=UTC),
         datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
        # Fall back: 02:30 happens twice; it runs once, at 02:30 CEST = 00:30 UTC.
        (datetime(2026, 10, 25, 0, 0, tzinfo=UTC), datetime(2026, 10, 25, 2, 0, tzinfo=UTC),
         datetime(2026, 10, 25, 0, 30, tzinfo=UTC)),
    ],
)
def test_daylight_saving_days_run_a_berlin_0230_schedule_once(
    dsn: str, start: datetime, end: datetime, expected: datetime
) -> None:
    config = make_config('  berlin:\n    cron: "30 2 * * *"\n    timezone: Europe/Berlin\n'
                         "    task: report\n")
    # One scheduler passes every 10 s (the continuous path), one every 7 minutes (each
    # pass a catch-up), a third passes again over the whole day afterwards.
    walk([(Scheduler(config, dsn), timedelta(seconds=10)),
          (Scheduler(config, dsn), timedelta(minutes=7))], start, end)
    walk([(Scheduler(config, dsn), timedelta(minutes=1))], start, end)
    assert [r[0] for r in runs(dsn, "berlin")] == [expected]
    assert job_count(dsn) == 1
    # The cron layer agrees with what the database recorded.
    assert fire_times_after("30 2 * * *", "Europe/Berlin", start, 1) == [expected]


# ------------------------------------------------------------- (f) cron list


def write_config(tmp_path: Path, schedules: str) -> Path:
    path = tmp_path / "pgfleet.yaml"
    path.write_text(config_text(schedules))
    return path


def pgfleet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfleet", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=ROOT)


BERLIN = ('  nightly:\n    cron: "30 2 * * *"\n    timezone: Europe/Berlin\n'
          "    task: report\n"
          '  minutely:\n    cron: "* * * * *"\n    task: report\n    enabled: false\n')


def test_cron_list_json_shows_next_fires_and_last_run(dsn: str, tmp_path: Path) -> None:
    path = write_config(tmp_path, BERLIN)
    config = parse_config_text(path.read_text())
    with psycopg.connect(dsn, autocommit=True) as conn:
        fired = Scheduler(config, dsn).fire(conn, "nightly", config.schedules["nightly"],
                                            datetime(2026, 3, 29, 1, 0, tzinfo=UTC))
        assert fired is not None
        conn.execute("UPDATE pgfleet.jobs SET state = 'dead' WHERE id = %s", (fired.job_id,))

    result = pgfleet("cron", "list", "-c", str(path), "--json")
    assert result.returncode == 0, result.stderr
    entries = {e["name"]: e for e in json.loads(result.stdout)}
    nightly = entries["nightly"]
    assert nightly["timezone"] == "Europe/Berlin" and nightly["enabled"] is True
    assert len(nightly["next"]) == 3
    for nxt in nightly["next"]:
        local = datetime.fromisoformat(nxt["local"])
        utc = datetime.fromisoformat(nxt["utc"].replace("Z", "+00:00"))
        assert local == utc and local.utcoffset() in (timedelta(hours=1), timedelta(hours=2))
        assert utc.utcoffset() == timedelta(0)
    assert nightly["last_run"] == {
        "fire_time_local": "2026-03-29T03:00:00+02:00",
        "fire_time_utc": "2026-03-29T01:00:00Z",
        "job_id": fired.job_id,
        "job_state": "dead",
    }
    assert entries["minutely"]["enabled"] is False
    assert entries["minutely"]["next"] == []
    assert entries["minutely"]["last_run"] is None
    assert entries["minutely"]["last_run_known"] is True


def test_cron_list_without_a_database(tmp_path: Path) -> None:
    path = write_config(tmp_path, BERLIN)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGFLEET_DATABASE_URL", "DATABASE_URL")}
    result = pgfleet("cron", "list", "-c", str(path), env=env)
    assert result.returncode == 0, result.stderr
    assert "nightly (enabled)" in result.stdout
    assert "last run: unknown (no database)" in result.stdout
    assert "(2026" in result.stdout or "Z)" in result.stdout  # the UTC column


def test_cron_list_bad_config_exits_2_with_one_line_per_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, '  bad:\n    cron: "60 * * * *"\n    task: report\n'
                                  '  worse:\n    cron: "* * * * *"\n    timezone: Mars/Base\n'
                                  "    task: report\n")
    result = pgfleet("cron", "list", "-c", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert any("bad" in line for line in lines) and any("worse" in line for line in lines)
    assert result.stdout == ""


def test_cron_list_names_an_unreachable_database_in_one_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, BERLIN)
    result = pgfleet("--database-url", "postgresql://u:sekret@127.0.0.1:1/x",
                     "cron", "list", "-c", str(path))
    assert result.returncode == 1
    assert "sekret" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

