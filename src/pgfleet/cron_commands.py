"""`pgfleet cron`: what the schedules of a config file will do next and what they last did."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any, NoReturn
from zoneinfo import ZoneInfo

import click
import psycopg

from pgfleet import store
from pgfleet.config import Config, ConfigError, load_config
from pgfleet.cron import fire_times_after
from pgfleet.db import connect, resolve_dsn, scrub
from pgfleet.errors import PgfleetError

EXIT_USAGE = 2
EXIT_FAILURE = 1
NEXT_COUNT = 3


def _fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    click.echo(f"pgfleet: error: {message}", err=True)
    sys.exit(code)


def _dsn(config: Config, option: str | None) -> str | None:
    """As `pgfleet run`: a URL given on the command line, then the file's, then the
    environment's."""
    root = click.get_current_context().find_root().obj or {}
    return (option or root.get("explicit_dsn") or config.database_url or root.get("dsn")
            or resolve_dsn(None))


@click.group()
def cron() -> None:
    """Inspect the cron schedules of a config file."""


@cron.command("list")
@click.option("-c", "--config", "path", required=True, type=click.Path(dir_okay=False),
              help="The pgfleet.yaml file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--database-url", metavar="URL",
              help="PostgreSQL URL (default: the file's, then $PGFLEET_DATABASE_URL).")
def cron_list(path: str, as_json: bool, database_url: str | None) -> None:
    """Each schedule with its next three fire times (in its zone and in UTC), its last
    run and the state of that run's job."""
    try:
        config = load_config(path)
    except ConfigError as exc:
        for line in exc.errors:
            click.echo(line, err=True)
        sys.exit(EXIT_USAGE)
    dsn = _dsn(config, database_url)
    names = list(config.schedules)
    last_runs: dict[str, store.ScheduleLastRun] | None = None
    now = datetime.now(UTC)
    if dsn and names:
        try:
            with connect(dsn, autocommit=True) as conn:
                now = store.db_now(conn)
                last_runs = store.schedule_last_run_jobs(conn, names)
        except PgfleetError as exc:
            _fail(scrub(str(exc), dsn))
        except psycopg.Error as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            _fail(f"database error: {scrub(text, dsn)}")
    entries = [_entry(name, config, now, last_runs) for name in names]
    if as_json:
        click.echo(json.dumps(entries, indent=2))
    else:
        _print_table(entries)


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
