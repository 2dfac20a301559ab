from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import pg

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = ROOT / "tests" / "support"


def pytest_configure(config: pytest.Config) -> None:
    problem = pg.prefix_problem()
    if problem:
        raise pytest.UsageError(problem)
    # The controller picks the run id before xdist starts its workers, which inherit it.
    if not hasattr(config, "workerinput"):
        pg.new_run()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run leaves no database or role behind: the controller (not an xdist worker)
    drops the run's runtime role, then checks that nothing named for the run remains."""
    if hasattr(session.config, "workerinput"):
        return
    try:
        pg.drop_run_roles()
        dbs, roles = pg.leftovers()
    except psycopg.Error as exc:
        dbs, roles = [], []
        if exitstatus == 0:
            print(f"\npgfleet suite: could not check for leftovers: {exc}")
    if dbs or roles:
        print(f"\npgfleet suite: this run left behind databases {dbs} and roles {roles};"
              " dropped them now")
        pg.clean_up(dbs, roles)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def template_db() -> Iterator[str]:
    name = pg.make_template()
    yield name
    pg.drop_database(name)


# PGFLEET_TEST_ROLE=runtime: the `dsn` fixture (so every test, worker and supervisor that
# uses it) logs in as the least-privilege role of docs/reliability.md instead of the owner.
# The database is still created and migrated by the owner.
TEST_ROLES = ("owner", "runtime")


def _test_role() -> str:
    role = os.environ.get("PGFLEET_TEST_ROLE", "") or "owner"
    if role not in TEST_ROLES:
        raise pytest.UsageError(f"PGFLEET_TEST_ROLE={role!r}: expected one of {TEST_ROLES}")
    return role


@pytest.fixture
def dsn(template_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated database of this test's own, with an audit table. As the owner, or as
    the runtime role with PGFLEET_TEST_ROLE=runtime."""
    with pg.fresh_database(template_db) as owner_url:
        url = pg.runtime_dsn(owner_url) if _test_role() == "runtime" else owner_url
        monkeypatch.setenv("PGFLEET_AUDIT_DSN", url)
        monkeypatch.setenv("PGFLEET_DATABASE_URL", url)
        yield url


@pytest.fixture
def empty_dsn() -> Iterator[str]:
    """A database with no pgfleet schema."""
    with pg.fresh_database(None) as url:
        yield url


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@pytest.fixture(autouse=True, scope="session")
def _tasks_importable() -> None:
    # Worker subprocesses import tests.support.jobtasks; so does the in-process worker.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
