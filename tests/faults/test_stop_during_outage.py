"""A graceful stop that meets a database outage (outside trial T10): the workers give up
their leases and exit, and the maintenance process used to try its final rescue once,
fail, and exit; the supervisor exited 0 and the jobs stayed `running` until another
host's lease watch charged them, so prefetched jobs that never ran ended dead. The final
rescue now waits for the database (up to a lease, within the stop's deadline)."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from pgfleet.runtime.exit_codes import EXIT_RESCUE_FAILED
from tests.faults.conftest import Db
from tests.faults.helpers import audited, enqueue, job_row, wait_settled
from tests.support.fleet import Fleet, settle
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults

# A lease of a few seconds, so the workers give up during a short outage.
SHORT_LEASE = {"heartbeat_interval": "0.3s", "stale_after": "2s", "lease": "6s",
               "shutdown_timeout": "30s"}
NOT_CHARGED = "(not running its task: not charged)"


def _start(db: Db, cfleet: Callable[..., Fleet], **supervisor: str) -> tuple[Fleet, list[int]]:
    f = cfleet({"default": {"processes": 1, "threads": 1, "prefetch": 10,
                            "kill_grace": "1s"}}, supervisor={**SHORT_LEASE, **supervisor})
    f.wait_workers(1)
    ids = enqueue(db.dsn, [{"task": "spin", "args": {"seconds": 60}, "priority": -1},
                           *[{"task": "noop", "max_attempts": 1}] * 5])
    wait_for(lambda: scalar(db.dsn, "SELECT count(*) FROM pgfleet.jobs"
                                    " WHERE state = 'running'") == 6)
    # The spinner's first act writes to the database (its "started" audit). Stopped
    # under that write (CI, under load), the task failed, the one thread went on to the
    # prefetched jobs, which failed the same way, and the last two were rightly given
    # back as having run: the outage must begin once it spins, as in test_lease_lost.
    wait_for(lambda: audited(db.dsn, "started") == 1)
    return f, ids


def test_a_stop_during_an_outage_gives_the_jobs_back_once_the_database_returns(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    f, ids = _start(db, cfleet)
    spinner, prefetched = ids[0], ids[1:]
    db.cluster.stop("fast")
    try:
        f.signal(signal.SIGTERM)
        wait_for(lambda: "could not renew its leases" in f.log(), timeout=30)
        settle(2)  # the final rescue meets the database down at least once
    finally:
        db.cluster.start()
    assert f.wait(60) == 0, f.log()[-3000:]
    for job_id in prefetched:
        row = job_row(db.dsn, job_id)
        assert (row["state"], row["attempt"]) == ("queued", 0), (job_id, row)
        assert row["last_error"].endswith(NOT_CHARGED), row
    row = job_row(db.dsn, spinner)
    assert (row["state"], row["attempt"]) == ("queued", 1), row
    assert row["last_error"].endswith("(attempt refunded)"), row


def test_a_stop_that_cannot_give_the_jobs_back_says_so_and_exits_non_zero(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """The database stays away past the stop's deadline: the jobs wait for their lease,
    and the supervisor does not pretend otherwise."""
    f, _ = _start(db, cfleet, shutdown_timeout="3s")
    db.cluster.stop("fast")
    try:
        f.signal(signal.SIGTERM)
        assert f.wait(60) == EXIT_RESCUE_FAILED, f.log()[-3000:]
    finally:
        db.cluster.start()
    assert "wait for their lease" in f.log(), f.log()[-3000:]
    # Outside trial T12: past the deadline the stop spawned maintenance processes that it
    # SIGKILLed at once, which the log told as kills from outside.
    assert f.log().count("spawned maintenance") == 1, f.log()[-3000:]


def test_stop_signals_repeated_during_an_outage_still_report_what_was_not_given_back(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """Outside trial T10b: three TERMs during an outage killed the workers, and the
    maintenance process asked to give their jobs back was killed at the stop's deadline
    with the database still away; the supervisor exited 0, hiding that the jobs were left
    to their lease."""
    f, _ = _start(db, cfleet)
    db.cluster.stop("fast")
    try:
        for step in ("stopping gracefully", "quick stop", "killing the workers"):
            f.signal(signal.SIGTERM)
            wait_for(lambda: step in f.log())  # noqa: B023 - read within this iteration
        assert f.wait(60) == EXIT_RESCUE_FAILED, f.log()[-3000:]
    finally:
        db.cluster.start()
    assert "wait for their lease" in f.log(), f.log()[-3000:]


def test_a_stop_with_the_database_away_since_the_start_exits_cleanly(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """Outside trial T12: workers that never reached the database were taken for workers
    with jobs to give back, so the stop waited for the database, then exited 69 saying
    the jobs of stopped workers waited for their lease. They never claimed any."""
    db.cluster.stop("fast")
    try:
        f = cfleet({"default": {"processes": 2, "kill_grace": "1s"}}, supervisor=SHORT_LEASE)
        wait_for(lambda: len(f.workers()) == 2)
        wait_for(lambda: f.log().count("cannot connect to the database") >= 2)
        f.signal(signal.SIGTERM)
        assert f.wait(60) == 0, f.log()[-3000:]
    finally:
        db.cluster.start()
    assert "wait for their lease" not in f.log(), f.log()[-3000:]


def test_jobs_claimed_ahead_wait_for_the_database_instead_of_running_unrecorded(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """Outside trial T12: a worker cut off from the database kept starting the jobs it had
    claimed ahead; they ran to their end unrecorded, and again after it gave up its
    leases. Now they wait for the database, and go back uncharged, never run, if it
    stays away for most of a lease. The running job's task fails at its next write."""
    f = cfleet({"default": {"processes": 1, "threads": 1, "prefetch": 10,
                            "kill_grace": "1s"}}, supervisor=SHORT_LEASE)
    f.wait_workers(1)
    ids = enqueue(db.dsn, [{"task": "sleep", "args": {"seconds": 3}, "priority": -1},
                           *[{"task": "noop", "max_attempts": 1}] * 5])
    wait_for(lambda: audited(db.dsn, "started") == 1)
    db.cluster.stop("fast")
    try:
        wait_for(lambda: "exited: could not renew its leases" in f.log(), timeout=30)
    finally:
        db.cluster.start()
    wait_settled(db.dsn, log=f.log)
    # Given back never run (the attempt back to 0), then run once by the new worker.
    for job_id in ids[1:]:
        row = job_row(db.dsn, job_id)
        assert (row["state"], row["attempt"]) == ("succeeded", 1), (job_id, row)
        assert [e["error"].endswith(NOT_CHARGED) for e in row["errors"]] == [True], row
