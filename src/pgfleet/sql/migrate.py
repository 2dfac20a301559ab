"""Bringing a database to the current schema.

A new database is built from the current files: schema.sql (the type, tables, indexes and
triggers) and functions/ (one file per function name). A database built before runs the
numbered migrations it lacks, from migrations/. Either way every function then gets the
body its file holds, so a function changes in its file alone.

Everything runs in one transaction behind a transaction-scoped advisory lock, so two hosts
migrating at once serialise: the second waits, then finds nothing left to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import psycopg

from pgfleet.errors import PgfleetError

# An arbitrary constant shared by every pgfleet install: the advisory lock's key.
_MIGRATION_LOCK_KEY = 0x70676671  # "pgfq"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# How long a migration waits for a lock another session holds (a long report, an open
# transaction): waiting longer would queue every claim and enqueue behind it.
LOCK_TIMEOUT = "10s"
# schema.sql's triggers follow this line: they need the functions, which need the tables.
TRIGGERS_MARK = "-- Triggers ---"


class MigrationError(PgfleetError):
    """A migration that cannot or must not run; nothing was changed."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def _sql() -> Traversable:
    return resources.files("pgfleet") / "sql"


def available() -> list[Migration]:
    """Every migration shipped with the package, in version order."""
    found = []
    for entry in (_sql() / "migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    return found


def latest_version() -> int:
    return available()[-1].version


def schema_parts() -> tuple[str, str]:
    """schema.sql as what comes before the functions and what comes after them."""
    text = (_sql() / "schema.sql").read_text("utf-8")
    tables, mark, triggers = text.partition(TRIGGERS_MARK)
    if not mark:
        raise RuntimeError(f"schema.sql has no {TRIGGERS_MARK!r} line")
    return tables, mark + triggers


def functions() -> dict[str, str]:
    """Each function's file by the function's name."""
    return {entry.name.removesuffix(".sql"): entry.read_text("utf-8")
            for entry in sorted((_sql() / "functions").iterdir(), key=lambda e: e.name)
            if entry.name.endswith(".sql")}


def current_version(conn: psycopg.Connection[Any]) -> int:
    """The highest applied version, 0 when the schema is not installed."""
    row = conn.execute("SELECT to_regclass('pgfleet.migrations') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM pgfleet.migrations").fetchone()
    return int(row[0]) if row else 0


def _replace_functions(conn: psycopg.Connection[Any]) -> None:
    """Give every function its file's body. A function may call one whose file comes
    later, so the first pass creates them all unchecked; the second creates them again
    with their bodies checked, so a mistake in a file fails the migrate, naming the file,
    before anything is committed."""
    files = functions()
    for check in ("off", "on"):
        conn.execute(f"SET LOCAL check_function_bodies = {check}".encode())
        for name, text in files.items():
            try:
                conn.execute(text.encode())
            except psycopg.errors.LockNotAvailable:
                raise
            except psycopg.Error as exc:
                raise MigrationError(f"sql/functions/{name}.sql: {_first_line(exc)};"
                                     " nothing was changed") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _install(conn: psycopg.Connection[Any], migrations: list[Migration]) -> None:
    tables, triggers = schema_parts()
    conn.execute(tables.encode())
    _replace_functions(conn)
    conn.execute(triggers.encode())
    for migration in migrations:
        _record(conn, migration)


def _record(conn: psycopg.Connection[Any], migration: Migration) -> None:
    conn.execute("INSERT INTO pgfleet.migrations (version, name) VALUES (%s, %s)",
                 (migration.version, migration.name))


def migrate(dsn: str, target: int | None = None) -> tuple[int, list[Migration]]:
    """Bring the database to the current schema, or to migration `target` (for tests of
    one migration: then the functions stay as that migration left them).

    Returns the version reached and the migrations this call applied (all of them for a
    new database, which is built from the current files instead).
    """
    every = available()
    try:
        with psycopg.connect(dsn, autocommit=False,
                             fallback_application_name="pgfleet migrate") as conn:
            # Operators in the index predicates and CHECKs are resolved now, once: never
            # through a schema another role can create objects in (SET LOCAL, so it holds
            # through a transaction pooler too).
            conn.execute("SET LOCAL search_path = pg_catalog, pgfleet")
            conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            conn.execute("CREATE SCHEMA IF NOT EXISTS pgfleet")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS pgfleet.migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = current_version(conn)
            _check(done, target, every[-1].version)
            conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'".encode())
            wanted = [m for m in every if target is None or m.version <= target]
            if done == 0 and wanted == every:
                _install(conn, every)
                applied = every
            else:
                applied = [m for m in wanted if m.version > done]
                for migration in applied:
                    conn.execute(migration.sql.encode())
                    _record(conn, migration)
                if target is None or target >= every[-1].version:
                    _replace_functions(conn)
            version = current_version(conn)
            conn.commit()
    except psycopg.errors.LockNotAvailable:
        raise MigrationError(f"another session held a lock the migration needs for over"
                             f" {LOCK_TIMEOUT} (pg_stat_activity shows it): nothing was"
                             " changed; try again once it ends") from None
    return version, applied


def _check(done: int, target: int | None, latest: int) -> None:
    """Refuse what would rewind or overwrite a schema: this code's functions on a
    database a newer pgfleet migrated, or a target outside the migrations known."""
    if done > latest:
        raise MigrationError(f"the database's schema is at version {done}, newer than this"
                             f" pgfleet's {latest}: run the newer pgfleet's migrate; nothing"
                             " was changed")
    if target is not None and not 1 <= target <= latest:
        raise MigrationError(f"--target {target}: the migrations run from 1 to {latest}")
    if target is not None and target < done:
        raise MigrationError(f"--target {target}: the database is at version {done}, and"
                             " migrations do not go back")
