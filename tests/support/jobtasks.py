"""Tasks the test suite runs. Every task writes an audit row on a connection of its own
(autocommit), so executions can be counted independently of the job's state."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any

import psycopg

import pgfleet

_local = threading.local()


def _audit_conn() -> psycopg.Connection[Any]:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(os.environ["PGFLEET_AUDIT_DSN"], autocommit=True,
                               application_name="audit")
        _local.conn = conn
    return conn


def audit(event: str) -> None:
    job = pgfleet.current_job()
    assert job is not None
    _audit_conn().execute(
        "INSERT INTO audit (job_id, attempt, pid, event, token) VALUES (%s, %s, %s, %s, %s)",
        (job.id, job.attempt, os.getpid(), event, job.token),
    )


@pgfleet.task(name="noop")
def noop(**_: Any) -> None:
    audit("finished")


@pgfleet.task(name="sleep")
def sleep(seconds: float = 0.1) -> None:
    audit("started")
    time.sleep(seconds)
    audit("finished")


@pgfleet.task(name="sleep_on_host")
def sleep_on_host(seconds: float = 0.1) -> None:
    """`sleep` that also names its supervisor (the worker's parent process), so a test
    with several supervisors can tell which one ran each job."""
    audit(f"supervisor {os.getppid()}")
    audit("started")
    time.sleep(seconds)
    audit("finished")


@pgfleet.task(name="fail", backoff={"initial": 0.05, "max": 0.2, "jitter": 0.0})
def fail(message: str = "boom") -> None:
    audit("started")
    raise RuntimeError(message)


@pgfleet.task(name="fail_once", backoff={"initial": 0.05, "max": 0.1, "jitter": 0.0})
def fail_once() -> None:
    job = pgfleet.current_job()
    assert job is not None
    audit("started")
    if job.attempt == 1:
        raise RuntimeError("first attempt fails")
    audit("finished")


@pgfleet.task(name="async_noop")
async def async_noop(value: int = 0) -> None:
    await asyncio.sleep(0.001)
    audit("finished")


@pgfleet.task(name="crash")
def crash() -> None:
    """Segfaults its process, every time."""
    import ctypes

    audit("started")
    ctypes.string_at(0)


@pgfleet.task(name="self_segv")
def self_segv() -> None:
    """Sends SIGSEGV to its own process and returns: the signal lands on another thread,
    possibly after this one has moved on."""
    audit("started")
    os.kill(os.getpid(), signal.SIGSEGV)


@pgfleet.task(name="hog")
def hog(megabytes: int = 200, seconds: float = 0.5) -> None:
    audit("started")
    blob = bytearray(megabytes * 1024 * 1024)
    for i in range(0, len(blob), 4096):
        blob[i] = 1
    time.sleep(seconds)
    _local.blob = blob  # keep it alive so the RSS stays high
    audit("finished")


@pgfleet.task(name="stubborn")
def stubborn(seconds: float = 30.0) -> None:
    """Ignores the timeout interrupt (it lands only between bytecodes, and this blocks in C)."""
    audit("started")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(seconds)
        except BaseException:
            continue
    audit("finished")


@pgfleet.task(name="spin")
def spin(seconds: float = 30.0) -> None:
    """Busy Python code: the timeout interrupt lands between bytecodes."""
    audit("started")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    audit("finished")
