"""`pgfleet web`: the web UI on a loopback port unless told otherwise (docs/web.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import psycopg

from pgfleet.cli.common import chosen_dsn, global_options
from pgfleet.errors import PgfleetError
from pgfleet.sql.db import scrub
from pgfleet.web.settings import (
    BASIC_ENV,
    TOKEN_ENV,
    VIEWER_TOKEN_ENV,
    WebSettingsError,
    build_settings,
)


def _fail(message: str, code: int) -> None:
    click.echo(f"pgfleet: error: {message}", err=True)
    sys.exit(code)


@click.command("web")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, metavar="HOST:PORT",
              help="Address to serve on; anything but loopback needs a token or basic auth, "
                   "and TLS or --behind-proxy.")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help=f"File holding the access token (else ${TOKEN_ENV}).")
@click.option("--basic-auth-file", type=click.Path(dir_okay=False, path_type=Path),
              help=f"File holding user:password for basic auth (else ${BASIC_ENV}).")
@click.option("--behind-proxy", is_flag=True,
              help="A reverse proxy is in front: trust its X-Forwarded-Host in the origin "
                   "check of forms (and X-Forwarded-For/-Proto from FORWARDED_ALLOW_IPS).")
@click.option("--viewer-token-file", type=click.Path(dir_okay=False, path_type=Path),
              help=f"File holding a token that may look but not act (else "
                   f"${VIEWER_TOKEN_ENV}).")
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path),
              help="Serve HTTPS with this certificate chain (PEM); needs --tls-key.")
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path),
              help="The private key of --tls-cert (PEM, mode 600).")
@global_options
def web(listen: str, read_only: bool, token_file: Path | None,
        basic_auth_file: Path | None, behind_proxy: bool, viewer_token_file: Path | None,
        tls_cert: Path | None, tls_key: Path | None) -> None:
    """Serve the web UI: queues, jobs, schedules and hosts, with retry, cancel and pause."""
    dsn = None
    try:
        settings = build_settings(listen, chosen_dsn(), read_only, token_file,
                                  basic_auth_file, behind_proxy=behind_proxy,
                                  tls_cert=tls_cert, tls_key=tls_key,
                                  viewer_token_file=viewer_token_file)
        dsn = settings.dsn
        from pgfleet.web.server import serve
    except WebSettingsError as exc:
        _fail(str(exc), 2)
        return
    except ImportError as exc:
        _fail(f"the web UI needs its extra: pip install 'pgfleet[web]' ({exc.name} is "
              "missing)", 1)
        return
    try:
        serve(settings)
    except WebSettingsError as exc:
        _fail(str(exc), 2)
    except PgfleetError as exc:
        _fail(scrub(str(exc), dsn), 1)
    except psycopg.Error as exc:
        lines = str(exc).strip().splitlines()
        _fail(f"database error: {scrub(lines[0] if lines else type(exc).__name__, dsn)}", 1)
