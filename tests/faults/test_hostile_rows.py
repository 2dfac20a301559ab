"""Rows inserted by hand that no enqueue() would produce: the worker survives, the job
fails with a clear error, and nothing named by the row is imported or run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import enqueue, job_row, mixed_batch, wait_settled
from tests.support.fleet import Fleet

pytestmark = pytest.mark.faults


def insert(dsn: str, task: str, args_json: str, max_attempts: int = 1,
           legacy: bool = False) -> int:
    """Write a row straight into pgfleet.jobs. `legacy` writes it as a superuser past the
    args-limits trigger, as rows written before migration 0006 (limits) or 0023 (args
    that are not an object) were."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if legacy:
            conn.execute("SET session_replication_role = replica")
        row = conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, max_attempts)"
            " VALUES ('default', %s, %s::jsonb, %s)"
            " RETURNING id", (task, args_json, max_attempts)).fetchone()
    assert row is not None
    return int(row[0])


def test_hostile_rows(db: Db, cfleet: Callable[..., Fleet], tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = db.dsn
    trap = tmp_path / "trap-imported"
    pwned = tmp_path / "pwned"
    monkeypatch.setenv("PGFLEET_FAULTS_TRAP", str(trap))
    f = cfleet({"default": {"processes": 1, "threads": 2,
                            "backoff": {"initial": "0.1s", "max": "0.2s"}}})
    workers = f.wait_workers(1)

    # Incompressible, so that its stored size (pg_column_size) passes the 1 MiB limit.
    huge = json.dumps({"blob": os.urandom(1024 * 1024).hex()})
    hostile = {
        insert(dsn, "no_such_task", "{}", max_attempts=3): "unknown task 'no_such_task'",
        insert(dsn, "os.system", json.dumps({"command": f"touch {pwned}"})):
            "unknown task 'os.system'",
        insert(dsn, "builtins.exec", json.dumps({"source": f"open('{pwned}', 'w')"})):
            "unknown task 'builtins.exec'",
        insert(dsn, "tests.faults.trap.spring", "{}"): "unknown task 'tests.faults.trap.spring'",
        # Refused on insert since migration 0023; rows stored before fail alone.
        insert(dsn, "noop", '"not an object"', max_attempts=5, legacy=True):
            "invalid arguments: args must be a JSON object, got str",
        insert(dsn, "noop", "[1, 2, 3]", max_attempts=5, legacy=True):
            "invalid arguments: args must be a JSON object, got list",
        insert(dsn, "sleep", '{"seconds": 0.01, "rm": "-rf /"}', max_attempts=5):
            "invalid arguments",
        insert(dsn, "noop", huge, max_attempts=5, legacy=True): "over the limit of 1048576",
    }
    ids = [*hostile, *enqueue(dsn, mixed_batch(50, n_sleep=5))]
    wait_settled(dsn, log=f.log)

    for job_id, expected in hostile.items():
        row = job_row(dsn, job_id)
        assert row["state"] == "dead", (job_id, row)
        assert expected in row["last_error"], (job_id, row["last_error"])
    # Permanent problems die at once; an unknown task is retried up to its max (a rolling
    # deploy may bring it), then dies.
    assert job_row(dsn, next(iter(hostile)))["attempt"] == 3
    assert all(job_row(dsn, i)["attempt"] == 1 for i in list(hostile)[4:])
    assert not trap.exists(), trap.read_text()
    assert not pwned.exists()
    assert f.workers().keys() == workers.keys(), "a hostile row took a worker down"
    result = books.check(dsn, ids)
    assert result.states == {"dead": len(hostile), "succeeded": len(ids) - len(hostile)}


DEEP = '{"a":' * 2000 + "1" + "}" * 2000  # Python's json decoder gives up near 1,000


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        line = next(x for x in handle if x.startswith("VmHWM:"))
    return int(line.split()[1])


def test_deep_row_fails_alone(db: Db, cfleet: Callable[..., Fleet]) -> None:
    """A row nested 2,000 deep, claimed in one batch with six innocent jobs of a single
    attempt: it ends dead with a clear error, they succeed, the worker lives on."""
    dsn = db.dsn
    deep = insert(dsn, "noop", DEEP, legacy=True)
    innocent = enqueue(dsn, [{"task": "noop", "args": {"i": i}, "max_attempts": 1}
                             for i in range(6)])
    f = cfleet({"default": {"processes": 1, "threads": 2}})
    workers = f.wait_workers(1)
    wait_settled(dsn, log=f.log)

    row = job_row(dsn, deep)
    assert row["state"] == "dead" and row["attempt"] == 1, row
    assert "args: nested deeper than 64 levels" in row["last_error"], row["last_error"]
    assert all(job_row(dsn, i)["state"] == "succeeded" for i in innocent)
    assert f.workers().keys() == workers.keys(), "the deep row took a worker down"
    result = books.check(dsn, [deep, *innocent])
    assert result.states == {"dead": 1, "succeeded": 6}

    shown = subprocess.run([sys.executable, "-m", "pgfleet", "jobs", "show", str(deep)],
                           capture_output=True, text=True, env={**os.environ,
                                                                "PGFLEET_DATABASE_URL": dsn})
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert 'args: {"a": {"a": ' in shown.stdout, shown.stdout[:500]


def test_huge_row_is_never_loaded(db: Db, cfleet: Callable[..., Fleet]) -> None:
    """60 MB of args: refused by the claim before it reaches the worker's memory."""
    dsn = db.dsn
    f = cfleet({"default": {"processes": 1, "threads": 2}})
    [pid] = f.wait_workers(1)
    before = peak_rss_kib(pid)
    huge = insert(dsn, "noop", json.dumps({"blob": os.urandom(30 * 1024 * 1024).hex()}),
                  max_attempts=3, legacy=True)
    innocent = enqueue(dsn, mixed_batch(6))
    wait_settled(dsn, log=f.log)

    grown = peak_rss_kib(pid) - before
    assert grown < 20 * 1024, f"the worker's peak memory grew by {grown} KiB"
    assert f.workers().keys() == {pid}
    row = job_row(dsn, huge)
    assert row["state"] == "dead" and row["attempt"] == 1, row
    assert "over the limit of 1048576 bytes (not loaded)" in row["last_error"]
    result = books.check(dsn, [huge, *innocent])
    assert result.states == {"dead": 1, "succeeded": 6}


@pytest.mark.parametrize(("args_json", "problem"), [
    (DEEP, "args are nested deeper than 64 levels"),
    ('{"a":' * 65 + "1" + "}" * 65, "args are nested deeper than 64 levels"),
    # About the smallest object nested 65 deep (528 bytes; migration 0019 walks args
    # from 512 bytes up).
    ('{"":' + "[" * 64 + "null" + "]" * 64 + "}", "args are nested deeper than 64 levels"),
    (json.dumps({"blob": "x" * (1024 * 1024)}), "over the limit of 1048576 bytes"),
], ids=["2000-deep", "65-deep", "65-deep-arrays", "over-1MiB"])
def test_sql_refuses_args_over_the_limits(db: Db, args_json: str, problem: str) -> None:
    """pgfleet.enqueue and a direct INSERT refuse what the worker would refuse."""
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        for statement in ("SELECT pgfleet.enqueue('noop', %s::jsonb)",
                          "INSERT INTO pgfleet.jobs (task, queue, args)"
                          " VALUES ('noop', 'default', %s::jsonb)"):
            with pytest.raises(psycopg.errors.ProgramLimitExceeded, match=problem):
                conn.execute(statement, (args_json,))
        ok = '{"a":' * 64 + "1" + "}" * 64  # exactly 64 levels pass
        assert conn.execute("SELECT pgfleet.enqueue('noop', %s::jsonb)", (ok,)).fetchone()
        assert conn.execute("SELECT count(*) FROM pgfleet.jobs").fetchone() == (1,)


def test_sql_refuses_deep_args_stored_compressed(db: Db) -> None:
    """Args read from a table that stores them compressed reach the trigger as stored:
    migration 0019 walks those whatever their stored size, and refuses them."""
    deep = '{"a": ' * 300 + "null" + "}" * 300
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE packed (args jsonb)")
        conn.execute("INSERT INTO packed VALUES (%s::jsonb)", (deep,))
        stored = conn.execute("SELECT pg_column_compression(args) FROM packed").fetchone()
        assert stored is not None and stored[0] is not None
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="deeper than 64"):
            conn.execute("INSERT INTO pgfleet.jobs (task, queue, args)"
                         " SELECT 'noop', 'default', args FROM packed")
        assert conn.execute("SELECT count(*) FROM pgfleet.jobs").fetchone() == (0,)
