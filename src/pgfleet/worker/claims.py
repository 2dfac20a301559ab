"""A worker's claim, and what it knows of its queue's flow control (docs/flow-control.md).

The claim is one statement whatever the queue's limits: pgfleet.claim_jobs reads them
from pgfleet.queue_limits at every claim, so a limit published or lifted anywhere binds at
once. A worker with limits of its own publishes them for its queue on each connection,
kept only while no supervisor has published the queue's. What the worker itself needs to
know (a limited queue takes no jobs ahead) it reads every LIMITS_REFRESH seconds."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from pgfleet import metrics
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

    def connected(self, conn: psycopg.Connection[Any]) -> None:
        """A new connection: publish this worker's own limits if no one published any."""
        if self.s.flow is not None:
            fleet_store.publish_fallback_limits(conn, queue=self.s.queue,
                                                published_by=self.s.worker_id,
                                                limits=self.s.flow)

    def __call__(self, conn: psycopg.Connection[Any], limit: int, *, held: int,
                 held_solo: bool, after: store.ClaimKey | None) -> list[store.ClaimedJob]:
        """Claim up to `limit` jobs in the caller's transaction. `held`, `held_solo`: what
        this process keeps running (crash containment); `after`: where the claim starts
        in the claim order (pgfleet.worker.claim_cursor)."""
        self.sent = True
        self.refresh(conn)
        s = self.s
        # Inside the completions' transaction the claim gets a savepoint, so a claim that
        # gave up on the queue's lock leaves the completions to commit.
        savepoint = (conn.transaction() if conn.info.transaction_status == TransactionStatus.INTRANS
                     else contextlib.nullcontext())
        try:
            with savepoint:
                return store.claim(conn, queue=s.queue, limit=limit, worker=s.worker_id,
                                   lease=s.lease, args_limit=s.args_limit, held=held,
                                   held_solo=held_solo, after=after,
                                   max_bytes=self.max_bytes)
        except psycopg.errors.LockNotAvailable:
            metrics.claim_lock_timeouts.labels(s.queue).inc()
            log.warning("queue %r: its flow-control lock is held elsewhere; claiming again"
                        " later", s.queue)
            return []
