"""`pgfleet enqueue`: add one job from the command line."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import click

from pgfleet.cli.common import (
    EXIT_USAGE,
    database,
    fail,
    friendly,
    global_options,
    warn_unknown_queue,
)
from pgfleet.client import enqueue as client

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
@click.option("--queue", help="Default: the task's configured queue, else 'default'.")
@click.option("--priority", type=int, default=0, show_default=True,
              help="Lower runs first (-1000..1000).")
@click.option("--delay", callback=parse_delay, help="Run after this long, e.g. 10s, 5m.")
@click.option("--run-at", help="Run at this ISO-8601 time (with a UTC offset).")
@click.option("--max-attempts", type=int,
              help="Default: the task's, else its queue's configured value, else 20.")
@click.option("--unique-key",
              help="Add nothing if an unfinished job of this task holds this key.")
@click.option("--meta", "meta_text", help="A JSON object stored with the job.")
@click.option("--concurrency-key", help="The key that per-key concurrency limits count by.")
@global_options
@friendly
def enqueue(task: str, args_text: str, queue: str | None, priority: int, delay: float | None,
            run_at: str | None, max_attempts: int | None, unique_key: str | None,
            meta_text: str | None, concurrency_key: str | None) -> None:
    """Add a job and print its id.

    When an unfinished job of the task already holds --unique-key, nothing is added: its
    id is printed and a note goes to stderr."""
    args = _json_option("--args", args_text)
    meta = _json_option("--meta", meta_text) if meta_text is not None else None
    when = None
    if run_at is not None:
        try:
            when = datetime.fromisoformat(run_at)
        except ValueError:
            fail(f"--run-at: {run_at!r} is not an ISO-8601 time", EXIT_USAGE)
    with database() as conn:
        if queue is not None:
            warn_unknown_queue(conn, queue)
        done = client.enqueue_job(
            conn, task, args, queue=queue, priority=priority,
            delay=delay, run_at=when, max_attempts=max_attempts, unique_key=unique_key,
            meta=meta, concurrency_key=concurrency_key,
        )
    if not done.created:
        click.echo(f"job {done.job_id} already holds unique key {unique_key!r}: nothing "
                   "added", err=True)
    click.echo(done.job_id)


def _json_option(option: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{option}: not valid JSON: {exc}", EXIT_USAGE)
