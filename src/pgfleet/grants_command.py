"""`pgfleet grants`: print, or apply, the least-privilege grants of pgfleet.grants."""

from __future__ import annotations

import sys
from typing import NoReturn

import click
import psycopg

from pgfleet import grants as grant_sql
from pgfleet.db import connect, resolve_dsn, scrub
from pgfleet.errors import PgfleetError

EXIT_USAGE = 2
EXIT_FAILURE = 1


@click.command("grants")
@click.option("--runtime", metavar="ROLE",
              help="The role pgfleet run, its workers and the operator commands log in as.")
@click.option("--producer", metavar="ROLE",
              help="A role that only enqueues jobs (pgfleet.enqueue from SQL).")
@click.option("--apply", "apply_them", is_flag=True,
              help="Run the statements (as the schema owner) instead of printing them.")
def grants(runtime: str | None, producer: str | None, apply_them: bool) -> None:
    """Print the GRANT statements for a runtime role and a producer role, or apply them
    with --apply. The database is the one of --database-url / PGFLEET_DATABASE_URL."""
    if runtime is None and producer is None:
        _fail("give --runtime ROLE, --producer ROLE or both", EXIT_USAGE)
    root = click.get_current_context().find_root().obj or {}
    dsn = root.get("dsn") or resolve_dsn(None)
    if not dsn:
        _fail("no database URL: pass --database-url or set PGFLEET_DATABASE_URL", EXIT_USAGE)
    try:
        with connect(dsn, autocommit=True) as conn:
            chosen = grant_sql.statements(grant_sql.current_database(conn),
                                          runtime=runtime, producer=producer)
            if apply_them:
                grant_sql.apply(conn, chosen)
    except PgfleetError as exc:
        _fail(scrub(str(exc), dsn))
    except psycopg.Error as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _fail(f"database error: {scrub(text, dsn)}")
    if apply_them:
        click.echo(f"applied {len(chosen)} statement(s)")
    else:
        click.echo(grant_sql.render(chosen), nl=False)


def _fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    click.echo(f"pgfleet: error: {message}", err=True)
    sys.exit(code)
