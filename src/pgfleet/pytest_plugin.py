"""The pytest plugin of pgfleet (entry point `pytest11`): a migrated, empty database per
test, for tests that enqueue and run jobs with pgfleet.testing.run_jobs.

The server comes from `--pgfleet-server` or PGFLEET_TEST_SERVER (a URL of a database to
connect to for CREATE DATABASE, default "dbname=postgres" with the usual PG* variables);
its role needs CREATEDB. One template database is migrated per session; each test gets a
copy of it, dropped afterwards.

A password in that URL moves to a passfile of the session (mode 0600, removed at the end),
so the URLs the fixtures hand out hold none: pytest prints a failing test's arguments, and
a setup error's traceback the driver's, and neither may show the password."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgfleet.sql import migrate as migrations
from pgfleet.sql.db import redact_dsn, scrub

DEFAULT_SERVER = "dbname=postgres"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--pgfleet-server", default=None,
                     help="URL of a PostgreSQL database to create test databases from "
                     "(default: PGFLEET_TEST_SERVER or 'dbname=postgres').")


class Server:
    """Creates and drops the throwaway databases of one session."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.template: str | None = None

    def __repr__(self) -> str:
        return f"Server({redact_dsn(self.url)!r})"

    def url_of(self, dbname: str) -> str:
        params: dict[str, Any] = {**conninfo_to_dict(self.url), "dbname": dbname}
        return make_conninfo("", **params)

    def create(self, template: str | None = None) -> str:
        name = f"pgfleet_test_{uuid.uuid4().hex[:12]}"
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(statement)
        return name

    def drop(self, name: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(sql.Identifier(name)))

    def migrated_template(self) -> str:
        if self.template is None:
            name = self.create()
            migrations.migrate(self.url_of(name))
            self.template = name
        return self.template


def without_password(url: str, folder: Path) -> str:
    """`url` with its password, if it has one, moved to a passfile in `folder`."""
    try:
        params: dict[str, Any] = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise pytest.UsageError(f"the pgfleet test server URL {redact_dsn(url)}: "
                                f"{scrub(str(exc), url)}") from None
    password = params.pop("password", None)
    if password is None:
        return url
    if "\n" in password or "\r" in password:
        raise pytest.UsageError("the pgfleet test server's password holds a line break, "
                                "which a passfile cannot; give it in PGPASSFILE instead")
    escaped = password.replace("\\", "\\\\").replace(":", "\\:")
    passfile = folder / "pgpass"
    fd = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        # Every host, port, database and user: the file serves these URLs alone.
        out.write(f"*:*:*:*:{escaped}\n")
    return make_conninfo("", **{**params, "passfile": str(passfile)})


@pytest.fixture(scope="session")
def pgfleet_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    folder = Path(tempfile.mkdtemp(prefix="pgfleet-test-"))
    try:
        server = Server(without_password(
            request.config.getoption("--pgfleet-server")
            or os.environ.get("PGFLEET_TEST_SERVER") or DEFAULT_SERVER, folder))
        yield server
        if server.template is not None:
            server.drop(server.template)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pgfleet_dsn(pgfleet_server: Server) -> Iterator[str]:
    """The URL of a migrated database with no jobs, this test's own."""
    name = pgfleet_server.create(pgfleet_server.migrated_template())
    try:
        yield pgfleet_server.url_of(name)
    finally:
        pgfleet_server.drop(name)


@pytest.fixture
def pgfleet_conn(pgfleet_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to `pgfleet_dsn`."""
    with psycopg.connect(pgfleet_dsn, autocommit=True) as conn:
        yield conn
