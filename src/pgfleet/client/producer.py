"""The last step of every enqueue (sync or async): validated rows pass through the
registered middleware, then go to the database, or, in eager mode (pgfleet.testing), to
an inline run instead.

Rows are NewJobRow: a middleware sees each job's task, queue, args and meta, and may change
its meta; every other field passes through untouched."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from pgfleet import middleware
from pgfleet.core import payload
from pgfleet.sql.rows import NewJobRow

T = TypeVar("T")

Divert = Callable[[Sequence[NewJobRow]], list[int]]
_diverted: list[Divert] = []


@contextmanager
def diverted(runner: Divert) -> Any:
    """Send every enqueue of this process to `runner` instead of the database."""
    _diverted.append(runner)
    try:
        yield
    finally:
        _diverted.remove(runner)


def _event(rows: Sequence[NewJobRow]) -> middleware.Enqueueing:
    return middleware.Enqueueing(jobs=[
        middleware.NewJob(task=row.task, queue=row.queue, args=json.loads(row.args_json),
                          meta=json.loads(row.meta_json) if row.meta_json else {})
        for row in rows])


def _with_meta(rows: Sequence[NewJobRow], event: middleware.Enqueueing) -> list[NewJobRow]:
    """The rows with the meta the middleware left, checked again like the caller's."""
    changed = []
    for row, job in zip(rows, event.jobs, strict=True):
        meta = payload.meta_json(job.meta) if job.meta else None
        changed.append(row._replace(meta_json=meta))
    return changed


def _divert(rows: Sequence[NewJobRow]) -> list[int]:
    return _diverted[-1](rows)


def direct() -> bool:
    """True when rows go straight to the database: no middleware to show them to and no
    eager mode, so a bulk enqueue may send its first rows before validating the last."""
    return not middleware.active() and not _diverted


def send(rows: Sequence[NewJobRow], insert: Callable[[Sequence[NewJobRow]], T],
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


async def send_async(rows: Sequence[NewJobRow],
                     insert: Callable[[Sequence[NewJobRow]], Awaitable[T]],
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
