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

# An arbitrary constant shared by every pgfleet install: the advisory lock's key.
_MIGRATION_LOCK_KEY = 0x70676671  # "pgfq"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# schema.sql's triggers follow this line: they need the functions, which need the tables.
TRIGGERS_MARK = "-- Triggers ---"


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
    # A function may call one whose file comes later: bodies are checked when they run
    # (every test runs them), not when they are created.
    conn.execute("SET LOCAL check_function_bodies = off")
    for text in functions().values():
        conn.execute(text.encode())
    conn.execute("SET LOCAL check_function_bodies = on")


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
    return version, applied
