"""Tasks for the pgfleet.testing tests: no database of their own."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pgfleet

DONE: list[Any] = []


@pgfleet.task(name="eager.record")
def record(value: Any = None) -> None:
    DONE.append(value)


@pgfleet.task(name="eager.record_async")
async def record_async(value: Any = None) -> None:
    await asyncio.sleep(0)
    DONE.append(("async", value))


@pgfleet.task(name="eager.broken")
def broken() -> None:
    raise ValueError("broken on purpose")


@pgfleet.task(name="eager.again", backoff={"initial": 0, "max": 0, "jitter": 0})
def again() -> None:
    """Enqueues itself: run_jobs must stop at its limit."""
    pgfleet.enqueue(os.environ["PGFLEET_DATABASE_URL"], "eager.again")
