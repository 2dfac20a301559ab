"""The suite shares a server politely: its databases and roles take PGFLEET_TEST_PREFIX,
and a run leaves none behind (the session's end in tests/conftest.py checks)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support import pg

ROOT = Path(__file__).resolve().parents[2]
INNER = "PGFLEET_TEST_HYGIENE_INNER"
# The inner run's tests: a file the outer run does not collect (not test_*.py), given to
# pytest by path.
INNER_TESTS = Path(__file__).with_name("hygiene_inner.py")


def server_names(prefix: str) -> list[str]:
    with pg.admin() as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s)"
            " UNION ALL SELECT rolname FROM pg_roles WHERE starts_with(rolname, %s)",
            (prefix, prefix)).fetchall()
    return [r[0] for r in rows]


def inner(prefix: str, mode: str, workers: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGFLEET_TEST_PREFIX": prefix, "PGFLEET_TEST_ROLE": "runtime",
           INNER: mode}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers,
         str(INNER_TESTS)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env, check=False)


def test_a_run_with_a_prefix_leaves_no_database_or_role_behind() -> None:
    prefix = f"hygiene_{uuid.uuid4().hex[:6]}"
    done = inner(prefix, "clean", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert server_names(prefix) == []


def test_a_run_that_leaks_fails_names_the_leak_and_drops_it() -> None:
    prefix = f"hygiene_{uuid.uuid4().hex[:6]}"
    done = inner(prefix, "leak", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert "this run left behind databases" in done.stdout and prefix in done.stdout
    assert server_names(prefix) == []


def test_a_bad_prefix_is_refused_in_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "0", "--co", f"{__file__}"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT,
                          env={**os.environ, "PGFLEET_TEST_PREFIX": "Bad-Prefix"})
    assert done.returncode == 4
    assert "PGFLEET_TEST_PREFIX='Bad-Prefix': expected lower-case letters" in done.stderr
