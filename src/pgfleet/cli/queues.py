"""`pgfleet queues`: pause and resume queues on every host."""

from __future__ import annotations

import click

from pgfleet.cli.common import database, friendly, global_options, warn_unknown_queue
from pgfleet.sql import store


@click.group()
def queues() -> None:
    """Pause and resume queues (on every host)."""


@queues.command("pause")
@click.argument("queue")
@global_options
def queues_pause(queue: str) -> None:
    """Stop claiming from QUEUE everywhere; running jobs finish."""
    set_paused(queue, True)


@queues.command("resume")
@click.argument("queue")
@global_options
def queues_resume(queue: str) -> None:
    """Claim from QUEUE again."""
    set_paused(queue, False)


@friendly
def set_paused(queue: str, paused: bool) -> None:
    with database() as conn:
        warn_unknown_queue(conn, queue)
        store.set_paused(conn, queue, paused)
    click.echo(f"queue {queue!r} {'paused' if paused else 'resumed'}")
