"""How big a worker's batches are: how many jobs it claims (threads plus prefetch, fixed
or auto), where the claim starts (ClaimCursor), and when collected outcomes may wait for
the next flush instead of costing a round trip of their own.

An outcome's slot frees only once it is committed. A flush of whatever one wake-up of the
loop collected would free only that many slots, and the claim riding along would take just
as many jobs: batches would shrink to a few jobs per round trip. While every thread still
has a job queued behind the one it runs, nothing is gained by committing at once: the
outcomes wait (at most FLUSH_DELAY, and never more than half the claim size) and the next
flush commits them together and claims a full batch.
"""

from __future__ import annotations

from pgfleet.worker.claim_cursor import ClaimCursor
from pgfleet.worker.prefetch import AutoPrefetch

# The longest an outcome waits for company before its flush.
FLUSH_DELAY = 0.02
# prefetch auto gives back jobs it claimed ahead once they are this much work (seconds, per
# thread) beyond what it wants now, and looks again after GIVE_BACK_EVERY seconds.
GIVE_BACK_SECONDS = 1.0
GIVE_BACK_EVERY = 1.0


class Batching:
    def __init__(self, *, threads: int, prefetch: int | None, poll_interval: float) -> None:
        self.threads = threads
        self.fixed = prefetch  # None: auto
        self.auto = AutoPrefetch(threads)
        self.cursor = ClaimCursor(poll_interval)
        self.next_give_back = 0.0

    def prefetch(self) -> int:
        return self.auto.value() if self.fixed is None else self.fixed

    def held_too_long(self, held: int, now: float) -> bool:
        """Should prefetch auto give back some of the `held` jobs (running or waiting for
        a thread; outcomes awaiting their commit not counted)? A claim is sized by the jobs
        measured before it; when they turn out slow, those claimed ahead would run one
        after another here while other processes idle. Only beyond two jobs per thread and
        what auto wants ahead now (its want wavers between 0 and 1 as slow jobs and round
        trips vary, and giving back that one job would cost a round trip a second); only
        when the excess is GIVE_BACK_SECONDS of work per thread or more (a give-back is a
        round trip, and the jobs are claimed again); and once per GIVE_BACK_EVERY at most."""
        if self.fixed is not None or now < self.next_give_back:
            return False
        excess = held - 2 * self.threads - self.prefetch()
        seconds = self.auto.job_seconds
        if excess <= 0 or seconds is None or excess * seconds < GIVE_BACK_SECONDS * self.threads:
            return False
        self.next_give_back = now + GIVE_BACK_EVERY
        return True

    def capacity(self) -> int:
        """Jobs a worker holds at most: running, queued for a thread, or awaiting commit."""
        return self.threads + self.prefetch()

    def may_defer(self, *, pending: int, waiting: int, since: float, now: float) -> bool:
        """May `pending` outcomes, the first collected at `since`, wait for the next
        flush while `waiting` claimed jobs are queued for the threads?"""
        return (waiting >= self.threads and pending < self.capacity() // 2
                and now - since < FLUSH_DELAY)
