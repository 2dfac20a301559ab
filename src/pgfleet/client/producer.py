"""The last step of every enqueue (sync or async): validated rows pass through the
registered middleware, then go to the database, or, in eager mode (pgfleet.testing), to
an inline run instead.

Rows are pgfleet.client.enqueue._row's tuples; only the fields a middleware may see or
change are read here by position (task, args, queue, max_attempts, meta), so a field added
to the row passes through untouched."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from pgfleet import middleware
from pgfleet.core import payload

T = TypeVar("T")
Row = tuple[Any, ...]

# Positions in enqueue._row's tuple.
TASK, ARGS, QUEUE, MAX_ATTEMPTS, META = 0, 1, 2, 6, 8


@dataclass(frozen=True)
class JobSpec:
    """A validated job as eager mode runs it."""

    task: str
    args_json: str
    queue: str | None
    max_attempts: int | None
    meta_json: str | None


Divert = Callable[[Sequence[JobSpec]], list[int]]
_diverted: list[Divert] = []


@contextmanager
def diverted(runner: Divert) -> Any:
    """Send every enqueue of this process to `runner` instead of the database."""
    _diverted.append(runner)
    try:
        yield
    finally:
        _diverted.remove(runner)


def _event(rows: Sequence[Row]) -> middleware.Enqueueing:
    return middleware.Enqueueing(jobs=[
        middleware.NewJob(task=row[TASK], queue=row[QUEUE], args=json.loads(row[ARGS]),
                          meta=json.loads(row[META]) if row[META] else {})
        for row in rows])


def _with_meta(rows: Sequence[Row], event: middleware.Enqueueing) -> list[Row]:
    """The rows with the meta the middleware left, checked again like the caller's."""
    changed = []
    for row, job in zip(rows, event.jobs, strict=True):
        meta = payload.meta_json(job.meta) if job.meta else None
        changed.append((*row[:META], meta, *row[META + 1:]))
    return changed


def _divert(rows: Sequence[Row]) -> list[int]:
    return _diverted[-1]([JobSpec(task=row[TASK], args_json=row[ARGS], queue=row[QUEUE],
                                  max_attempts=row[MAX_ATTEMPTS], meta_json=row[META])
                            for row in rows])


def direct() -> bool:
    """True when rows go straight to the database: no middleware to show them to and no
    eager mode, so a bulk enqueue may send its first rows before validating the last."""
    return not middleware.active() and not _diverted


def send(rows: Sequence[Row], insert: Callable[[Sequence[Row]], T],
         ids_of: Callable[[T], list[int]], from_ids: Callable[[list[int]], T]) -> T:
    """Insert `rows` through the middleware. `ids_of` reads the job ids from what `insert`
    returns; `from_ids` makes that result from ids in eager mode."""
    if not middleware.active() and not _diverted:
        return insert(rows)  # the hot path of a bulk enqueue: nothing decoded
    event = _event(rows)
    with middleware.around(event):
        ready = _with_meta(rows, event)
        result = from_ids(_divert(ready)) if _diverted else insert(ready)
        event.ids = ids_of(result)
    return result


async def send_async(rows: Sequence[Row], insert: Callable[[Sequence[Row]], Awaitable[T]],
                     ids_of: Callable[[T], list[int]],
                     from_ids: Callable[[list[int]], T]) -> T:
    """`send` for an insert on an asyncio connection."""
    if not middleware.active() and not _diverted:
        return await insert(rows)
    event = _event(rows)
    with middleware.around(event):
        ready = _with_meta(rows, event)
        result = from_ids(_divert(ready)) if _diverted else await insert(ready)
        event.ids = ids_of(result)
    return result
