"""A job's processes die with it. The task `faults.marker_child` starts a shell whose
background child (the job's grandchild) appends "PID TIME" to a marker file ten times a
second; each scenario ends the job's run from outside and proves from the marker file
that the grandchild wrote nothing after the job was released, and that it is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

import pgfleet
from tests.faults import books
from tests.faults.conftest import Db
from tests.faults.helpers import job_row, wait_settled
from tests.faults.test_never_twice import QUICK, runner_pid
from tests.support.fleet import Fleet, alive
from tests.support.proxy import Proxy, server_address
from tests.support.workers import scalar, wait_for

pytestmark = pytest.mark.faults

ONE_WORKER = {"processes": 1, "kill_grace": "2s"}
# The lease tests.faults.lone_worker is started with ("6"), for the host that rescues it.
LONE_LEASE = {"heartbeat_interval": "0.3s", "stale_after": "2s", "lease": "6s"}


def marks(path: Path) -> list[tuple[int, float]]:
    """(pid, epoch seconds) of every complete line of a marker file."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    found = []
    for line in lines:
        pid, _, stamp = line.partition(" ")
        if pid.isdigit() and stamp.replace(".", "").isdigit():
            found.append((int(pid), float(stamp)))
    return found


def released_at(dsn: str, job_id: int) -> datetime:
    """When the first attempt's end was recorded (its entry in the job's errors)."""
    value = scalar(dsn, "SELECT (errors->0->>'at')::timestamptz FROM pgfleet.jobs"
                        " WHERE id = %s", (job_id,))
    assert isinstance(value, datetime), value
    return value


def start_job(dsn: str, marker: Path, worker: int, blocked: bool = False) -> tuple[int, int]:
    """Enqueue the job and wait until `worker` runs it and its grandchild writes;
    returns (job id, grandchild pid)."""
    job_id = pgfleet.enqueue(dsn, "faults.marker_child",
                             {"marker": str(marker), "seconds": 60.0, "blocked": blocked},
                             max_attempts=2)
    first = Path(f"{marker}.1")
    wait_for(lambda: len(marks(first)) >= 3, timeout=30)
    assert runner_pid(dsn, job_id) == worker
    return job_id, int(Path(f"{first}.pid").read_text())


def assert_silent_after_release(dsn: str, job_id: int, marker: Path, grandchild: int) -> None:
    first = marks(Path(f"{marker}.1"))
    assert {pid for pid, _ in first} == {grandchild}
    last = max(stamp for _, stamp in first)
    released = released_at(dsn, job_id).timestamp()
    assert last < released, f"the grandchild wrote {last - released:.3f}s after the release"
    assert not alive(grandchild)
    # The rerun's own grandchild wrote too: the marker file was readable all along.
    assert marks(Path(f"{marker}.2"))


def test_a_killed_workers_processes_die_before_its_job_is_rescued(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    """SIGKILL leaves the worker no chance to clean up: the supervisor (a subreaper)
    kills the worker's process group and rescues the job only once the group is empty."""
    dsn = db.dsn
    f = cfleet({"default": ONE_WORKER}, supervisor=QUICK)
    [worker] = f.wait_workers(1)
    marker = tmp_path / "marks"
    job_id, grandchild = start_job(dsn, marker, worker)
    os.kill(worker, signal.SIGKILL)
    wait_settled(dsn, timeout=120, log=f.log)
    row = job_row(dsn, job_id)
    assert row["state"] == "succeeded" and row["attempt"] == 2, row
    assert row["errors"][0]["error"] == "worker died: SIGKILL"
    assert_silent_after_release(dsn, job_id, marker, grandchild)
    books.check(dsn, [job_id])


def test_a_timed_out_jobs_processes_die_before_its_failure_is_recorded(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    """The worker lives on: only the processes the job's own thread started are killed."""
    dsn = db.dsn
    f = cfleet({"default": {"processes": 1, "timeout": "2s", "kill_grace": "5s"}},
               supervisor=QUICK)
    [worker] = f.wait_workers(1)
    marker = tmp_path / "marks"
    job_id, grandchild = start_job(dsn, marker, worker)
    wait_settled(dsn, timeout=120, log=f.log)
    row = job_row(dsn, job_id)
    assert row["state"] == "succeeded" and row["attempt"] == 2, row
    assert row["errors"][0]["error"] == "timed out after 2.0s"
    assert_silent_after_release(dsn, job_id, marker, grandchild)
    assert list(f.workers()) == [worker]  # the same process ran the retry
    assert "process(es) it started" in f.log()
    books.check(dsn, [job_id])


@pytest.mark.parametrize("blocked", [False, True], ids=["interruptible", "blocked"])
def test_a_jobs_processes_die_when_its_supervisor_is_killed(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path, blocked: bool) -> None:
    """The supervisor is SIGKILLed: its worker stops (parent-death signal). A job that
    the stop interrupts has its processes killed before it is given back; one blocked in
    a C call stays leased, and the worker kills its processes (the rest of its group) as
    it exits, long before the job's lease is seen unrenewed. Another supervisor reruns it."""
    dsn = db.dsn
    first = cfleet({"default": ONE_WORKER}, name="first", supervisor=QUICK)
    [worker] = first.wait_workers(1)
    marker = tmp_path / "marks"
    job_id, grandchild = start_job(dsn, marker, worker, blocked)
    first.signal(signal.SIGKILL)
    wait_for(lambda: not alive(worker), timeout=30)
    second = cfleet({"default": ONE_WORKER}, name="second", supervisor=QUICK)
    wait_settled(dsn, timeout=120, log=lambda: first.log() + second.log())
    row = job_row(dsn, job_id)
    assert row["state"] == "succeeded" and row["attempt"] == 2, row
    ended = "lease expired" if blocked else "given back"
    assert row["errors"][0]["error"].startswith(ended), row
    assert_silent_after_release(dsn, job_id, marker, grandchild)
    books.check(dsn, [job_id])


def test_a_cancelled_jobs_processes_die_with_it(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    """An operator cancels the running job in SQL: at its next renewal the worker finds
    the row no longer its own, stops the job and kills what the job started."""
    dsn = db.dsn
    f = cfleet({"default": ONE_WORKER}, supervisor=QUICK)
    [worker] = f.wait_workers(1)
    marker = tmp_path / "marks"
    job_id, grandchild = start_job(dsn, marker, worker)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgfleet.jobs SET state = 'cancelled', finished_at = now(),"
                     " lease_holder = NULL, lease_expires_at = NULL WHERE id = %s", (job_id,))
    wait_for(lambda: f"job {job_id} stopped: killed" in f.log(), timeout=30)
    wait_for(lambda: not alive(grandchild), timeout=10)  # SIGKILLed: gone once scheduled
    assert list(f.workers()) == [worker]
    assert job_row(dsn, job_id)["state"] == "cancelled"
    books.check(dsn, [job_id])


def test_processes_a_finished_job_left_behind_die_when_its_worker_recycles(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    """A job that succeeds and leaves its grandchild running: nothing stops it then, but
    the worker kills the rest of its group when it exits (here: recycled after a job)."""
    dsn = db.dsn
    f = cfleet({"default": {**ONE_WORKER, "max_jobs": 1}}, supervisor=QUICK)
    [worker] = f.wait_workers(1)
    marker = tmp_path / "marks"
    job_id = pgfleet.enqueue(dsn, "faults.marker_child",
                             {"marker": str(marker), "seconds": 1.0, "leave": True})
    wait_for(lambda: job_row(dsn, job_id)["state"] == "succeeded", timeout=30)
    grandchild = int(Path(f"{marker}.1.pid").read_text())
    wait_for(lambda: not alive(worker), timeout=30)
    wait_for(lambda: not alive(grandchild), timeout=10)  # SIGKILLed: gone once scheduled
    assert "recycling: 1 jobs done" in f.log()
    books.check(dsn, [job_id])


def test_a_lone_workers_stuck_job_processes_die_when_it_exits(
        db: Db, tmp_path: Path) -> None:
    """A worker without a supervisor, stopped (SIGINT) while its job is blocked in one C
    call: the job stays leased, and the worker kills the processes the job started as it
    exits, although it leads no process group of its own."""
    dsn = db.dsn
    with open(tmp_path / "lone.log", "wb") as sink:
        lone = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.lone_worker", dsn, "30"],
            stdout=sink, stderr=subprocess.STDOUT)
    try:
        marker = tmp_path / "marks"
        job_id, grandchild = start_job(dsn, marker, lone.pid, blocked=True)
        lone.send_signal(signal.SIGINT)
        assert lone.wait(60) == 0
        wait_for(lambda: not alive(grandchild), timeout=10)  # SIGKILLed: gone once scheduled
        assert job_row(dsn, job_id)["state"] == "running"  # leased: its thread never left
    finally:
        if lone.poll() is None:
            lone.kill()
            lone.wait(10)


def test_a_cut_off_lone_workers_job_processes_die_before_its_lease_runs_out(
        db: Db, cfleet: Callable[..., Fleet], tmp_path: Path) -> None:
    """A worker without a supervisor whose database traffic vanishes (lease 6 s): its
    lease watchdog ends the process, and the job's processes with it, before another host
    can rescue and rerun the job."""
    dsn = db.dsn
    proxy = Proxy(server_address(dsn))
    with open(tmp_path / "lone.log", "wb") as sink:
        lone = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.lone_worker", proxy.dsn(dsn), "6"],
            stdout=sink, stderr=subprocess.STDOUT)
    try:
        marker = tmp_path / "marks"
        job_id, grandchild = start_job(dsn, marker, lone.pid, blocked=True)
        proxy.blackhole()
        assert lone.wait(60) != 0
        # The rescuer's lease is the lone worker's (6 s), as in a fleet of one config: it
        # watches one of them, not the test fleets' 30 s, before it reruns the job.
        f = cfleet({"default": ONE_WORKER}, supervisor=LONE_LEASE)
        wait_settled(dsn, timeout=120, log=f.log)
    finally:
        if lone.poll() is None:
            lone.kill()
            lone.wait(10)
        proxy.close()
    row = job_row(dsn, job_id)
    assert row["state"] == "succeeded" and row["attempt"] == 2, row
    assert row["errors"][0]["error"].startswith("lease expired")
    assert_silent_after_release(dsn, job_id, marker, grandchild)
    books.check(dsn, [job_id])
