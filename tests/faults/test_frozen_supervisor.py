"""A frozen supervisor (SIGSTOP) cannot reap its dead worker, kill the worker's process
group or kill a frozen worker. The worker's keeper (pgfleet.runtime.keeper) does it
instead: the processes the job started are gone before its lease can expire, and another
host runs the job's next attempt only once no process of the first run is alive.

The task `faults.marker_child` starts a shell whose background child (the job's
grandchild) appends "PID TIME" to a marker file ten times a second."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from pgfleet.runtime.process_groups import live_members
from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import job_row, wait_settled
from tests.faults.test_job_processes import assert_silent_after_release, start_job
from tests.support.fleet import Fleet, alive
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults

LEASE = 6.0
SUPERVISOR = {"heartbeat_interval": "0.3s", "stale_after": "2s", "lease": f"{LEASE:.0f}s",
              "shutdown_timeout": "1s"}
QUEUE = {"default": {"processes": 1, "kill_grace": "1s"}}


def second_attempt_started(dsn: str, job_id: int) -> datetime:
    value = scalar(dsn, "SELECT min(at) FROM audit WHERE job_id = %s AND attempt = 2"
                        " AND event = 'started'", (job_id,))
    assert isinstance(value, datetime), value
    return value


@pytest.mark.parametrize("fault", ["worker killed", "worker frozen"])
def test_a_frozen_supervisors_job_processes_die_before_the_lease_expires(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path, fault: str) -> None:
    """Host a's supervisor is SIGSTOPped, then its worker is SIGKILLed (or SIGSTOPped too)
    while its job's grandchild writes. Host b runs the job once the lease watch rescues
    it. No process of the first run may be alive by then, nor past the lease."""
    dsn = db.dsn
    a = cfleet(QUEUE, name="a", supervisor=SUPERVISOR)
    [worker] = a.wait_workers(1)
    marker = tmp_path / "marks"
    job_id, grandchild = start_job(dsn, marker, worker)
    first_run = live_members(worker)  # the worker, the task's shell, the grandchild
    assert {worker, grandchild} < set(first_run), first_run
    b = cfleet(QUEUE, name="b", supervisor=SUPERVISOR)
    b.wait_workers(1)
    a.signal(signal.SIGSTOP)
    try:
        os.kill(worker, signal.SIGKILL if fault == "worker killed" else signal.SIGSTOP)
        # A bound against a hang; what counts is the comparison with the lease below.
        wait_for(lambda: not any(alive(pid) for pid in first_run), timeout=2 * LEASE,
                 interval=0.02)
        gone = time.time()
        row = job_row(dsn, job_id)
        assert (row["state"], row["attempt"]) == ("running", 1), row  # not rescued yet
        # The expiry the worker's last renewal wrote, by the server's clock (this host's).
        expires = scalar(dsn, "SELECT lease_expires_at FROM pgfleet.jobs WHERE id = %s",
                         (job_id,))
        assert isinstance(expires, datetime)
        assert gone < expires.timestamp(), f"{gone - expires.timestamp():.3f}s past expiry"
        # The lease watch of either host rescues it; b's worker runs attempt 2.
        wait_settled(dsn, timeout=120, log=lambda: a.log() + b.log())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGCONT)
        a.signal(signal.SIGCONT)
    row = job_row(dsn, job_id)
    assert row["state"] == "succeeded" and row["attempt"] == 2, row
    assert row["errors"][0]["error"].startswith("lease expired"), row
    assert second_attempt_started(dsn, job_id).timestamp() > gone
    assert_silent_after_release(dsn, job_id, marker, grandchild)
    if fault == "worker killed":
        wait_for(lambda: f"worker {worker} is gone; killed" in a.log(), timeout=10)
    else:
        wait_for(lambda: f"worker {worker} has not renewed its leases" in a.log(), timeout=10)
        # Awake again, the supervisor reaps the worker and says who killed it.
        wait_for(lambda: f"pid {worker} exited: SIGKILL (by its keeper: leases not renewed)"
                 in a.log(), timeout=10)
    books.check(dsn, [job_id])
