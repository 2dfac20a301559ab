"""Throwaway databases: one migrated template per run, a fresh copy per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgfleet import migrations

ADMIN_DSN = os.environ.get("PGFLEET_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def dsn_for(dbname: str, **overrides: Any) -> str:
    params = conninfo_to_dict(ADMIN_DSN)
    params.update(dbname=dbname, **overrides)
    return make_conninfo(**params)


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(ADMIN_DSN, autocommit=True)


def create_database(template: str | None = None) -> str:
    name = f"pgfleet_test_{uuid.uuid4().hex[:12]}"
    with admin() as conn:
        if template:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        else:
            conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    with admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


AUDIT_TABLE = """
CREATE TABLE IF NOT EXISTS audit (
    job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL, event text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp())
"""


def make_template() -> str:
    name = create_database()
    dsn = dsn_for(name)
    migrations.migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(AUDIT_TABLE)
    return name


@contextmanager
def fresh_database(template: str | None) -> Iterator[str]:
    name = create_database(template)
    try:
        yield dsn_for(name)
    finally:
        drop_database(name)
