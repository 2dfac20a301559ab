"""Which claim a worker runs: the plain one, or for a queue with flow control the limited
one (docs/flow-control.md). The plain claim stays untouched by flow control, so queues
without limits pay nothing for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from pgfleet import store
from pgfleet.worker.settings import WorkerSettings

# Claims up to a number of jobs on a connection, in the caller's transaction.
ClaimJobs = Callable[[psycopg.Connection[Any], int], list[store.ClaimedJob]]


def claimer(s: WorkerSettings) -> ClaimJobs:
    """The claim of the worker these settings describe."""
    flow = s.flow
    if flow is None:
        def plain(conn: psycopg.Connection[Any], limit: int) -> list[store.ClaimedJob]:
            return store.claim(conn, queue=s.queue, limit=limit, worker=s.worker_id,
                               lease=s.lease, args_limit=s.args_limit)
        return plain

    def limited(conn: psycopg.Connection[Any], limit: int) -> list[store.ClaimedJob]:
        return store.claim_limited(conn, queue=s.queue, limit=limit, worker=s.worker_id,
                                   lease=s.lease, limits=flow, args_limit=s.args_limit)
    return limited
