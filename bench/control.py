"""Tasks for bench/cancel_latency.py: one that stops when it sees it was cancelled, and one
that never looks (and is interrupted). Each gives up after two minutes."""

from __future__ import annotations

import time

import pgfleet

BOUND = 120.0


@pgfleet.task(name="bench.control.until_cancelled")
def until_cancelled() -> None:
    job = pgfleet.current_job()
    assert job is not None
    end = time.monotonic() + BOUND
    while time.monotonic() < end and not job.cancelled:
        time.sleep(0.005)


@pgfleet.task(name="bench.control.ignores_cancel")
def ignores_cancel() -> None:
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        time.sleep(0.005)
