"""The pytest plugin of pgfleet (entry point `pytest11`): a migrated, empty database per
test, for tests that enqueue and run jobs with pgfleet.testing.run_jobs.

The server comes from `--pgfleet-server` or PGFLEET_TEST_SERVER (a URL of a database to
connect to for CREATE DATABASE, default "dbname=postgres" with the usual PG* variables);
its role needs CREATEDB. One template database is migrated per session; each test gets a
copy of it, dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgfleet.sql import migrate as migrations

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


@pytest.fixture(scope="session")
def pgfleet_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    url = (request.config.getoption("--pgfleet-server")
           or os.environ.get("PGFLEET_TEST_SERVER") or DEFAULT_SERVER)
    server = Server(url)
    yield server
    if server.template is not None:
        server.drop(server.template)


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
