"""The `pgfleet` command line: each command parses, loads and calls one function."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import wraps
from typing import Any, NoReturn

import click
import psycopg

from pgfleet import __version__, client, logs, migrations, store
from pgfleet.config import Config, ConfigError, config_json_schema, load_config
from pgfleet.db import connect, resolve_dsn, scrub
from pgfleet.errors import PgfleetError

EXIT_USAGE = 2
EXIT_FAILURE = 1
_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DELAY_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    click.echo(f"pgfleet: error: {message}", err=True)
    sys.exit(code)


def friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn expected failures into one line on stderr and a non-zero exit."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        dsn = ctx.find_root().obj.get("dsn") if ctx.find_root().obj else None
        try:
            return fn(*args, **kwargs)
        except PgfleetError as exc:
            fail(scrub(str(exc), dsn))
        except psycopg.Error as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            fail(f"database error: {scrub(text, dsn)}")

    return wrapper


def need_dsn() -> str:
    dsn: str | None = click.get_current_context().find_root().obj.get("dsn")
    if not dsn:
        fail("no database URL: pass --database-url or set PGFLEET_DATABASE_URL", EXIT_USAGE)
    return dsn


@contextmanager
def database() -> Iterator[psycopg.Connection[Any]]:
    with connect(need_dsn(), autocommit=True) as conn:
        yield conn


def emit(data: Any, as_json: bool, text: Callable[[], None]) -> None:
    if as_json:
        click.echo(json.dumps(data, default=str, indent=2))
    else:
        text()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pgfleet")
@click.option("--database-url", metavar="URL",
              help="PostgreSQL URL (default: $PGFLEET_DATABASE_URL, then $DATABASE_URL).")
@click.option("--log-format", type=click.Choice(["plain", "json"]), default="plain",
              show_default=True, help="Log line format.")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, log_format: str) -> None:
    """pgfleet: background jobs on PostgreSQL alone."""
    logs.setup(log_format)
    ctx.ensure_object(dict)
    ctx.obj["dsn"] = resolve_dsn(database_url)
    ctx.obj["explicit_dsn"] = database_url
    ctx.obj["log_format"] = log_format


@cli.command()
@click.option("--target", type=int, help="Stop at this version (default: the latest).")
@friendly
def migrate(target: int | None) -> None:
    """Create or upgrade the pgfleet schema. Safe to run again, and from many hosts."""
    version, applied = migrations.migrate(need_dsn(), target)
    for m in applied:
        click.echo(f"applied {m.version:04d}_{m.name}")
    click.echo(f"schema version {version}")


def parse_delay(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    match = _DELAY.match(value)
    if not match:
        raise click.BadParameter("expected a duration like 10s, 5m, 1h or 250ms")
    return float(match[1]) * _DELAY_UNITS[match[2]]


@cli.command()
@click.argument("task")
@click.option("--args", "args_text", default="{}", show_default=True,
              help="The job's arguments as a JSON object.")
@click.option("--queue", default=client.DEFAULT_QUEUE, show_default=True)
@click.option("--priority", type=int, default=0, show_default=True,
              help="Lower runs first (-1000..1000).")
@click.option("--delay", callback=parse_delay, help="Run after this long, e.g. 10s, 5m.")
@click.option("--run-at", help="Run at this ISO-8601 time (with a UTC offset).")
@click.option("--max-attempts", type=int)
@click.option("--unique-key", help="Add nothing if an unfinished job holds this key.")
@friendly
def enqueue(task: str, args_text: str, queue: str, priority: int, delay: float | None,
            run_at: str | None, max_attempts: int | None, unique_key: str | None) -> None:
    """Add a job and print its id."""
    try:
        args = json.loads(args_text)
    except json.JSONDecodeError as exc:
        fail(f"--args: not valid JSON: {exc}", EXIT_USAGE)
    when = None
    if run_at is not None:
        try:
            when = datetime.fromisoformat(run_at)
        except ValueError:
            fail(f"--run-at: {run_at!r} is not an ISO-8601 time", EXIT_USAGE)
    with database() as conn:
        job_id = client.enqueue(
            conn, task, args, queue=queue, priority=priority,
            delay=delay, run_at=when,
            max_attempts=max_attempts, unique_key=unique_key,
        )
    click.echo(job_id)


@cli.command()
@click.option("--queue", "queue_name", required=True, help="The queue to work.")
@click.option("--tasks", "modules", required=True, multiple=True,
              help="Module whose @task functions may run (repeatable).")
@click.option("--threads", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--poll-interval", type=float, default=1.0, show_default=True,
              help="Seconds between polls.")
@click.option("--no-notify", is_flag=True, help="Poll only; do not LISTEN.")
@click.option("--timeout", type=float, default=1800.0, show_default=True,
              help="Seconds a job may run.")
@friendly
def worker(queue_name: str, modules: tuple[str, ...], threads: int, poll_interval: float,
           no_notify: bool, timeout: float) -> None:
    """Run one worker process in the foreground (the supervisor forks these)."""
    from pgfleet.tasks import load_registry
    from pgfleet.worker import Worker, WorkerSettings

    sys.path.insert(0, "")
    registry = load_registry(modules)
    w = Worker(WorkerSettings(
        dsn=need_dsn(), queue=queue_name, registry=registry, threads=threads,
        poll_interval=poll_interval, notify=not no_notify, timeout=timeout,
    ))
    w.install_signal_handlers()
    sys.exit(w.run())


# ---- jobs ------------------------------------------------------------------------------

@cli.group()
def jobs() -> None:
    """List, show, retry and cancel jobs."""


@jobs.command("list")
@click.option("--queue")
@click.option("--state", type=click.Choice(["queued", "running", "succeeded", "dead",
                                            "cancelled"]))
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@friendly
def jobs_list(queue: str | None, state: str | None, limit: int, as_json: bool) -> None:
    """The newest jobs, optionally of one queue or state."""
    with database() as conn:
        rows = store.list_jobs(conn, queue=queue, state=state, limit=limit)

    def table() -> None:
        click.echo(f"{'ID':>10}  {'QUEUE':<14} {'STATE':<10} {'ATTEMPT':>7}  TASK")
        for r in rows:
            click.echo(f"{r['id']:>10}  {r['queue'][:14]:<14} {r['state']:<10} "
                       f"{r['attempt']:>3}/{r['max_attempts']:<3}  {r['task']}")

    emit(rows, as_json, table)


@jobs.command("show")
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@friendly
def jobs_show(job_id: int, as_json: bool) -> None:
    """Everything about one job, errors included."""
    with database() as conn:
        job = store.get_job(conn, job_id)
    if job is None:
        fail(f"no job with id {job_id}")

    def text() -> None:
        for key, value in job.items():
            if key == "errors":
                for entry in value:
                    click.echo(f"error (attempt {entry['attempt']}): "
                               f"{entry['error'].splitlines()[0] if entry['error'] else ''}")
            else:
                click.echo(f"{key}: {value}")

    emit(job, as_json, text)


@jobs.command("retry")
@click.argument("job_id", type=int, required=False)
@click.option("--queue", help="Retry every dead job of this queue.")
@friendly
def jobs_retry(job_id: int | None, queue: str | None) -> None:
    """Run a dead (or cancelled) job again, or every dead job of --queue."""
    if (job_id is None) == (queue is None):
        fail("give a JOB_ID or --queue, not both", EXIT_USAGE)
    with database() as conn:
        if job_id is not None:
            if store.retry_job(conn, job_id) is None:
                fail(f"job {job_id} is not dead or cancelled (or does not exist)")
            click.echo(f"job {job_id} queued again")
        else:
            assert queue is not None
            ids = store.retry_dead_of_queue(conn, queue)
            click.echo(f"{len(ids)} dead job(s) of queue {queue!r} queued again")


@jobs.command("cancel")
@click.argument("job_id", type=int)
@friendly
def jobs_cancel(job_id: int) -> None:
    """Cancel a job that is still waiting."""
    with database() as conn:
        if not store.cancel_job(conn, job_id):
            fail(f"job {job_id} is not waiting (or does not exist); only queued jobs cancel")
    click.echo(f"job {job_id} cancelled")


# ---- queues ----------------------------------------------------------------------------

@cli.group()
def queues() -> None:
    """Pause and resume queues (on every host)."""


@queues.command("pause")
@click.argument("queue")
@friendly
def queues_pause(queue: str) -> None:
    """Stop claiming from QUEUE everywhere; running jobs finish."""
    with database() as conn:
        store.set_paused(conn, queue, True)
    click.echo(f"queue {queue!r} paused")


@queues.command("resume")
@click.argument("queue")
@friendly
def queues_resume(queue: str) -> None:
    """Claim from QUEUE again."""
    with database() as conn:
        store.set_paused(conn, queue, False)
    click.echo(f"queue {queue!r} resumed")


def main() -> None:
    """Console entry point: click's usage errors become one line and exit status 2."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        fail("aborted", 130)
    except click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        where = f" ({ctx.command_path})" if ctx is not None else ""
        fail(f"{exc.format_message()}{where}", EXIT_USAGE)
    except SystemExit:
        raise
    sys.exit(0)


# ---- configuration and the supervisor ------------------------------------------------

def load_or_exit(path: str) -> Config:
    """Validate the file; on any problem print every one and exit 2, before anything
    is forked or connected."""
    from pgfleet.preflight import missing_modules

    try:
        config = load_config(path)
    except ConfigError as exc:
        for line in exc.errors:
            click.echo(scrub(line, None), err=True)
        sys.exit(EXIT_USAGE)
    sys.path.insert(0, os.getcwd())
    report(missing_modules(config), [])
    return config


def report(problems: list[str], warnings: list[str]) -> None:
    """Print warnings; print every problem and exit 2 if there is any."""
    for line in warnings:
        click.echo(f"warning: {line}", err=True)
    for line in problems:
        click.echo(line, err=True)
    if problems:
        sys.exit(EXIT_USAGE)


# The -c option of every command that reads pgfleet.yaml.
config_option = click.option("-c", "--config", "path", required=True,
                             type=click.Path(dir_okay=False), help="The pgfleet.yaml file.")


def config_dsn(config: Config) -> str | None:
    root = click.get_current_context().find_root().obj
    return root.get("explicit_dsn") or config.database_url or root.get("dsn")


@cli.command()
@config_option
@friendly
def check(path: str) -> None:
    """Validate a config file as `run` would, and check the connection budget."""
    from pgfleet.preflight import unregistered_schedule_tasks

    config = load_or_exit(path)
    report(*unregistered_schedule_tasks(config))
    needed = connection_budget(config)
    dsn = config_dsn(config)
    if dsn:
        with connect(dsn, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT current_setting('max_connections')::int"
                " - current_setting('superuser_reserved_connections')::int").fetchone()
        available = int(row[0]) if row else 0
        if needed > available:
            click.echo(f"warning: this host alone needs {needed} connections; the server "
                       f"allows {available} (max_connections less reserved ones)", err=True)
    click.echo(f"{path}: ok ({len(config.queues)} queue(s), {len(config.schedules)} "
               f"schedule(s), {needed} database connection(s) per host)")


def connection_budget(config: Config) -> int:
    """Connections one host opens: per worker process one, plus one to LISTEN when
    notifications are on; maintenance, scheduler and exporter one each."""
    per_worker = 2 if config.notify else 1
    workers = sum(q.processes for q in config.queues.values())
    helpers = 1 + (1 if config.schedules else 0) + (1 if config.metrics.enabled else 0)
    return workers * per_worker + helpers


@cli.command("config-schema")
def config_schema() -> None:
    """Print the JSON Schema of pgfleet.yaml."""
    click.echo(json.dumps(config_json_schema(), indent=2))


@cli.command()
@config_option
@friendly
def run(path: str) -> None:
    """Run the supervisor of this host: workers, maintenance, scheduler, exporter."""
    from pgfleet.preflight import check_in_child

    config = load_or_exit(path)
    dsn = config_dsn(config)
    if not dsn:
        fail("no database URL: set database_url in the file, pass --database-url or set "
             "PGFLEET_DATABASE_URL", EXIT_USAGE)
    report(*check_in_child(config))
    metrics_dir = fresh_metrics_dir()
    try:
        # Imported only now: prometheus-client reads PROMETHEUS_MULTIPROC_DIR at import.
        from pgfleet.supervisor import Supervisor

        code = Supervisor(path, config, dsn).run()
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    sys.exit(code)


def fresh_metrics_dir() -> str:
    """A per-boot directory for prometheus-client's multiprocess files, so counters of a
    previous run never leak into this one."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        shutil.rmtree(given, ignore_errors=True)
        os.makedirs(given, exist_ok=True)
        path = given
    else:
        path = tempfile.mkdtemp(prefix="pgfleet-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def _register_commands() -> None:
    """Commands that live in their own modules, beside what they show."""
    from pgfleet.cron_commands import cron
    from pgfleet.dev_command import dev
    from pgfleet.grants_command import grants
    from pgfleet.status import status

    cli.add_command(status)
    cli.add_command(cron)
    cli.add_command(dev)
    cli.add_command(grants)


_register_commands()
