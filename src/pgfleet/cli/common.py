"""What every command shares: the global options, exit codes and error lines, the
database URL and connection, and the output helpers."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, NoReturn, ParamSpec, TypeVar

import click
import psycopg

from pgfleet.cli.preflight import missing_modules
from pgfleet.config import Config, ConfigError, load_config
from pgfleet.dev.state import default_root as dev_root, read as read_state
from pgfleet.errors import DatabaseUnavailable, PgfleetError
from pgfleet.sql import fleet as fleet_store
from pgfleet.sql.db import connect, first_line, is_permanent, redact_dsn, resolve_dsn, scrub
from pgfleet.status.terminal_text import shown

EXIT_USAGE = 2
EXIT_FAILURE = 1

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")

# Keys of the root context's obj where the global options land, wherever they were given.
URL_KEY = "database_url"
CONFIG_KEY = "config_path"
IN_USE_KEY = "dsn_in_use"
CONFIG_OBJ_KEY = "config"
APPLICATION_NAME = "pgfleet cli"


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    click.echo(f"pgfleet: error: {message}", err=True)
    sys.exit(code)


def root_obj() -> dict[str, Any]:
    obj: dict[str, Any] = click.get_current_context().find_root().ensure_object(dict)
    return obj


def friendly(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn expected failures into one line on stderr and a non-zero exit."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except PgfleetError as exc:
            fail(scrub(str(exc), _dsn_in_use()))
        except psycopg.Error as exc:
            fail(f"database error: {first_line(exc, _dsn_in_use())}")

    return wrapper


# ---- the global options ----------------------------------------------------------------

def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """Store an option's value on the root context, so that it counts the same given
    before the command name (`pgfleet --database-url X jobs list`) or after it."""

    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value is not None:
            ctx.find_root().ensure_object(dict)[key] = value
        return value

    return callback


database_url_option = click.option(
    "--database-url", metavar="URL", expose_value=False, callback=_remember(URL_KEY),
    help="PostgreSQL URL (default: the file's database_url, then $PGFLEET_DATABASE_URL, "
         "then $DATABASE_URL).")
config_path_option = click.option(
    "-c", "--config", metavar="FILE", type=click.Path(dir_okay=False), expose_value=False,
    callback=_remember(CONFIG_KEY), help="The pgfleet.yaml file.")


def global_options(fn: F) -> F:
    """--database-url and -c/--config, accepted here as well as before the command name."""
    return database_url_option(config_path_option(fn))


def config_path() -> str | None:
    path: str | None = root_obj().get(CONFIG_KEY)
    return path


def required_config_path() -> str:
    path = config_path()
    if path is None:
        fail("missing option -c/--config (the pgfleet.yaml file)", EXIT_USAGE)
    return path


# ---- the database ----------------------------------------------------------------------

def config_dsn(config: Config | None, discover: bool = True) -> str | None:
    """The database URL: --database-url, then the file's, then the environment's, then
    (with `discover`) that of a `pgfleet dev` running from here."""
    explicit: str | None = root_obj().get(URL_KEY)
    file_url = config.database_url if config is not None else None
    dsn = explicit or file_url or resolve_dsn(None)
    if not dsn and discover:
        dsn = _dev_dsn()
    root_obj()[IN_USE_KEY] = dsn
    return dsn


def _dev_dsn() -> str | None:
    """The database URL recorded by the `pgfleet dev` running from this folder (or with
    this PGFLEET_EMBEDDED_DIR), said on stderr."""
    root = dev_root()
    state = read_state(root) if root is not None else None
    if state is None:
        return None
    click.echo(f"pgfleet: no database URL given; using that of the running `pgfleet dev` "
               f"(pid {state.pid}): {redact_dsn(state.dsn)}", err=True)
    return state.dsn


def _dsn_in_use() -> str | None:
    """The URL a command chose, for taking its password out of error messages."""
    obj = root_obj()
    dsn: str | None = obj.get(IN_USE_KEY) or resolve_dsn(obj.get(URL_KEY))
    return dsn


def need_dsn(config: Config | None = None) -> str:
    dsn = config_dsn(config)
    if not dsn:
        fail("no database URL: pass --database-url or set PGFLEET_DATABASE_URL", EXIT_USAGE)
    return dsn


def given_config() -> Config | None:
    """The file given with -c, validated once (its task modules are not looked for)."""
    obj = root_obj()
    path = config_path()
    if path is None:
        return None
    if CONFIG_OBJ_KEY not in obj:
        obj[CONFIG_OBJ_KEY] = load_or_exit(path, check_modules=False)
    config: Config = obj[CONFIG_OBJ_KEY]
    return config


def chosen_dsn() -> str:
    """The URL of the options, of the file given with -c (if any) or of the environment."""
    return need_dsn(given_config())


def connect_cli(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection named `pgfleet cli` on the server."""
    return connect(dsn, autocommit=True, application_name=APPLICATION_NAME, **kwargs)


def warn_unknown_queue(conn: psycopg.Connection[Any], queue: str) -> None:
    """A warning (not a refusal) for a queue name that no job, process or the file given
    with -c knows: most likely a typo."""
    config = given_config()
    if (config is not None and queue in config.queues) or fleet_store.queue_known(conn, queue):
        return
    nor_file = "" if config is None else f", and {config_path()} does not configure it"
    warn(f"queue {queue!r} is unknown: no job or worker in the database has it{nor_file}; "
         "is the name mistyped?")


@contextmanager
def database() -> Iterator[psycopg.Connection[Any]]:
    with connect_cli(chosen_dsn()) as conn:
        yield conn


# ---- the configuration file ------------------------------------------------------------

def load_or_exit(path: str, check_modules: bool = True) -> Config:
    """Validate the file; on any problem print every one and exit 2, before anything
    is forked or connected."""
    try:
        config = load_config(path)
    except ConfigError as exc:
        for line in exc.errors:
            click.echo(scrub(line, None), err=True)
        sys.exit(EXIT_USAGE)
    if check_modules:
        working_directory_last()
        report(missing_modules(config), [])
    return config


def working_directory_last() -> None:
    """Task modules may live in the working directory, but a file there must not shadow
    an installed or standard module (a planted `json.py` would run as this account): it goes last
    on sys.path, also when `python -m` put it first."""
    here = os.getcwd()
    sys.path[:] = [entry for entry in sys.path if entry not in ("", here)]
    sys.path.append(here)


def report(problems: list[str], warnings: list[str]) -> None:
    """Print warnings; print every problem and exit 2 if there is any."""
    for line in warnings:
        warn(line)
    for line in problems:
        click.echo(line, err=True)
    if problems:
        sys.exit(EXIT_USAGE)


# ---- output ----------------------------------------------------------------------------

def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


def emit(data: Any, as_json: bool, text: Callable[[Any], None]) -> None:
    """Print `data` as JSON (which escapes control characters), or through `text` with
    every string in it escaped for the terminal."""
    if as_json:
        click.echo(json.dumps(data, default=str, indent=2))
    else:
        text(shown(data))


def refuse_permanent_connection_errors(dsn: str, application: str) -> None:
    """One connection before anything is forked (closed at once, so no connection crosses
    a fork): a wrong password or an unknown role or database exits with one line, where
    the workers would retry it forever (`pgfleet run`, `pgfleet worker`). A database that is
    down is waited for."""
    try:
        connect(dsn, application_name=application).close()
    except DatabaseUnavailable as exc:
        if is_permanent(exc):
            fail(str(exc))
