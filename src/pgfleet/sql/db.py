"""Connections: opening them with a clear, password-free error, and the DSN redaction."""

from __future__ import annotations

import functools
import os
import re
from typing import Any
from urllib.parse import unquote

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from setproctitle import getproctitle

from pgfleet.errors import DatabaseUnavailable

# A URL's password runs from the first ":" of the user part to the LAST "@": an unencoded
# "@", ":", "/" or "?" in a password must not end it early and leak its tail. When the text
# is ambiguous (no password but an "@" further on) more is hidden, never less.
_URL = re.compile(r"\s*[a-z][a-z0-9+.-]*://", re.I)
_URL_PASSWORD = re.compile(r"\s*[a-z][a-z0-9+.-]*://[^:@]*:(?P<pw>.*)@", re.I | re.S)
# The parameters that hold a secret.
_SECRET_KEYS = r"(?:ssl)?password|oauth_client_secret"
# Delimiters libpq or a reader may cut a password at; what lies between two is a fragment.
_FRAGMENT_SPLIT = re.compile(r"[@:/?&=#%,;\s'\"\\]+")
# A fragment this long is hidden wherever it stands; a shorter one only inside quotes,
# where libpq and psycopg echo what they parsed: hiding a letter or two in running text
# would spell the password out ("o***tion").
_FRAGMENT_MIN = 3
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")


@functools.cache
def _keywords() -> str:
    """libpq's parameter names as an alternation: a value left unquoted runs on, across
    "&" in a URL's query or across spaces in key=value form, until one of them follows,
    because libpq cuts it short there and echoes the rest in its error."""
    names = sorted((o.keyword.decode() for o in pq.Conninfo.get_defaults()), key=len,
                   reverse=True)
    return "|".join(map(re.escape, names))


@functools.cache
def _query_password() -> re.Pattern[str]:
    return re.compile(rf"[?&](?:{_SECRET_KEYS})=(?P<pw>[^&]*(?:&(?!(?:{_keywords()})=)[^&]*)*)",
                      re.I)


@functools.cache
def _kv_password() -> re.Pattern[str]:
    # key=value conninfo as libpq reads it: a value is single-quoted, or runs to whitespace;
    # a backslash escapes the next character in both.
    word = r"(?:\\.|[^\s\\])+"
    return re.compile(
        rf"(?<![\w.])(?:{_SECRET_KEYS})\s*=\s*(?P<pw>'(?:[^'\\]|\\.)*(?:'|$)"
        rf"|{word}(?:\s+(?!(?:{_keywords()})\s*=){word})*)",
        re.I | re.S,
    )


_KV_ESCAPE = re.compile(r"\\(.)", re.S)


def _password_spans(dsn: str) -> list[tuple[int, int]]:
    """Where passwords stand in `dsn`, overlapping matches merged, in order."""
    if _URL.match(dsn):
        matches = [*_URL_PASSWORD.finditer(dsn), *_query_password().finditer(dsn)]
    else:
        matches = list(_kv_password().finditer(dsn))
    spans: list[tuple[int, int]] = []
    for start, end in sorted(match.span("pw") for match in matches):
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        elif end > start:
            spans.append((start, end))
    return spans


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ***, for logs, errors and process titles.

    Both forms: ``postgresql://user:password@host/db?password=...`` and libpq's
    ``key=value`` conninfo (quoted values, backslash escapes)."""
    for start, end in reversed(_password_spans(dsn)):
        dsn = dsn[:start] + "***" + dsn[end:]
    return dsn


def dsn_passwords(dsn: str) -> list[str]:
    """The passwords in `dsn` as written and as the server sees them (decoded), longest first."""
    secrets: set[str] = set()
    for start, end in _password_spans(dsn):
        written = dsn[start:end]
        secrets.add(written)
        if _URL.match(dsn):
            secrets.add(unquote(written))
        else:
            quoted = len(written) > 1 and written.startswith("'") and written.endswith("'")
            secrets.add(_KV_ESCAPE.sub(r"\1", written[1:-1] if quoted else written.lstrip("'")))
    return sorted((secret for secret in secrets if secret), key=len, reverse=True)


def _fragments(secrets: list[str]) -> set[str]:
    return {part for secret in secrets for part in _FRAGMENT_SPLIT.split(secret) if part}


def scrub(text: str, dsn: str | None) -> str:
    """Remove every trace of `dsn`'s password from an arbitrary message (a driver error,
    say). libpq cuts a password at an unencoded "@" or "&", or at a space, and quotes the
    rest back as a host name or a parameter: a quoted part that echoes the password's
    place in the DSN, or holds a piece of it, is hidden whole."""
    if not dsn:
        return text
    secrets = dsn_passwords(dsn)
    if not secrets:
        return text
    spans = _password_spans(dsn)
    fragments = _fragments(secrets)

    def echoes_password(inner: str) -> bool:
        if any(part in inner for part in secrets) or any(
                len(part) > 1 and part in inner for part in fragments):
            return True
        at = dsn.find(inner)
        while inner and at >= 0:
            if any(start < at + len(inner) and at < end for start, end in spans):
                return True
            at = dsn.find(inner, at + 1)
        return False

    def hide(quoted: re.Match[str]) -> str:
        mark = quoted[0][0]
        return f"{mark}***{mark}" if echoes_password(quoted[0][1:-1]) else quoted[0]

    text = _QUOTED.sub(hide, text)
    for secret in sorted({*secrets, *fragments}, key=len, reverse=True):
        if len(secret) >= _FRAGMENT_MIN:
            text = text.replace(secret, "***")
    return text


def first_line(exc: BaseException, dsn: str | None = None) -> str:
    """The first line of an exception's text (or its type), without dsn's password: what
    a log line or an error line says of a failure."""
    text = str(exc).strip()
    return scrub(text.splitlines()[0] if text else type(exc).__name__, dsn)


# Set to "transaction" when connections go through a transaction-mode pooler.
POOLER_ENV = "PGFLEET_DATABASE_POOLER"


def resolve_dsn(explicit: str | None = None) -> str | None:
    """The database URL: an explicit one, else PGFLEET_DATABASE_URL, else DATABASE_URL."""
    return explicit or os.environ.get("PGFLEET_DATABASE_URL") or os.environ.get("DATABASE_URL")


# pgfleet's own queries name their tables with the schema, but operators and functions are
# found through search_path: a schema anyone can create in (public) must not be on it.
SEARCH_PATH = "pg_catalog,pgfleet"
# psycopg prepares a statement after its 5th run and PostgreSQL then may switch to a generic
# plan. A worker that polled an empty queue gets a generic claim (and completion) planned
# for an empty table, which then scans and sorts the whole backlog on every claim: a drain
# after 15 s of idling runs at a tenth of the rate (bench.probes idle-arrival). Planning
# each execution costs well under a millisecond for these statements.
PLAN_CACHE_MODE = "force_custom_plan"
# pgfleet's statements are short index reads and writes. Past the server's JIT cost
# thresholds (which a large table's estimates cross) PostgreSQL spends 0.4-3 s compiling
# a plan that runs in milliseconds, and the exporter's reads then time out.
JIT = "off"


# The server notices a client that vanished without a FIN (a host or network failure) in
# about 25 s, as the client notices the server: not after the kernel's default of hours.
SERVER_KEEPALIVES = ("-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 "
                     "-c tcp_keepalives_count=3 -c tcp_user_timeout=25000")
# A pgfleet process never waits between the statements of a transaction: one that stops
# talking inside one (frozen, cut off, gone) has its session ended by the server, so no
# lock it holds (a queue's flow-control row, a job row) outlives it by more than this.
PROCESS_IDLE_IN_TRANSACTION = "5s"


def pinned_options(dsn: str, given: str | None = None, *, process: bool = False) -> str:
    """The connection's `options`: the server-side keepalives (and, for a pgfleet
    process, the idle-in-transaction limit) first, so the DSN, the caller or PGOPTIONS
    may change them; search_path, plan_cache_mode and jit pinned last, so they win."""
    if given is None:
        given = str(conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS") or "")
    guards = SERVER_KEEPALIVES
    if process:
        guards += f" -c idle_in_transaction_session_timeout={PROCESS_IDLE_IN_TRANSACTION}"
    return (f"{guards} {given} -c search_path={SEARCH_PATH} "
            f"-c plan_cache_mode={PLAN_CACHE_MODE} -c jit={JIT}").strip()


def session_kwargs(dsn: str, *, application_name: str | None = None, process: bool = False,
                   **kwargs: Any) -> dict[str, Any]:
    """What every pgfleet connection is opened with, beside the DSN: its name, keepalives,
    and search_path and plan_cache_mode pinned (or no prepared statements behind a
    transaction pooler). `connect` and the web UI's pool both open theirs with these, so
    no connection of pgfleet's finds operators in a schema anyone can create in.
    `process`: the connection of a pgfleet process (worker, maintenance, cron, exporter),
    whose session the server ends when it idles inside a transaction
    (PROCESS_IDLE_IN_TRANSACTION); an application's own enqueues may take their time.

    `application_name` is how the server lists the connection (pg_stat_activity); by
    default the process title of a pgfleet process (`pgfleet worker emails 1/2`). It is a
    fallback: a name in the DSN or in PGAPPNAME wins."""
    kwargs.setdefault("fallback_application_name", application_name or process_name())
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
        kwargs["options"] = pinned_options(dsn, kwargs.get("options"), process=process)
    return kwargs


def connect(dsn: str, *, autocommit: bool = True, application_name: str | None = None,
            process: bool = False, **kwargs: Any) -> psycopg.Connection[Any]:
    """Open a connection with `session_kwargs`, turning failures into one password-free
    line."""
    try:
        return psycopg.connect(dsn, autocommit=autocommit, **session_kwargs(
            dsn, application_name=application_name, process=process, **kwargs))
    except psycopg.OperationalError as exc:
        first_line = scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else "", dsn)
        raise DatabaseUnavailable(
            f"cannot connect to the database {redact_dsn(dsn)}: {first_line}"
            f"{_no_slot_hint(str(exc))}"
        ) from None


# The server's answers when it has no connection slot for this role: max_connections
# reached, the rest reserved for superusers, or a role's or database's CONNECTION LIMIT.
_NO_SLOT = ("too many clients", "remaining connection slots are reserved",
            "too many connections")


def _no_slot_hint(text: str) -> str:
    """A word for the person reading the log: which limit to look at."""
    if any(pattern in text.lower() for pattern in _NO_SLOT):
        return (" (too many connections: no connection slot is left for this role; other"
                " roles hold them, up to max_connections)")
    return ""


# Server answers no retry can change: a wrong password or method, an unknown role or
# database. Matched on the server's FATAL text, as libpq passes no SQLSTATE for a failed
# connection. Anything else (refused, timed out, starting up, too many clients) may pass.
_PERMANENT = ("password authentication failed", "authentication failed",
              "no pg_hba.conf entry", "does not exist", "password is missing",
              "no password supplied")


def is_permanent(error: DatabaseUnavailable) -> bool:
    """Would trying again with the same URL fail the same way?"""
    text = str(error).lower()
    return any(pattern in text for pattern in _PERMANENT)


def process_name() -> str:
    """`pgfleet worker emails 1/2` for a process titled `pgfleet worker emails 1/2: 3 jobs`;
    `pgfleet` for a process that is not titled as pgfleet's (an application enqueueing)."""
    title = getproctitle().split(": ", 1)[0]
    # The server keeps the first 63 bytes (NAMEDATALEN - 1).
    return title[:63] if title.startswith("pgfleet ") else "pgfleet"
