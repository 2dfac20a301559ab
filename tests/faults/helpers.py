"""Small helpers shared by the fault scenarios."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

import pgfleet
from tests.support import pg
from tests.support.cluster import Cluster
from tests.support.workers import scalar, wait_for

# Task modules of every supervisor and worker of the suite.
TASKS = ["tests.support.jobtasks", "tests.faults.faulttasks"]


def mixed_batch(n_noop: int, n_sleep: int = 0, n_fail_once: int = 0,
                sleep: float = 0.3, queue: str = "default") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"task": "noop", "args": {"i": i}, "queue": queue}
                                  for i in range(n_noop)]
    rows += [{"task": "sleep", "args": {"seconds": sleep}, "queue": queue}] * n_sleep
    rows += [{"task": "fail_once", "queue": queue}] * n_fail_once
    return rows


def enqueue(dsn: str, rows: list[dict[str, Any]]) -> list[int]:
    return pgfleet.enqueue_many(dsn, rows)


def unfinished(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                           " WHERE state IN ('queued', 'running')"))


def audited(dsn: str, event: str = "finished") -> int:
    return int(scalar(dsn, "SELECT count(*) FROM audit WHERE event = %s", (event,)))


def wait_settled(dsn: str, timeout: float = 90, log: Callable[[], str] | None = None) -> None:
    """Every job has ended (a generous bound, only against hangs). On a timeout, say which
    jobs are stuck and how."""
    try:
        wait_for(lambda: unfinished(dsn) == 0, timeout=timeout, interval=0.2)
    except AssertionError as exc:
        with psycopg.connect(dsn, autocommit=True) as conn:
            stuck = conn.execute(
                "SELECT id, task, state::text, attempt, lease_holder,"
                " lease_expires_at - now(), run_at - now(), last_error FROM pgfleet.jobs"
                " WHERE state IN ('queued', 'running') ORDER BY id LIMIT 10").fetchall()
        tail = log()[-4000:] if log else ""
        raise AssertionError(f"{exc}; {unfinished(dsn)} unfinished, e.g. {stuck}\n{tail}") \
            from None


def job_row(dsn: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(
            "SELECT state::text, attempt, last_error, errors, finished_at, lease_holder"
            " FROM pgfleet.jobs WHERE id = %s", (job_id,))
        row = cur.fetchone()
    assert row is not None, f"job {job_id} is missing"
    keys = ("state", "attempt", "last_error", "errors", "finished_at", "lease_holder")
    return dict(zip(keys, row, strict=True))


def create_runtime_role(cluster: Cluster, dbname: str, role: str,
                        password: str | None = None) -> None:
    """A LOGIN role with no DDL rights (not superuser, not owner, no CREATE anywhere),
    with the grants `pgfleet grants --runtime` prints (tests.support.pg.grant_runtime)."""
    with cluster.admin(dbname) as conn:
        pg.ensure_role(conn, role, password)
        pg.grant_runtime(conn, dbname, role, audit=False)
