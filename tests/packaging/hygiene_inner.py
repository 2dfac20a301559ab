"""The inner run of tests/packaging/test_suite_hygiene.py (which names this file): not
collected by the suite itself."""

from __future__ import annotations

import os

import psycopg

from tests.support import pg

INNER = "PGFLEET_TEST_HYGIENE_INNER"


def test_inner_names_follow_the_prefix(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        database, user = conn.execute("SELECT current_database(), current_user").fetchone() \
            or ("", "")
    prefix = os.environ["PGFLEET_TEST_PREFIX"]
    assert database.startswith(f"{prefix}_{pg.RUN}_")
    assert user == f"{prefix}_{pg.RUN}_runtime"


def test_inner_leaks_a_database() -> None:
    if os.environ[INNER] == "leak":
        pg.create_database()
