"""`pgfleet grants`: print, or apply, the least-privilege grants of pgfleet.sql.grants."""

from __future__ import annotations

import click

from pgfleet.cli.common import EXIT_USAGE, database, fail, friendly, global_options
from pgfleet.sql import grants as grant_sql


@click.command("grants")
@click.option("--runtime", metavar="ROLE",
              help="The role pgfleet run, its workers and the operator commands log in as.")
@click.option("--producer", metavar="ROLE",
              help="A role that only enqueues jobs (pgfleet.enqueue from SQL).")
@click.option("--apply", "apply_them", is_flag=True,
              help="Run the statements (as the schema owner) instead of printing them.")
@global_options
@friendly
def grants(runtime: str | None, producer: str | None, apply_them: bool) -> None:
    """Print the GRANT statements for a runtime role and a producer role, or apply them
    with --apply. The database is the one of --database-url / PGFLEET_DATABASE_URL."""
    if runtime is None and producer is None:
        fail("give --runtime ROLE, --producer ROLE or both", EXIT_USAGE)
    with database() as conn:
        chosen = grant_sql.statements(grant_sql.current_database(conn),
                                      runtime=runtime, producer=producer)
        if apply_them:
            grant_sql.apply(conn, chosen)
    if apply_them:
        click.echo(f"applied {len(chosen)} statement(s)")
    else:
        click.echo(grant_sql.render(chosen), nl=False)
