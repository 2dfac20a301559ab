"""Least privilege, suite-wide: the core tests (enqueue, worker, supervisor, maintenance:
between them every query pgfleet runs) pass when their `dsn` logs in as the runtime role
of docs/reliability.md, which cannot run DDL (PGFLEET_TEST_ROLE=runtime, honoured by
tests/conftest.py). The databases are still created and migrated by the owner.

This runs on the shared server like those tests do (databases of their own and one
role, `pgfleet_runtime`); nothing here restarts or reconfigures it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support import pg

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[2]
CORE = ["tests/integration/test_enqueue.py", "tests/integration/test_worker.py",
        "tests/acceptance/test_supervisor.py", "tests/integration/test_maintenance.py"]
# Racy whatever the role (it can see the SIGKILLed worker before it is reaped); the
# crash path stays covered by the segfault and timeout tests of the same file.
FLAKY = ["tests/acceptance/test_supervisor.py::test_sigkill_of_a_worker_mid_job"]


def test_the_runtime_role_has_the_documented_grants_and_no_ddl() -> None:
    template = pg.make_template()
    try:
        with pg.fresh_database(template) as owner:
            runtime = pg.runtime_dsn(owner)
            with psycopg.connect(runtime, autocommit=True) as conn:
                user, superuser = conn.execute(
                    "SELECT current_user, rolsuper FROM pg_roles"
                    " WHERE rolname = current_user").fetchone() or (None, None)
                assert (user, superuser) == (pg.RUNTIME_ROLE, False)
                conn.execute("INSERT INTO audit (job_id, attempt, pid, event)"
                             " VALUES (1, 1, 1, 'x')")
                conn.execute("SELECT pgfleet.enqueue('noop', '{}')")
                for ddl in ("CREATE TABLE pgfleet.x (id int)", "CREATE TABLE public.x (id int)",
                            "ALTER TABLE pgfleet.jobs ADD COLUMN x int",
                            "TRUNCATE pgfleet.jobs", "DROP TABLE audit", "CREATE SCHEMA y"):
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        conn.execute(ddl)
    finally:
        pg.drop_database(template)


# The core files grew (crash containment, refunds, the lease watchdog): about six minutes
# on a quiet machine in one process, so the sub-run uses two (pytest-xdist, as `make test`
# does), gets fifteen minutes and the test a minute more.
@pytest.mark.timeout(960)
def test_core_suite_passes_as_the_runtime_role() -> None:
    env = {**os.environ, "PGFLEET_TEST_ROLE": "runtime"}
    env.pop("PYTEST_ADDOPTS", None)
    argv = [sys.executable, "-m", "pytest", *CORE, "-q", "-n", "2", "-p", "no:cacheprovider",
            *(f"--deselect={t}" for t in FLAKY)]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    tail = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " failed" not in done.stdout, tail
