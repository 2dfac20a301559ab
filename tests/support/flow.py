"""A claim under flow control, as a worker with limits of its own makes it: its limits
published for the queue unless a supervisor published some, then the one claim."""

from __future__ import annotations

from typing import Any

import psycopg

from pgfleet.core import payload
from pgfleet.core.flow import FlowLimits
from pgfleet.sql import fleet, store


def claim_limited(conn: psycopg.Connection[Any], *, queue: str, limit: int, worker: str,
                  lease: float, limits: FlowLimits,
                  args_limit: int = payload.MAX_ARGS_BYTES) -> list[store.ClaimedJob]:
    fleet.publish_fallback_limits(conn, queue=queue, published_by=worker, limits=limits)
    return store.claim(conn, queue=queue, limit=limit, worker=worker, lease=lease,
                       args_limit=args_limit)
