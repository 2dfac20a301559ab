"""Where a worker's next claim starts in claim order.

Each claimed row leaves a dead entry at the head of jobs_claim_idx (the row leaves the
partial index; its entry stays until vacuum, and autovacuum does not get to it during a
drain), so a claim from the head steps over every job claimed so far, hundreds of index
pages per claim deep into a drain. After a full claim the next one starts past its last
key instead. Rows the cursor has passed that are waiting again
(a job enqueued at a higher priority or with a past run_at, a future job fallen due, a row
another worker locked and let go) are found by the next claim from the head: after any short
claim, on a notification, and at least once per poll interval.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgfleet.sql import store


def claim_full(jobs: Sequence[store.ClaimedJob], limit: int) -> bool:
    """Did the claim stop before the due jobs did: it took `limit`, or its byte budget
    left some behind (`more`, from pgfleet.claim_jobs)? More are likely waiting either way."""
    return len(jobs) >= limit or (bool(jobs) and jobs[0].more)


class ClaimCursor:
    def __init__(self, head_every: float) -> None:
        self.head_every = head_every
        self.after: store.ClaimKey | None = None
        self.next_head = 0.0

    def start(self, now: float, notified: bool) -> store.ClaimKey | None:
        """The key the claim made at `now` starts past; None for the head."""
        if notified or self.after is None or now >= self.next_head:
            self.next_head = now + self.head_every
            return None
        return self.after

    def claimed(self, jobs: Sequence[store.ClaimedJob], limit: int) -> None:
        """Record a claim's result: a full claim moves the cursor to its last key (rows
        come back in no particular order); a short one sends the next claim to the head."""
        if jobs and claim_full(jobs, limit):
            self.after = max((job.priority, job.run_at, job.id) for job in jobs)
        else:
            self.after = None
