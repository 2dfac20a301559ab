"""A worker that exits on purpose because it could not renew its leases (exit code 67, a
database outage longer than most of a lease) is no crash: its running jobs go back with the
attempt refunded, like a stopping worker's, and are neither counted as crashed nor made
solo (outside trial: after an outage, innocent short jobs ran one at a time and were
charged). A real crash during an outage, or a task that exits with the same code, is still
charged as before."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import enqueue, wait_settled
from tests.support.fleet import Fleet, alive, settle
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults

SHORT_LEASE = {"heartbeat_interval": "0.3s", "stale_after": "2s", "lease": "4s"}
GAVE_UP = "given back: the worker could not renew its leases (attempt refunded)"


def rows(dsn: str, ids: list[int]) -> dict[int, dict[str, Any]]:
    keys = ("state", "attempt", "refunds", "crashes", "solo", "last_error", "errors")
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(f"SELECT id, state::text, {', '.join(keys[1:])}"
                             " FROM pgfleet.jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    return {r[0]: dict(zip(keys, r[1:], strict=True)) for r in found}


def finishes(dsn: str, ids: list[int]) -> dict[int, list[int]]:
    """The attempts whose task body ran to its end, per job."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT job_id, attempt FROM audit WHERE event = 'finished'"
                             " AND job_id = ANY(%s) ORDER BY job_id, attempt", (ids,)).fetchall()
    done: dict[int, list[int]] = {job_id: [] for job_id in ids}
    for job_id, attempt in found:
        done[job_id].append(attempt)
    return done


def started(dsn: str, ids: list[int]) -> int:
    return int(scalar(dsn, "SELECT count(DISTINCT job_id) FROM audit WHERE event = 'started'"
                           " AND job_id = ANY(%s)", (ids,)))


def test_jobs_cut_off_by_an_outage_longer_than_the_lease_are_refunded_not_crashed(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    dsn = db.dsn
    f = cfleet({"default": {"processes": 1, "threads": 4, "kill_grace": "1s"}},
               supervisor=SHORT_LEASE)
    [worker] = f.wait_workers(1)
    # max_attempts 1: had the lost lease been charged, these would end dead.
    ids = enqueue(dsn, [{"task": "faults.sleep_first", "args": {"seconds": 10},
                         "max_attempts": 1}] * 3)
    wait_for(lambda: started(dsn, ids) == 3)
    db.cluster.stop("fast")
    try:
        wait_for(lambda: "exited: could not renew its leases" in f.log(), timeout=30)
        assert not alive(worker)
        settle(4.0)  # the outage now outlasts the lease by far
    finally:
        db.cluster.start()
    wait_settled(dsn, log=f.log)

    log = f.log()
    for job_id, found in rows(dsn, ids).items():
        assert found == {"state": "succeeded", "attempt": 2, "refunds": 1, "crashes": 0,
                         "solo": False, "last_error": None,
                         "errors": [{**found["errors"][0], "attempt": 1, "error": GAVE_UP}]}, \
            (job_id, log[-3000:])
    # After the outage each job ran to its end exactly once, at its second attempt.
    assert finishes(dsn, ids) == {job_id: [2] for job_id in ids}
    books.check(dsn, ids)
    # A deliberate exit: no crash for the restart policy, no "worker died" anywhere.
    assert "crashed (" not in log, log[-3000:]
    assert "worker died" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_a_sigkill_during_an_outage_is_still_charged(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    dsn = db.dsn
    # A lease long enough that the worker is killed well before it would give up.
    f = cfleet({"default": {"processes": 1, "threads": 4, "kill_grace": "1s"}},
               supervisor={**SHORT_LEASE, "lease": "8s"})
    [worker] = f.wait_workers(1)
    ids = enqueue(dsn, [{"task": "faults.sleep_first", "args": {"seconds": 5},
                         "max_attempts": 2}] * 2)
    wait_for(lambda: started(dsn, ids) == 2)
    db.cluster.stop("fast")
    try:
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: "exited: SIGKILL" in f.log(), timeout=30)
        settle(8.0)  # longer than the lease
    finally:
        db.cluster.start()
    wait_settled(dsn, log=f.log)

    log = f.log()
    for job_id, found in rows(dsn, ids).items():
        assert found == {"state": "succeeded", "attempt": 2, "refunds": 0, "crashes": 1,
                         "solo": False, "last_error": None,
                         "errors": [{**found["errors"][0], "attempt": 1,
                                     "error": "worker died: SIGKILL"}]}, (job_id, log[-3000:])
    assert "could not renew its leases" not in log, log[-3000:]
    books.check(dsn, ids)


def test_a_task_that_exits_with_the_lease_lost_code_is_a_crash(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """Exit code 67 alone proves nothing: only a worker that marked its beacon slot gave
    up its leases. A task calling os._exit(67) is charged like any crash."""
    dsn = db.dsn
    f = cfleet({"default": {"processes": 1}})
    f.wait_workers(1)
    [job_id] = enqueue(dsn, [{"task": "faults.exit_first", "args": {"code": 67},
                              "max_attempts": 2}])
    wait_settled(dsn, log=f.log)
    found = rows(dsn, [job_id])[job_id]
    assert (found["state"], found["attempt"], found["refunds"], found["crashes"]) == \
        ("succeeded", 2, 0, 1)
    assert [e["error"] for e in found["errors"]] == ["worker died: exit code 67"]
    log = f.log()
    assert "exited: exit code 67" in log, log[-3000:]
    assert "crashed (1 within" in log, log[-3000:]
    books.check(dsn, [job_id])


def test_another_host_that_lost_the_database_too_leaves_them_to_their_supervisor(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """Host b watched a's leases before the outage. No holder could renew during it, so
    after it b must watch a whole lease again instead of taking a's jobs as those of a
    vanished host (charged, `lease expired`): a's own supervisor gives them back refunded."""
    dsn = db.dsn
    a = cfleet({"default": {"processes": 1, "threads": 4, "kill_grace": "1s"}}, name="a",
               supervisor=SHORT_LEASE)
    b = cfleet({"other": {"processes": 1, "kill_grace": "1s"}}, name="b",
               supervisor=SHORT_LEASE)
    a.wait_workers(1)
    b.wait_workers(1)
    ids = enqueue(dsn, [{"task": "faults.sleep_first", "args": {"seconds": 10},
                         "max_attempts": 1}] * 3)
    wait_for(lambda: started(dsn, ids) == 3)
    settle(1.0)  # b's maintenance has seen the leases
    db.cluster.stop("fast")
    try:
        wait_for(lambda: "exited: could not renew its leases" in a.log(), timeout=30)
        settle(4.0)
    finally:
        db.cluster.start()
    wait_settled(dsn, log=a.log)

    for job_id, found in rows(dsn, ids).items():
        assert (found["state"], found["attempt"], found["refunds"], found["crashes"]) == \
            ("succeeded", 2, 1, 0), (job_id, found)
        assert [e["error"] for e in found["errors"]] == [GAVE_UP], (job_id, found)
    assert "not renewed for a whole lease" not in b.log(), b.log()[-3000:]
    assert finishes(dsn, ids) == {job_id: [2] for job_id in ids}
    books.check(dsn, ids)
