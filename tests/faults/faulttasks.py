"""Tasks only the fault suite runs (beside tests.support.jobtasks, which this imports)."""

from __future__ import annotations

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
