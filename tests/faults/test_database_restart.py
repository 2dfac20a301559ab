"""PostgreSQL restarted under a busy run, fast and then immediate (a crash): workers and
listeners reconnect with backoff, poll on reconnect, and the books balance."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import audited, enqueue, job_row, mixed_batch, wait_settled
from tests.support.fleet import Fleet, settle
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults


def test_restart_fast_then_immediate_mid_run(db: Db, cfleet: Callable[..., Fleet]) -> None:
    dsn = db.dsn
    f = cfleet({"default": {"processes": 2, "threads": 4}})
    workers = f.wait_workers(2)
    ids = enqueue(dsn, mixed_batch(400, n_sleep=60, n_fail_once=30))

    wait_for(lambda: audited(dsn) >= 50)
    db.cluster.restart("fast")
    ids += enqueue(dsn, mixed_batch(200, n_sleep=20))
    wait_for(lambda: audited(dsn) >= 300, timeout=60)

    db.cluster.restart("immediate")
    ids += enqueue(dsn, mixed_batch(200, n_sleep=20, n_fail_once=10))
    wait_settled(dsn, log=f.log)

    result = books.check(dsn, ids)
    print("restart fast+immediate:", result.summary())
    assert result.states == {"succeeded": len(ids)}
    log = f.log()
    assert log.count("lost its database connection") >= 2, log[-3000:]
    assert "reconnected" in log
    assert "listener connection lost" in log
    # The workers rode out both restarts in place: nothing crashed, nothing was replaced.
    assert f.workers() .keys() == workers.keys(), log[-3000:]
    assert "Traceback" not in log, log[-3000:]


# Liveness settings short enough that a lease runs out within seconds; the lease must
# still exceed stale_after + kill_grace (config validation enforces it).
SHORT_LEASE = {"heartbeat_interval": "0.3s", "stale_after": "2s", "lease": "4s"}


def test_a_claim_whose_answer_was_lost_is_not_held_forever(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """A crash between the claim's commit and its answer leaves a job `running` under a
    live worker that never heard of it. The worker must not keep renewing that lease:
    it expires, the job is rescued and runs."""
    dsn = db.dsn
    f = cfleet({"default": {"processes": 1, "kill_grace": "1s"}}, supervisor=SHORT_LEASE)
    f.wait_workers(1)
    holder = wait_for(lambda: scalar(
        dsn, "SELECT id FROM pgfleet.processes WHERE kind = 'worker'"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgfleet.enqueue('noop', '{}', queue => 'elsewhere')")
        # Exactly what the claim statement commits, for a queue the worker does not
        # serve, so only the lost-answer path can explain the row.
        row = conn.execute(
            "UPDATE pgfleet.jobs SET state = 'running', attempt = 1, lease_holder = %s,"
            " lease_expires_at = now() + interval '4 seconds', started_at = now()"
            " RETURNING id", (holder,)).fetchone()
    assert row is not None
    job_id = int(row[0])
    wait_for(lambda: job_row(dsn, job_id)["state"] == "queued", timeout=30)
    after = job_row(dsn, job_id)
    assert "lease expired" in after["last_error"]
    assert after["attempt"] == 1


def test_an_outage_longer_than_stale_after_kills_no_child(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """Issue 13 item 8: every child keeps beating while it waits for the database (its
    connects and its backoff sleeps), so an outage of several stale_after periods is
    ridden out in place; the maintenance process used to sleep unbeaten between failed
    passes and was killed in every outage."""
    dsn = db.dsn
    f = cfleet({"default": {"processes": 1}}, schedules={
        "tick": {"cron": "0 3 * * *", "task": "noop"}},
        supervisor={"stale_after": "2s", "heartbeat_interval": "0.3s"})
    f.wait_workers(1)
    wait_for(lambda: len(f.children()) == 3)  # worker, maintenance, scheduler
    before = f.children()
    db.cluster.stop("fast")
    try:
        settle(15)  # past the 10 s cap of every reconnect backoff
    finally:
        db.cluster.start()
    assert f.children() == before, f.log()[-3000:]
    job_id = enqueue(dsn, [{"task": "noop"}])[0]
    wait_for(lambda: job_row(dsn, job_id)["state"] == "succeeded", timeout=60)
    log = f.log()
    assert "has not beaten" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_an_outage_is_one_line_per_process_not_one_per_retry(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """Outside trial: a 30 s outage made about 25 "listener connection lost" lines per
    process and a three-line warning per failed maintenance pass. Each process now says
    each error of a run once (T12: a lost connection, then what keeps it from coming
    back), retries at DEBUG, and says when it is back."""
    f = cfleet({"default": {"processes": 2, "threads": 2}})
    f.wait_workers(2)
    wait_for(lambda: f.log().count("worker") >= 2 and "started on queue" in f.log())
    # The listeners are up: each worker's listening connection has run its LISTEN (or
    # already its later liveness probe).
    wait_for(lambda: scalar(
        db.dsn, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name LIKE 'pgfleet worker%'"
                " AND (query LIKE 'LISTEN %' OR query = 'SELECT 1')") >= 2)
    db.cluster.stop("fast")
    # Long enough for several retries of each (backoff from 0.1 s, doubling).
    wait_for(lambda: f.log().count("lost its database connection") >= 2, timeout=30)
    settle(8.0)
    db.cluster.start()
    wait_for(lambda: f.log().count("reconnected") >= 3, timeout=60)
    log = f.log()
    for what, processes in (("listener connection lost", 2), ("maintenance pass failed", 1),
                            ("lost its database connection", 2)):
        said = _warnings(log, what)
        assert len({pid for pid, _ in said}) == processes, log[-3000:]
        assert len(said) == len(set(said)) <= 3 * processes, log[-3000:]  # no repeat
    assert "This probably means" not in log  # psycopg's second and third lines


def _warnings(log: str, what: str) -> list[tuple[str, str]]:
    """(pid, error) of each WARNING line saying `what` (…[pid] logger: what (retrying in
    Ns): error)."""
    found = []
    for line in log.splitlines():
        if " WARNING [" in line and what in line:
            pid = line.split(" WARNING [", 1)[1].split("]", 1)[0]
            found.append((pid, line.split("): ", 1)[1]))
    return found
