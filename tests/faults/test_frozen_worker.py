"""A worker frozen with SIGSTOP.

Supervised, it is killed by its supervisor (stale heartbeat) before its lease can run out,
so the job's second run never overlaps a live first run. Unsupervised (a host that froze),
its lease runs out, the job is rescued and finished elsewhere; when it wakes (SIGCONT) its
late outcome is refused by the fence (holder + attempt), logged and counted."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

import pgfleet
from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import job_row
from tests.support.fleet import Fleet, alive
from tests.support.rescue import rescue_all
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults

# A lease that runs out within seconds; it must exceed stale_after + kill_grace.
SHORT_LEASE = {"heartbeat_interval": "0.3s", "stale_after": "2s", "lease": "4s"}


def runner_pid(dsn: str, job_id: int, attempt: int) -> int | None:
    pid = scalar(dsn, "SELECT pid FROM audit WHERE job_id = %s AND attempt = %s"
                      " AND event = 'started'", (job_id, attempt))
    return None if pid is None else int(pid)


def test_supervisor_kills_a_frozen_worker_before_its_lease_expires(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    dsn = db.dsn
    f = cfleet({"default": {"processes": 2, "kill_grace": "1s"}}, supervisor=SHORT_LEASE)
    f.wait_workers(2)
    job_id = pgfleet.enqueue(dsn, "sleep", {"seconds": 3.0})
    frozen = wait_for(lambda: runner_pid(dsn, job_id, 1))
    os.kill(frozen, signal.SIGSTOP)
    try:
        wait_for(lambda: not alive(frozen), timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(frozen, signal.SIGCONT)
    wait_for(lambda: job_row(dsn, job_id)["state"] == "succeeded", timeout=30)
    row = job_row(dsn, job_id)
    assert row["attempt"] == 2
    # Rescued by the reap of the killed process, not by the lease running out.
    assert row["errors"][0]["error"] == "worker died: SIGKILL (heartbeat stale)"
    assert "has not beaten" in f.log()
    books.check(dsn, [job_id])


def start_lone_worker(dsn: str, lease: float, out: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.faults.lone_worker", dsn, str(lease)],
            stdout=sink, stderr=subprocess.STDOUT)


def test_a_frozen_host_wakes_up_after_its_job_finished_elsewhere(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    """SIGSTOP past the lease: on SIGCONT the worker sees it could not renew its leases
    in time and exits without writing its (late) outcome."""
    dsn = db.dsn
    out = tmp_path / "lone.log"
    lone = start_lone_worker(dsn, 2.0, out)
    try:
        job_id = pgfleet.enqueue(dsn, "faults.sleep_fail_first", {"seconds": 2.0})
        wait_for(lambda: runner_pid(dsn, job_id, 1) == lone.pid)
        lone.send_signal(signal.SIGSTOP)
        # Another host: its maintenance rescues the expired lease, its worker runs it.
        f = cfleet({"default": {"processes": 1, "kill_grace": "1s"}}, supervisor=SHORT_LEASE)
        wait_for(lambda: job_row(dsn, job_id)["state"] == "succeeded", timeout=60)
        done = job_row(dsn, job_id)
        assert done["attempt"] == 2, (done, f.log()[-3000:])
        assert done["errors"][0]["error"].startswith("lease expired")
        assert runner_pid(dsn, job_id, 2) in f.workers()

        lone.send_signal(signal.SIGCONT)
        assert lone.wait(30) != 0
        assert "could not renew its leases" in out.read_text(), out.read_text()
        assert job_row(dsn, job_id) == done  # the late outcome changed nothing
    finally:
        if lone.poll() is None:
            lone.send_signal(signal.SIGCONT)
            lone.kill()
            lone.wait(10)
    books.check(dsn, [job_id], presumed_dead_pids=[lone.pid])


def test_a_late_outcome_is_refused_by_the_fence(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    """The database decided the lease ran out while the worker still runs the job (a
    renewal that did not land in time): the job runs elsewhere, and the first run's late
    outcome is refused by the fence (holder + attempt), logged and counted."""
    dsn = db.dsn
    out = tmp_path / "lone.log"
    lone = start_lone_worker(dsn, 30.0, out)
    try:
        # Attempt 1 sleeps then fails; attempt 2 succeeds. Unfenced, the late failure of
        # attempt 1 would send the running (then finished) job back to the queue.
        job_id = pgfleet.enqueue(dsn, "faults.sleep_fail_first", {"seconds": 10.0})
        wait_for(lambda: runner_pid(dsn, job_id, 1) == lone.pid)
        # The other host is up before the rescue: the lone worker, busy with attempt 1,
        # must not be the one that claims attempt 2 (on a slow machine it could be).
        f = cfleet({"default": {"processes": 1}})
        f.wait_workers(1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            # As a lease watch would once it saw the lease unrenewed for a whole lease.
            assert rescue_all(conn) == [job_id]
        wait_for(lambda: runner_pid(dsn, job_id, 2) in f.workers(), timeout=30)
        wait_for(lambda: "lease lost" in out.read_text(), timeout=30)
        wait_for(lambda: job_row(dsn, job_id)["state"] == "succeeded", timeout=30)
        done = job_row(dsn, job_id)
        assert done["attempt"] == 2
        # Only the rescue is in the error list: the refused failure left no trace.
        assert [e["error"][:13] for e in done["errors"]] == ["lease expired"]
        lone.send_signal(signal.SIGTERM)
        lone.wait(30)
        assert "lease_lost=1" in out.read_text(), out.read_text()
    finally:
        if lone.poll() is None:
            lone.kill()
            lone.wait(10)
    # Attempt 1 was alive (it sent its outcome: "lease lost") while attempt 2 ran.
    result = books.check(dsn, [job_id], presumed_dead_pids=[lone.pid])
    assert result.jobs[job_id].runs[0].pid == lone.pid
