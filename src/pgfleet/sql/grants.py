"""The least-privilege grants for a runtime role and a producer role (sql/grants.sql).

The statements are kept in one SQL file so that `pgfleet grants`, the docs and the test
suite's roles all use exactly the same ones.
"""

from __future__ import annotations

import os
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from pgfleet.sql.db import POOLER_ENV


def _blocks() -> dict[str, list[str]]:
    """The statements of grants.sql by role, comments left out."""
    text = (resources.files("pgfleet") / "sql" / "grants.sql").read_text("utf-8")
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("-- role: "):
            current = blocks.setdefault(line.removeprefix("-- role: ").strip(), [])
        elif current is not None and line.strip() and not line.startswith("--"):
            current.append(line.strip())
    return blocks


def statements(database: str, *, runtime: str | None = None, producer: str | None = None,
               pooler: bool | None = None) -> list[sql.Composed]:
    """The statements for the given roles on `database`, identifiers quoted. With
    `pooler` (default: PGFLEET_DATABASE_POOLER=transaction) the runtime role also gets the
    search_path a transaction pooler will not let its connections set."""
    if pooler is None:
        pooler = os.environ.get(POOLER_ENV, "").lower() == "transaction"
    blocks = _blocks()
    wanted = [("runtime", runtime), ("producer", producer)]
    if pooler:
        wanted.insert(1, ("runtime-pooler", runtime))
    chosen: list[sql.Composed] = []
    for block, role in wanted:
        if role is None:
            continue
        names = {"db": sql.Identifier(database), block.split("-")[0]: sql.Identifier(role)}
        chosen += [sql.SQL(line).format(**names) for line in blocks[block]]
    return chosen


def render(chosen: list[sql.Composed]) -> str:
    """The statements as a script to read or to feed to psql."""
    return "".join(statement.as_string(None) + "\n" for statement in chosen)


def apply(conn: psycopg.Connection[Any], chosen: list[sql.Composed]) -> None:
    """Run the statements in one transaction: all of them or none."""
    with conn.transaction():
        for statement in chosen:
            conn.execute(statement)


def current_database(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_catalog.current_database()").fetchone()
    assert row is not None
    return str(row[0])
