"""`pgfleet cron`: what the schedules of a config file will do next and what they last did."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import click

from pgfleet.cli.common import (
    config_dsn,
    connect_cli,
    emit,
    friendly,
    global_options,
    json_option,
    load_or_exit,
    required_config_path,
)
from pgfleet.config import Config
from pgfleet.core.crontab import fire_times_after
from pgfleet.sql import fleet as fleet_store, store

NEXT_COUNT = 3


@click.group()
def cron() -> None:
    """Inspect the cron schedules of a config file."""


@cron.command("list")
@json_option
@global_options
@friendly
def cron_list(as_json: bool) -> None:
    """Each schedule with its next three fire times (in its zone and in UTC), its last
    run and the state of that run's job."""
    config = load_or_exit(required_config_path(), check_modules=False)
    dsn = config_dsn(config)
    names = list(config.schedules)
    last_runs: dict[str, store.ScheduleLastRun] | None = None
    now = datetime.now(UTC)
    if dsn and names:
        with connect_cli(dsn) as conn:
            now = fleet_store.db_now(conn)
            last_runs = fleet_store.schedule_last_run_jobs(conn, names)
    entries = [_entry(name, config, now, last_runs) for name in names]
    emit(entries, as_json, _print_table)


def _entry(name: str, config: Config, now: datetime,
           last_runs: dict[str, store.ScheduleLastRun] | None) -> dict[str, Any]:
    schedule = config.schedules[name]
    zone = ZoneInfo(schedule.timezone)
    upcoming = (fire_times_after(schedule.cron, schedule.timezone, now, NEXT_COUNT)
                if schedule.enabled else [])
    entry: dict[str, Any] = {
        "name": name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "enabled": schedule.enabled,
        "task": schedule.task,
        "queue": schedule.queue,
        "max_delay_seconds": schedule.max_delay,
        "next": [{"local": t.astimezone(zone).isoformat(), "utc": _utc(t)} for t in upcoming],
        "last_run_known": last_runs is not None,
        "last_run": None,
    }
    run = last_runs.get(name) if last_runs is not None else None
    if run is not None and run.fire_time is not None:
        entry["last_run"] = {
            "fire_time_local": run.fire_time.astimezone(zone).isoformat(),
            "fire_time_utc": _utc(run.fire_time),
            "job_id": run.job_id,
            # A job pruned after its retention period leaves its run record behind.
            "job_state": run.state if run.state is not None else "pruned",
        }
    return entry


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _print_table(entries: list[dict[str, Any]]) -> None:
    if not entries:
        click.echo("no schedules")
    for entry in entries:
        state = "enabled" if entry["enabled"] else "disabled"
        click.echo(f"{entry['name']} ({state})")
        click.echo(f"  cron: {entry['cron']}  timezone: {entry['timezone']}  "
                   f"task: {entry['task']}  queue: {entry['queue']}")
        if not entry["next"]:
            click.echo("  next: none (disabled)" if not entry["enabled"] else "  next: none")
        for i, nxt in enumerate(entry["next"]):
            label = "  next:" if i == 0 else "       "
            click.echo(f"{label} {nxt['local']}  ({nxt['utc']})")
        last = entry["last_run"]
        if not entry["last_run_known"]:
            click.echo("  last run: unknown (no database)")
        elif last is None:
            click.echo("  last run: never")
        else:
            click.echo(f"  last run: {last['fire_time_local']}  ({last['fire_time_utc']}), "
                       f"job {last['job_id']}: {last['job_state']}")
