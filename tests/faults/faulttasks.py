"""Tasks only the fault suite runs (beside tests.support.jobtasks, which this imports)."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import threading
import time

import pgfleet
from tests.support.jobtasks import audit


@pgfleet.task(name="faults.sleep_fail_first",
              backoff={"initial": 0.05, "max": 0.1, "jitter": 0.0})
def sleep_fail_first(seconds: float = 1.0) -> None:
    """Sleeps, then fails on the first attempt and succeeds on later ones: a late outcome
    of attempt 1 that was not fenced would send a finished job back to the queue."""
    job = pgfleet.current_job()
    assert job is not None
    audit("started")
    time.sleep(seconds)
    if job.attempt == 1:
        raise RuntimeError("attempt 1 fails after its sleep")
    audit("finished")


@pgfleet.task(name="faults.sleep_first")
def sleep_first(seconds: float = 10.0, later: float = 0.05) -> None:
    """`sleep` for `seconds` on the first attempt (the one a fault cuts off), `later` on
    later ones, so the rerun that proves the rescue is short."""
    job = pgfleet.current_job()
    assert job is not None
    audit("started")
    time.sleep(seconds if job.attempt == 1 else later)
    audit("finished")


@pgfleet.task(name="faults.spin_first")
def spin_first(seconds: float = 20.0, later: float = 0.05) -> None:
    """Busy Python code for `seconds` on the first attempt (long enough to be cut off
    mid-run), `later` on later ones, so the rerun that proves the rescue is short."""
    job = pgfleet.current_job()
    assert job is not None
    audit("started")
    end = time.monotonic() + (seconds if job.attempt == 1 else later)
    while time.monotonic() < end:
        pass
    audit("finished")


@pgfleet.task(name="faults.gil_sort")
def gil_sort(seconds: float = 6.0, stubborn: bool = False, size: int = 4_000_000,
             later: float | None = None) -> None:
    """Holds the GIL in long C calls (a sort of `size` ints; 4M take about a second): an
    interrupt lands only between two sorts. Stubborn, it swallows every interrupt. An
    audit row after each sort dates the run's last sign of life. `later`: how long
    attempts after the first sort (default: `seconds` too)."""
    job = pgfleet.current_job()
    assert job is not None
    audit("started")
    numbers = [(i * 7919) % size for i in range(size)]  # scrambled: no runs to exploit
    end = time.monotonic() + (seconds if later is None or job.attempt == 1 else later)
    while time.monotonic() < end:
        try:
            sorted(numbers)
            audit("tick")
        except BaseException:
            if not stubborn:
                raise
    audit("finished")


@pgfleet.task(name="faults.interrupt_main")
def interrupt_main(seconds: float = 5.0) -> None:
    """Does what some timeout helpers do: raises KeyboardInterrupt in the main thread (a
    SIGINT as far as the worker can tell), then keeps busy in Python code."""
    audit("started")
    _thread.interrupt_main()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    audit("finished")


# A grandchild that writes "PID EPOCH" to the marker file ten times a second: the shell the
# task starts runs it in the background and waits.
MARKER_LOOP = ('sh -c \'while :; do echo "$$ $(date +%%s.%%N)" >> %s; sleep 0.1; done\' & '
               'echo $! > %s.pid; wait')


@pgfleet.task(name="faults.marker_child")
def marker_child(marker: str, seconds: float = 30.0, later: float = 0.5,
                 blocked: bool = False, leave: bool = False) -> None:
    """Starts a shell whose background child keeps writing to `marker`, then waits in
    short sleeps (so an interrupt lands; `blocked`: in one sleep, where none does) for
    `seconds` (`later` on later attempts); on a normal end it stops its processes itself,
    unless told to `leave` them running.
    Each attempt writes to `marker.ATTEMPT`."""
    job = pgfleet.current_job()
    assert job is not None
    path = f"{marker}.{job.attempt}"
    audit("started")
    shell = subprocess.Popen(["sh", "-c", MARKER_LOOP % (path, path)])
    end = time.monotonic() + (seconds if job.attempt == 1 else later)
    while time.monotonic() < end:
        time.sleep(seconds if blocked and job.attempt == 1 else 0.05)
    if not leave:
        with open(f"{path}.pid") as handle:
            os.kill(int(handle.read()), signal.SIGKILL)
        shell.wait()
    audit("finished")


@pgfleet.task(name="faults.event_wait")
def event_wait(seconds: float = 10.0) -> None:
    """Waits on an Event rather than in time.sleep(), which fails with EINVAL under
    libfaketime once its offset is not zero (its absolute clock_nanosleep is shifted)."""
    audit("started")
    threading.Event().wait(seconds)
    audit("finished")


@pgfleet.task(name="faults.exit_first")
def exit_first(code: int, seconds: float = 0.5) -> None:
    """On attempt 1, ends its own worker process with exit code `code` (os._exit, as a
    task or a C library may); later attempts succeed."""
    job = pgfleet.current_job()
    assert job is not None
    audit("started")
    time.sleep(seconds)
    if job.attempt == 1:
        os._exit(code)
    audit("finished")
