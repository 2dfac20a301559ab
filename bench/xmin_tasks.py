"""The task pgfleet's workers run in `python -m bench.xmin` (`tasks: [bench.xmin_tasks]`):
nothing but the start record."""

from __future__ import annotations

import pgfleet
from bench.xmin_record import record


@pgfleet.task(name="bench.xmin_noop")
def xmin_noop(t: float) -> None:
    """t: the producer's wall clock when it enqueued the job."""
    record(t)
