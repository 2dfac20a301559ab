"""Which claim a worker runs: the plain one, or for a queue with flow control the limited
one (docs/flow-control.md). The plain claim stays untouched by flow control, so queues
without limits pay nothing for it.

The database decides whether a queue has limits: a worker whose own config sets none
(a lone `pgfleet worker`, or a host whose file says nothing of them) still follows the
limits a supervisor published for its queue, looking again every LIMITS_REFRESH seconds."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

from pgfleet.core.flow import FlowLimits
from pgfleet.sql import fleet as fleet_store, store
from pgfleet.worker.prefetch import claim_bytes
from pgfleet.worker.settings import WorkerSettings

log = logging.getLogger("pgfleet.worker")

# How often a worker without limits of its own looks for published ones: a lone worker
# started beside a fleet, or limits added by a reload elsewhere, are followed within it.
LIMITS_REFRESH = 10.0


class Claims:
    def __init__(self, s: WorkerSettings) -> None:
        self.s = s
        # Limits from this worker's config: the limited claim for good (the published
        # ones take precedence inside it, see claim_limited).
        self.flow: FlowLimits | None = s.flow
        self.next_check = 0.0 if s.flow is None else float("inf")
        # prefetch auto sizes claims by what it measured; the database bounds their args
        # (a fixed prefetch takes what it was given).
        self.max_bytes = claim_bytes(s.threads) if s.prefetch is None else None
        # Set before the first claim is sent: until then no job can be leased to this
        # worker (its fused completion + claim follows a claim), so nothing is to be
        # given back when it exits.
        self.sent = False

    @property
    def limited(self) -> bool:
        return self.flow is not None

    def refresh(self, conn: psycopg.Connection[Any]) -> None:
        """Follow the queue's published limits (a worker configured with limits always
        runs the limited claim)."""
        now = time.monotonic()
        if now < self.next_check:
            return
        self.next_check = now + LIMITS_REFRESH
        published = fleet_store.queue_has_limits(conn, self.s.queue)
        if published != self.limited:
            log.info("queue %r: %s", self.s.queue,
                     "published flow control found: claims follow it" if published
                     else "no flow control published any more: plain claims")
        self.flow = FlowLimits() if published else None

    def __call__(self, conn: psycopg.Connection[Any], limit: int, *, held: int,
                 held_solo: bool, after: store.ClaimKey | None) -> list[store.ClaimedJob]:
        """Claim up to `limit` jobs in the caller's transaction. `held`, `held_solo`: what
        this process keeps running (crash containment); `after`: where the plain claim
        starts in the claim order (pgfleet.worker.claim_cursor)."""
        self.sent = True
        self.refresh(conn)
        s = self.s
        if self.flow is None:
            return store.claim(conn, queue=s.queue, limit=limit, worker=s.worker_id,
                               lease=s.lease, args_limit=s.args_limit, held=held,
                               held_solo=held_solo, after=after, max_bytes=self.max_bytes)
        return store.claim_limited(conn, queue=s.queue, limit=limit, worker=s.worker_id,
                                   lease=s.lease, limits=self.flow, args_limit=s.args_limit)
