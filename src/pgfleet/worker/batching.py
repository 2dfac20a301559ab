"""How big a worker's batches are: how many jobs it claims (threads plus prefetch, fixed
or auto), where the claim starts (ClaimCursor), and when collected outcomes may wait for
the next flush instead of costing a round trip of their own.

An outcome's slot frees only once it is committed, so each flush used to carry what one
wake-up of the loop had collected, and the claim riding along took just as many jobs:
batches shrank to a few jobs per round trip (claims averaged 52-56 with claims <= 100).
While every thread still has a job queued behind the one it runs, nothing is gained by
committing at once: the outcomes wait (at most FLUSH_DELAY, and never more than half the
claim size) and the next flush commits them together and claims a full batch.
"""

from __future__ import annotations

from pgfleet.worker.claim_cursor import ClaimCursor
from pgfleet.worker.prefetch import AutoPrefetch

# The longest an outcome waits for company before its flush.
FLUSH_DELAY = 0.02


class Batching:
    def __init__(self, *, threads: int, prefetch: int | None, poll_interval: float) -> None:
        self.threads = threads
        self.fixed = prefetch  # None: auto
        self.auto = AutoPrefetch(threads)
        self.cursor = ClaimCursor(poll_interval)

    def prefetch(self) -> int:
        return self.auto.value() if self.fixed is None else self.fixed

    def capacity(self) -> int:
        """Jobs a worker holds at most: running, queued for a thread, or awaiting commit."""
        return self.threads + self.prefetch()

    def may_defer(self, *, pending: int, waiting: int, since: float, now: float) -> bool:
        """May `pending` outcomes, the first collected at `since`, wait for the next
        flush while `waiting` claimed jobs are queued for the threads?"""
        return (waiting >= self.threads and pending < self.capacity() // 2
                and now - since < FLUSH_DELAY)
