"""Numbered SQL migrations for the pgfleet schema.

All pending migrations run in one transaction behind a transaction-scoped advisory lock, so
two hosts migrating at once serialise: the second waits, then finds nothing left to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

# An arbitrary constant shared by every pgfleet install: the advisory lock's key.
_MIGRATION_LOCK_KEY = 0x70676671  # "pgfq"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available() -> list[Migration]:
    """Every migration shipped with the package, in version order."""
    found = []
    folder = resources.files("pgfleet") / "sql" / "migrations"
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    return found


def latest_version() -> int:
    return available()[-1].version


def current_version(conn: psycopg.Connection[Any]) -> int:
    """The highest applied version, 0 when the schema is not installed."""
    row = conn.execute("SELECT to_regclass('pgfleet.migrations') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM pgfleet.migrations").fetchone()
    return int(row[0]) if row else 0


def migrate(dsn: str, target: int | None = None) -> tuple[int, list[Migration]]:
    """Apply pending migrations up to `target` (all by default).

    Returns the version reached and the migrations applied by this call.
    """
    applied: list[Migration] = []
    with psycopg.connect(dsn, autocommit=False,
                         fallback_application_name="pgfleet migrate") as conn:
        # Operators in the migrations' index predicates and CHECKs are resolved now, once:
        # never through a schema another role can create objects in (SET LOCAL, so it
        # holds through a transaction pooler too).
        conn.execute("SET LOCAL search_path = pg_catalog, pgfleet")
        conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
        conn.execute("CREATE SCHEMA IF NOT EXISTS pgfleet")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS pgfleet.migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = current_version(conn)
        for migration in available():
            if migration.version <= done or (target is not None and migration.version > target):
                continue
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO pgfleet.migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(migration)
        version = current_version(conn)
        conn.commit()
    return version, applied
