"""Rows inserted by hand that no enqueue() would produce: the worker survives, the job
fails with a clear error, and nothing named by the row is imported or run."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import enqueue, job_row, mixed_batch, wait_settled
from tests.support.fleet import Fleet

pytestmark = pytest.mark.faults


def insert(dsn: str, task: str, args_json: str, max_attempts: int = 1) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
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
        insert(dsn, "noop", '"not an object"', max_attempts=5):
            "invalid arguments: args must be a JSON object, got str",
        insert(dsn, "noop", "[1, 2, 3]", max_attempts=5):
            "invalid arguments: args must be a JSON object, got list",
        insert(dsn, "sleep", '{"seconds": 0.01, "rm": "-rf /"}', max_attempts=5):
            "invalid arguments",
        insert(dsn, "noop", huge, max_attempts=5): "over the limit of 1048576",
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
