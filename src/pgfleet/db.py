"""Connections: opening them with a clear, password-free error, and the DSN redaction."""

from __future__ import annotations

import os
import re
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgfleet.errors import DatabaseUnavailable

_URL_PASSWORD = re.compile(r"(?P<head>^[a-z][a-z0-9+.-]*://[^:/@?#]*:)(?P<pw>[^@]*)(?=@)", re.I)
_KV_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|\S+)", re.I)
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)(?P<pw>[^&#]*)", re.I)


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ***, for logs, errors and process titles."""
    dsn = _URL_PASSWORD.sub(r"\g<head>***", dsn)
    dsn = _QUERY_PASSWORD.sub(r"\g<head>***", dsn)
    return _KV_PASSWORD.sub(r"\g<head>***", dsn)


def scrub(text: str, dsn: str | None) -> str:
    """Remove the password of `dsn` from an arbitrary message (a driver error, say)."""
    if not dsn:
        return text
    for pattern in (_URL_PASSWORD, _QUERY_PASSWORD, _KV_PASSWORD):
        for match in pattern.finditer(dsn):
            secret = match["pw"].strip("'")
            if secret:
                text = text.replace(secret, "***")
    return text


# Set to "transaction" when connections go through a transaction-mode pooler.
POOLER_ENV = "PGFLEET_DATABASE_POOLER"


def resolve_dsn(explicit: str | None = None) -> str | None:
    """The database URL: an explicit one, else PGFLEET_DATABASE_URL, else DATABASE_URL."""
    return explicit or os.environ.get("PGFLEET_DATABASE_URL") or os.environ.get("DATABASE_URL")


# pgfleet's own queries name their tables with the schema, but operators and functions are
# found through search_path: a schema anyone can create in (public) must not be on it.
SEARCH_PATH = "pg_catalog,pgfleet"


def pinned_options(dsn: str, given: str | None = None) -> str:
    """The connection's `options` with search_path pinned last (so it wins), keeping any
    other setting the DSN, the caller or PGOPTIONS gave."""
    if given is None:
        given = str(conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS") or "")
    return f"{given} -c search_path={SEARCH_PATH}".strip()


def connect(dsn: str, *, autocommit: bool = True, **kwargs: Any) -> psycopg.Connection[Any]:
    """Open a connection, turning failures into one password-free line."""
    kwargs.setdefault("connect_timeout", 10)
    # A peer that vanished without a FIN (a host or network failure) is noticed in about
    # 25 s instead of the kernel's default of hours.
    kwargs.setdefault("keepalives", 1)
    kwargs.setdefault("keepalives_idle", 10)
    kwargs.setdefault("keepalives_interval", 5)
    kwargs.setdefault("keepalives_count", 3)
    if os.environ.get(POOLER_ENV, "").lower() == "transaction":
        # A transaction pooler (PgBouncer before 1.21) hands each transaction another
        # server connection, where psycopg's prepared statements do not exist. It also
        # refuses the `options` startup parameter, so there the search_path comes from the
        # role's own setting (`pgfleet grants` prints the ALTER ROLE ... SET search_path).
        kwargs.setdefault("prepare_threshold", None)
    else:
        kwargs["options"] = pinned_options(dsn, kwargs.get("options"))
    try:
        return psycopg.connect(dsn, autocommit=autocommit, **kwargs)
    except psycopg.OperationalError as exc:
        first_line = scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else "", dsn)
        raise DatabaseUnavailable(
            f"cannot connect to the database {redact_dsn(dsn)}: {first_line}"
        ) from None
