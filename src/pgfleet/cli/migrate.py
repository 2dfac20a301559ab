"""`pgfleet migrate`: create or upgrade the schema."""

from __future__ import annotations

import click

from pgfleet.cli.common import chosen_dsn, friendly, global_options
from pgfleet.sql import migrate as migrations


@click.command()
@click.option("--target", type=int, help="Stop at this version (default: the latest).")
@global_options
@friendly
def migrate(target: int | None) -> None:
    """Create or upgrade the pgfleet schema. Safe to run again, and from many hosts."""
    version, applied = migrations.migrate(chosen_dsn(), target)
    for m in applied:
        click.echo(f"applied {m.version:04d}_{m.name}")
    click.echo(f"schema version {version}")
