"""The statements of a bulk enqueue as a plan of steps, written once and driven by
pgfleet.client.bulk.enqueue_chunks on a blocking connection and by store.enqueue_many_async
on an asyncio one: insert the rows, then find the ids of rows whose unique key an unfinished job
already held (inserting again those whose holder finished meanwhile)."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from pgfleet.errors import PgfleetError
from pgfleet.sql.rows import KeyHolder, NewJobRow

# One step of a bulk enqueue: ("insert", rows) → list[Inserted], or ("lookup", params of
# existing_by_unique_key) → list[KeyHolder].
BulkStep = tuple[str, Any]
# A row of enqueue_jobs' result: (id, task, unique_key); plain tuples, read by position,
# because a bulk enqueue reads tens of thousands of them. A chunk without unique keys
# returns NULL task and key.
Inserted = tuple[int, str | None, str | None]
BulkPlan = Generator[BulkStep, list[Any], list[int]]


def enqueue_many(rows: Sequence[NewJobRow]) -> BulkPlan:
    """The statements of enqueue_many, as steps for a driver (see BulkStep)."""
    if not rows:
        return []
    inserted: list[Inserted] = yield ("insert", rows)
    tasks = [row.task for row in rows]
    unique_keys = [row.unique_key for row in rows]
    if not any(unique_keys):
        # RETURNING follows the insertion order, which follows ORDER BY ord.
        return [job[0] for job in inserted]
    # Unique keys are scoped per task: a job is known by (task, unique key).
    keyless = [job_id for job_id, _, key in inserted if key is None]
    by_key = {(task, key): job_id for job_id, task, key in inserted if key is not None}
    for _ in range(KEY_ROUNDS):
        missing = [(task, key) for task, key in zip(tasks, unique_keys, strict=True)
                   if key and (task, key) not in by_key]
        if not missing:
            break
        found: list[KeyHolder] = yield ("lookup", {
            "tasks": [task for task, _ in missing],
            "unique_keys": [key for _, key in missing]})
        by_key.update({(job.task, job.unique_key): job.id for job in found})
        # A key whose holder finished between the two statements is free again: insert
        # those rows once more (their first row of each key, as the first insert did).
        gone = {pair for pair in missing if pair not in by_key}
        again = [row for row in rows if (row.task, row.unique_key) in gone]
        again_inserted: list[Inserted] = (yield ("insert", again)) if again else []
        by_key.update({(task, key): job_id for job_id, task, key in again_inserted
                       if key is not None})
    keyless_iter = iter(keyless)
    try:
        return [by_key[(task, key)] if key else next(keyless_iter)
                for task, key in zip(tasks, unique_keys, strict=True)]
    except KeyError as exc:
        raise PgfleetError(f"unique key {exc.args[0]!r} changed hands {KEY_ROUNDS} times "
                           "during one enqueue_many; try again") from None


# Rounds of look-up and re-insert for keys whose holder finished meanwhile; each round
# needs a holder to finish within a few milliseconds, so more than two is rare.
KEY_ROUNDS = 5
