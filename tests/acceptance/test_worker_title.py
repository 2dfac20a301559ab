"""A worker's process title counts the jobs it is running, in English: "1 job", "2 jobs"."""

from __future__ import annotations

from collections.abc import Callable

import pgfleet
from tests.support.fleet import Fleet
from tests.support.workers import wait_for


def busy_part(f: Fleet) -> list[str]:
    """What follows the `pgfleet worker QUEUE i/n:` of each worker's title."""
    return [title.split(":", 1)[1].strip() for title in f.workers("default").values()
            if ":" in title]


def test_a_worker_title_says_1_job_and_2_jobs(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"default": {"processes": 1, "threads": 2}})
    f.wait_workers(1, "default")
    pgfleet.enqueue(dsn, "sleep", {"seconds": 60})
    wait_for(lambda: busy_part(f) == ["1 job"], timeout=30)
    pgfleet.enqueue(dsn, "sleep", {"seconds": 60})
    wait_for(lambda: busy_part(f) == ["2 jobs"], timeout=30)
