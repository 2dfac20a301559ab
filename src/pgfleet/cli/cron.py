"""`pgfleet cron`: what the schedules will do next and what they last did, and the
schedules kept in the database (added, paused, resumed, run or removed at runtime)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import click
from pydantic import ValidationError

from pgfleet.cli.common import (
    EXIT_USAGE,
    config_dsn,
    connect_cli,
    database,
    emit,
    fail,
    friendly,
    given_config,
    global_options,
    json_option,
)
from pgfleet.config import ScheduleConfig
from pgfleet.core.crontab import fire_times_after
from pgfleet.sql import fleet as fleet_store, store
from pgfleet.sql.rows import ScheduleHolderRow, ScheduleRow

NEXT_COUNT = 3


@click.group()
def cron() -> None:
    """The cron schedules: of a config file and of the database."""


@cron.command("list")
@json_option
@global_options
@friendly
def cron_list(as_json: bool) -> None:
    """Each schedule with its next three fire times (in its zone and in UTC), its last
    run and the state of that run's job, whether it is paused, and the hosts whose config
    disagrees with the definition that fires. Reads the file given with -c, the database,
    or both."""
    config = given_config()
    dsn = config_dsn(config)
    if config is None and not dsn:
        fail("give -c/--config (the pgfleet.yaml file) or a database URL", EXIT_USAGE)
    own = {name: s.definition() for name, s in (config.schedules.items() if config else ())}
    rows: dict[str, ScheduleRow] = {}
    holders: list[ScheduleHolderRow] = []
    last_runs: dict[str, store.ScheduleLastRun] | None = None
    now = datetime.now(UTC)
    if dsn:
        with connect_cli(dsn) as conn:
            now = fleet_store.db_now(conn)
            rows = {row.name: row for row in fleet_store.schedules_all(conn)}
            holders = fleet_store.schedule_live_holders(conn)
            names = sorted(set(own) | set(rows))
            last_runs = fleet_store.schedule_last_run_jobs(conn, names)
    names = list(own) + sorted(set(rows) - set(own))
    entries = [_entry(name, own.get(name), rows.get(name), holders, now, last_runs)
               for name in names]
    emit(entries, as_json, _print_table)


def _entry(name: str, mine: dict[str, Any] | None, row: ScheduleRow | None,
           holders: list[ScheduleHolderRow], now: datetime,
           last_runs: dict[str, store.ScheduleLastRun] | None) -> dict[str, Any]:
    # What fires is the database's definition once a scheduler published it.
    shown = row.definition if row is not None else mine
    assert shown is not None
    entry: dict[str, Any] = {
        "name": name,
        "source": row.source if row is not None else "config",
        "published": row is not None,
        "paused": row.paused if row is not None else False,
        "cron": shown.get("cron"),
        "timezone": shown.get("timezone", "UTC"),
        "enabled": bool(shown.get("enabled", True)),
        "task": shown.get("task"),
        "queue": shown.get("queue", "default"),
        "max_delay_seconds": shown.get("max_delay"),
        "problem": None,
        "next": [],
        "this_config_differs": mine is not None and row is not None and mine != row.definition,
        "schedulers": sum(1 for h in holders if h.name == name),
        # Live schedulers whose config defines this name otherwise: they fire the
        # published definition, and log an error saying so.
        "disagreeing": [
            {"host": h.host, "scheduler": h.holder, "cron": h.definition.get("cron"),
             "timezone": h.definition.get("timezone"), "definition": h.definition}
            for h in holders
            if row is not None and h.name == name and h.definition != row.definition],
        "last_run_known": last_runs is not None,
        "last_run": None,
    }
    try:
        schedule = ScheduleConfig.model_validate(shown)
    except ValidationError as exc:
        entry["problem"] = "; ".join(e["msg"] for e in exc.errors())
        schedule = None
    zone = ZoneInfo(schedule.timezone) if schedule is not None else UTC
    if schedule is not None and schedule.enabled and not entry["paused"]:
        entry["next"] = [{"local": t.astimezone(zone).isoformat(), "utc": _utc(t)}
                         for t in fire_times_after(schedule.cron, schedule.timezone, now,
                                                   NEXT_COUNT)]
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
        if entry["paused"]:
            state += ", paused"
        if entry["source"] == "runtime":
            state += ", added at runtime"
        click.echo(f"{entry['name']} ({state})")
        click.echo(f"  cron: {entry['cron']}  timezone: {entry['timezone']}  "
                   f"task: {entry['task']}  queue: {entry['queue']}")
        if entry["problem"]:
            click.echo(f"  refused: {entry['problem']}")
        if entry["this_config_differs"]:
            click.echo("  this file's definition differs from the published one above,"
                       " which is the one that fires")
        for other in entry["disagreeing"]:
            same_time = (other["cron"], other["timezone"]) == (entry["cron"], entry["timezone"])
            click.echo(f"  DISAGREES: host {other['host']} (scheduler {other['scheduler']})"
                       f" has cron: {other['cron']}  timezone: {other['timezone']}"
                       + (" (other fields differ)" if same_time else ""))
        if not entry["next"]:
            reason = ("disabled" if not entry["enabled"] else
                      "paused" if entry["paused"] else "")
            click.echo(f"  next: none ({reason})" if reason else "  next: none")
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


@cron.command("add")
@click.argument("name")
@click.option("--cron", "expression", required=True,
              help="Five fields, six with seconds first, or an alias like @daily.")
@click.option("--task", required=True, help="Registered task name.")
@click.option("--args", "args_json", default="{}", show_default=True,
              help="JSON object of arguments.")
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--queue", default="default", show_default=True)
@click.option("--priority", default=0, show_default=True, type=int, help="Lower runs first.")
@click.option("--max-delay", default="1h", show_default=True,
              help="How late a missed fire may still run (e.g. 10m).")
@global_options
@friendly
def cron_add(name: str, expression: str, task: str, args_json: str, timezone: str,
             queue: str, priority: int, max_delay: str) -> None:
    """Add schedule NAME to the database: every host's scheduler fires it, once per fire
    time, and it survives reloads and restarts."""
    try:
        args = json.loads(args_json)
    except json.JSONDecodeError as exc:
        fail(f"--args is not JSON: {exc}", EXIT_USAGE)
    try:
        schedule = ScheduleConfig.model_validate({
            "cron": expression, "task": task, "args": args, "timezone": timezone,
            "queue": queue, "priority": priority, "max_delay": max_delay})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        option = {"cron": "--cron", "max_delay": "--max-delay"}.get(where, f"--{where}")
        fail(f"{option}: {first['msg']}", EXIT_USAGE)
    with database() as conn:
        fleet_store.schedule_add(conn, name=name, cron=schedule.cron, task=schedule.task,
                                 args=schedule.args, timezone=schedule.timezone,
                                 queue=schedule.queue, priority=schedule.priority,
                                 max_delay=schedule.max_delay)
        upcoming = fire_times_after(schedule.cron, schedule.timezone,
                                    fleet_store.db_now(conn), 1)
    nxt = f"; next fire {_utc(upcoming[0])}" if upcoming else ""
    click.echo(f"schedule {name!r} added{nxt}")


@cron.command("pause")
@click.argument("name")
@global_options
@friendly
def cron_pause(name: str) -> None:
    """Stop NAME firing on every host (a config schedule or a runtime one)."""
    with database() as conn:
        fleet_store.schedule_pause(conn, name, True)
    click.echo(f"schedule {name!r} paused")


@cron.command("resume")
@click.argument("name")
@global_options
@friendly
def cron_resume(name: str) -> None:
    """Let NAME fire again from its next fire time."""
    with database() as conn:
        fleet_store.schedule_pause(conn, name, False)
    click.echo(f"schedule {name!r} resumed")


@cron.command("run-now")
@click.argument("name")
@global_options
@friendly
def cron_run_now(name: str) -> None:
    """Enqueue NAME's job now, once, outside its fire times."""
    with database() as conn:
        job_id = fleet_store.schedule_run_now(conn, name)
    click.echo(f"schedule {name!r}: job {job_id} enqueued")


@cron.command("remove")
@click.argument("name")
@global_options
@friendly
def cron_remove(name: str) -> None:
    """Remove NAME, a schedule added at runtime (its past runs stay recorded)."""
    with database() as conn:
        fleet_store.schedule_remove(conn, name)
    click.echo(f"schedule {name!r} removed")
