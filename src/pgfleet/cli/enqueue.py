"""`pgfleet enqueue`: add one job from the command line."""

from __future__ import annotations

import json
import re
from datetime import datetime

import click
from click.core import ParameterSource

from pgfleet import client
from pgfleet.cli.common import (
    EXIT_USAGE,
    database,
    fail,
    friendly,
    global_options,
    warn_unknown_queue,
)

_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DELAY_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_delay(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    match = _DELAY.match(value)
    if not match:
        raise click.BadParameter("expected a duration like 10s, 5m, 1h or 250ms")
    return float(match[1]) * _DELAY_UNITS[match[2]]


@click.command()
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
@global_options
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
    queue_given = (click.get_current_context().get_parameter_source("queue")
                   is ParameterSource.COMMANDLINE)
    with database() as conn:
        if queue_given:
            warn_unknown_queue(conn, queue)
        job_id = client.enqueue(
            conn, task, args, queue=queue, priority=priority,
            delay=delay, run_at=when,
            max_attempts=max_attempts, unique_key=unique_key,
        )
    click.echo(job_id)
