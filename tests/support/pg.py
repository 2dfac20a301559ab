"""Throwaway databases: one migrated template per run, a fresh copy per test."""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgfleet.sql import grants, migrate as migrations

ADMIN_DSN = os.environ.get("PGFLEET_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

# Everything the suite creates on the shared server is named PREFIX_RUN_...: the prefix
# lets several projects share one server, the run id (shared by the xdist workers, which
# inherit the variable) lets the session's end find what this run made and no other's.
PREFIX = os.environ.get("PGFLEET_TEST_PREFIX", "") or "pgfleet_test"
RUN = os.environ.get("PGFLEET_TEST_RUN", "") or uuid.uuid4().hex[:8]


def new_run() -> None:
    """A session that is not an xdist worker starts a run of its own, even inside a test
    of another run (a suite started by a test): its end then sees only its own names."""
    set_run(uuid.uuid4().hex[:8])


def set_run(run: str) -> None:
    global RUN, RUNTIME_ROLE
    RUN = run
    RUNTIME_ROLE = f"{run_prefix()}runtime"
    os.environ["PGFLEET_TEST_RUN"] = run


def prefix_problem() -> str | None:
    """Why PGFLEET_TEST_PREFIX is refused, or None."""
    if re.fullmatch(r"[a-z_][a-z0-9_]{0,29}", PREFIX):
        return None
    return (f"PGFLEET_TEST_PREFIX={PREFIX!r}: expected lower-case letters, digits and _"
            " (at most 30, not starting with a digit)")


def run_prefix() -> str:
    """The start of every database and role name of this run."""
    return f"{PREFIX}_{RUN}_"


def dsn_for(dbname: str, **overrides: Any) -> str:
    params = conninfo_to_dict(ADMIN_DSN)
    params.update(dbname=dbname, **overrides)
    return make_conninfo(**params)


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(ADMIN_DSN, autocommit=True)


def create_database(template: str | None = None) -> str:
    name = f"{run_prefix()}{uuid.uuid4().hex[:12]}"
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
    at timestamptz NOT NULL DEFAULT clock_timestamp(), token bigint)
"""


# The least-privilege runtime role: exactly the statements `pgfleet grants --runtime`
# prints (src/pgfleet/sql/grants.sql, shown in docs/security.md).
RUNTIME_ROLE = f"{run_prefix()}runtime"
# The test tasks' audit table is the suite's, not pgfleet's: the runtime role may write it.
AUDIT_GRANT = "GRANT SELECT, INSERT ON audit TO {role}"


def ensure_role(conn: psycopg.Connection[Any], role: str,
                password: str | None = None) -> None:
    """Create `role` (cluster-wide, so once per server) as a LOGIN role with no superuser,
    CREATEDB or CREATEROLE; if it exists, make sure it has exactly those attributes.
    Several test runs may share the server: losing the race to create it is fine."""
    attributes = sql.SQL("LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION"
                         " NOBYPASSRLS PASSWORD {}").format(sql.Literal(password))
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if not exists:
        try:
            conn.execute(sql.SQL("CREATE ROLE {} ").format(sql.Identifier(role)) + attributes)
            return
        except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
            pass  # created meanwhile by another run
    # Parallel test processes alter the shared role at once: the loser of a concurrent
    # update of its pg_authid row sees "tuple concurrently updated" and tries again.
    for attempt in range(5):
        try:
            conn.execute(sql.SQL("ALTER ROLE {} ").format(sql.Identifier(role)) + attributes)
            return
        except psycopg.errors.InternalError_:
            if attempt == 4:
                raise


def grant_runtime(conn: psycopg.Connection[Any], dbname: str, role: str,
                  audit: bool = True) -> None:
    """Give `role` the runtime grants of `pgfleet grants` on the database `conn` is
    connected to (as its owner)."""
    for statement in grants.statements(dbname, runtime=role):
        conn.execute(statement)
    if audit:
        conn.execute(sql.SQL(AUDIT_GRANT).format(role=sql.Identifier(role)))


_roles_ensured: set[tuple[Any, Any]] = set()


def runtime_dsn(owner_dsn: str) -> str:
    """The runtime role's DSN for the database of `owner_dsn`, after the role exists (once
    per server) and has the grants on that database. Authentication is the server's: the
    suite assumes trust on 127.0.0.1, as for the owner."""
    params = conninfo_to_dict(owner_dsn)
    server = (params.get("host"), params.get("port"))
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        if server not in _roles_ensured:
            ensure_role(conn, RUNTIME_ROLE)
            _roles_ensured.add(server)
        grant_runtime(conn, str(params["dbname"]), RUNTIME_ROLE)
    params.update(user=RUNTIME_ROLE)
    params.pop("password", None)
    return make_conninfo(**params)


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


def leftovers() -> tuple[list[str], list[str]]:
    """The databases and roles of this run still on the server."""
    pattern = run_prefix().replace("_", r"\_") + "%"
    with admin() as conn:
        dbs = [r[0] for r in conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s ORDER BY 1", (pattern,))]
        roles = [r[0] for r in conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE %s ORDER BY 1", (pattern,))]
    return dbs, roles


def drop_run_roles() -> None:
    """The session's end: the runtime role goes once no database of the run holds it."""
    # A database of the run still there keeps the role: leftovers() reports both.
    with admin() as conn, contextlib.suppress(psycopg.errors.DependentObjectsStillExist):
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(RUNTIME_ROLE)))


def clean_up(dbs: list[str], roles: list[str]) -> None:
    """Drop what a run left behind (after saying so)."""
    for name in dbs:
        drop_database(name)
    with admin() as conn:
        for role in roles:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
