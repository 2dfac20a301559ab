"""`pgfleet status`: queues and the processes of every host, read from the database."""

from __future__ import annotations

import click

from pgfleet.cli.common import database, emit, friendly, global_options, json_option
from pgfleet.status.fleet import gather, render


@click.command("status")
@json_option
@global_options
@friendly
def status(as_json: bool) -> None:
    """Queues (waiting, scheduled, running, dead, oldest wait), flow-control limits and
    their use, and every host's processes."""
    with database() as conn:
        data = gather(conn)
    emit(data, as_json, lambda escaped: click.echo(render(escaped), nl=False))
