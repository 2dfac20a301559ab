"""Never twice at once: a job is released (given back, or its failure recorded) only once
the thread that ran it is known stopped; otherwise it stays leased until its process is
gone. Each scenario runs a task that holds the GIL in long C calls on one supervisor while
a second supervisor on the same database waits to pick the job up; the books then prove
that no two runs of the job overlapped and no attempt number ran in two processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import pgfleet
from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import job_row, wait_settled
from tests.support.fleet import Fleet
from tests.support.proxy import Proxy, server_address
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults

QUICK = {"heartbeat_interval": "0.3s", "stale_after": "10s", "lease": "20s",
         "shutdown_timeout": "1s"}


def runner_pid(dsn: str, job_id: int) -> int | None:
    pid = scalar(dsn, "SELECT pid FROM audit WHERE job_id = %s AND event = 'started'"
                      " ORDER BY at LIMIT 1", (job_id,))
    return None if pid is None else int(pid)


@pytest.mark.parametrize("stop", ["int", "term", "abandon"])
def test_a_job_is_released_only_once_its_thread_stopped(
        db: Db, cfleet: Callable[..., Fleet], stop: str) -> None:
    dsn = db.dsn
    # A kill_grace long enough for a sort to end, except where the job must be abandoned.
    grace = "1s" if stop == "abandon" else "6s"
    queue = {"processes": 1, "kill_grace": grace, "timeout": "3s" if stop == "abandon"
             else "120s"}
    first = cfleet({"default": queue}, name="first", supervisor=QUICK)
    [worker] = first.wait_workers(1)
    # 15 s of sorts on the attempt that is stopped; the rerun that ends it sorts briefly
    # (abandoned, every attempt must outlast its timeout).
    job_id = pgfleet.enqueue(dsn, "faults.gil_sort",
                             {"seconds": 15.0, "stubborn": stop == "abandon", "size": 1_000_000,
                              "later": None if stop == "abandon" else 0.5},
                             max_attempts=2)
    wait_for(lambda: runner_pid(dsn, job_id) == worker, timeout=30)
    second = cfleet({"default": queue}, name="second", supervisor=QUICK)
    second.wait_workers(1)
    if stop == "int":
        os.kill(worker, signal.SIGINT)
    elif stop == "term":
        first.signal(signal.SIGTERM)
    # "abandon": the job swallows its timeout interrupt; the worker gives up on it.
    wait_settled(dsn, timeout=120, log=lambda: first.log() + second.log())
    result = books.check(dsn, [job_id])
    row = job_row(dsn, job_id)
    assert len(result.jobs[job_id].runs) >= 2, (row, result.summary())
    if stop == "abandon":
        assert row["state"] == "dead"
        assert row["errors"][0]["error"] == "worker died: job timeout"
    else:
        assert row["state"] == "succeeded", (row, first.log()[-3000:])
        assert row["errors"][0]["error"] == "given back: the worker stopped (attempt refunded)"


def test_a_task_that_interrupts_its_worker_cannot_loop(
        db: Db, cfleet: Callable[..., Fleet]) -> None:
    """interrupt_main() looks like a SIGINT to the worker: each run is given back. The
    first three give-backs are refunded, the fourth counts: with max_attempts=1 the job
    ends dead at attempt 4 instead of looping for ever."""
    dsn = db.dsn
    f = cfleet({"default": {"processes": 1, "kill_grace": "2s"}}, supervisor=QUICK)
    f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, "faults.interrupt_main", {"seconds": 5.0}, max_attempts=1)
    wait_settled(dsn, timeout=120, log=f.log)
    row = job_row(dsn, job_id)
    assert row["state"] == "dead", row
    assert row["attempt"] == 4
    assert scalar(dsn, "SELECT refunds FROM pgfleet.jobs WHERE id = %s", (job_id,)) == 3
    assert row["last_error"] == "given back: the worker stopped (attempt counted: 3 refunds used)"
    result = books.check(dsn, [job_id])
    assert len({run.pid for run in result.jobs[job_id].runs}) == 4


def test_a_worker_cut_off_by_a_blackhole_stops_before_its_lease_expires(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    """A lone worker (no supervisor) whose database traffic vanishes without a reset: its
    main thread blocks in a database call that never returns. The lease watchdog ends the
    process before the lease (6 s) can expire; another host then runs the job."""
    dsn = db.dsn
    proxy = Proxy(server_address(dsn))
    out = tmp_path / "lone.log"
    with open(out, "wb") as sink:
        lone = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.lone_worker", proxy.dsn(dsn), "6"],
            stdout=sink, stderr=subprocess.STDOUT)
    try:
        # 20 s on the cut-off attempt, a moment on the rerun elsewhere.
        job_id = pgfleet.enqueue(dsn, "faults.spin_first", {"seconds": 20.0})
        wait_for(lambda: runner_pid(dsn, job_id) == lone.pid, timeout=30)
        proxy.blackhole()
        assert lone.wait(60) != 0
        assert "could not renew its leases" in out.read_text(), out.read_text()
        # The rescuer's lease is the lone worker's (6 s), not the test fleets' 30 s.
        f = cfleet({"default": {"processes": 1, "kill_grace": "2s"}},
                   supervisor={"heartbeat_interval": "0.3s", "stale_after": "2s",
                               "lease": "6s"})
        wait_settled(dsn, timeout=120, log=f.log)
    finally:
        if lone.poll() is None:
            lone.kill()
            lone.wait(10)
        proxy.close()
    row = job_row(dsn, job_id)
    assert row["state"] == "succeeded" and row["attempt"] == 2, row
    assert row["errors"][0]["error"].startswith("lease expired")
    books.check(dsn, [job_id])
