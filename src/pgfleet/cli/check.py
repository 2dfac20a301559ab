"""`pgfleet check` and `pgfleet config-schema`: the configuration file, before a start."""

from __future__ import annotations

import json

import click

from pgfleet.cli.common import (
    config_dsn,
    connect_cli,
    friendly,
    global_options,
    load_or_exit,
    report,
    required_config_path,
    warn,
)
from pgfleet.cli.preflight import import_problems, unregistered_schedule_tasks, web_problems
from pgfleet.config import Config, config_json_schema

# The web UI's connection pool holds at most this many (pgfleet.web.app.create_pool).
WEB_POOL_SIZE = 4


@click.command()
@global_options
@friendly
def check() -> None:
    """Validate a config file as `run` would, and check the connection budget."""
    path = required_config_path()
    config = load_or_exit(path)
    # `run` would give up on the queues of a module that cannot be imported.
    report(import_problems(config), [])
    report(*unregistered_schedule_tasks(config))
    needed = connection_budget(config)
    dsn = config_dsn(config)
    report(web_problems(config, dsn or ""), [])
    if dsn:
        with connect_cli(dsn, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT current_setting('max_connections')::int"
                " - current_setting('superuser_reserved_connections')::int").fetchone()
        available = int(row[0]) if row else 0
        if needed > available:
            warn(f"this host alone needs {needed} connections; the server "
                 f"allows {available} (max_connections less reserved ones)")
    click.echo(f"{path}: ok ({len(config.queues)} queue(s), {len(config.schedules)} "
               f"schedule(s), {needed} database connection(s) per host)")


def connection_budget(config: Config) -> int:
    """Connections one host opens: per worker process one, plus one to LISTEN when
    notifications are on; maintenance, scheduler and exporter one each; the web UI up
    to its pool's size."""
    per_worker = 2 if config.notify else 1
    workers = sum(q.processes for q in config.queues.values())
    helpers = 2 + (1 if config.metrics.enabled else 0)  # maintenance and the scheduler
    web = WEB_POOL_SIZE if config.web.enabled else 0
    return workers * per_worker + helpers + web


@click.command("config-schema")
def config_schema() -> None:
    """Print the JSON Schema of pgfleet.yaml."""
    click.echo(json.dumps(config_json_schema(), indent=2))
