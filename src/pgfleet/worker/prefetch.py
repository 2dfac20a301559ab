"""prefetch: auto, the default: how many jobs a worker claims beyond its free threads.

A claim of one job per round trip (threads 1, no prefetch) spends the round trip and the
commit on each job; claims of 50-200 drained 2-6x faster than claims of 10 (bench/drain.py).
But a prefetched job waits in one process while another process may be idle, so long
jobs must not be prefetched. The worker measures its jobs' run time and its round trips
(the flush with its claim) and prefetches what its threads get through in about two round
trips: no-op jobs reach the cap, jobs of a second or more get none. Until a job has been
measured nothing is prefetched.

The cap is 1,000 jobs: claims of 1,000 drained no-op jobs ~1.4x faster than claims of 100
(bench/drain.py), and the time bound above already keeps the prefetched work to two round
trips. What it does not bound is memory: each claimed job's args are held until it runs,
so the prefetch also stays within PREFETCH_BYTES of args at their measured mean size, and
each claim within claim_bytes() of args whatever was measured (the database stops taking
rows there: see `max_bytes` of pgfleet.claim_jobs), so the first claim after a queue
turns from tiny jobs to big ones does not take up to the cap of them. A claim of bigger
args than measured raises the mean at once; smaller ones lower it gradually.

The measures describe the jobs a worker ran last. After it has held nothing for
STALE_AFTER they are forgotten: a queue that drained tiny jobs and then gets slow ones or
big ones (a pause, a quiet hour, a burst from another producer) would otherwise claim up to
the cap of them into one process while the others idle, or hold all their args in one
worker. Jobs of a new kind within a busy backlog are still claimed by the old measure;
once they turn out slow, those no thread has started are given back
(Batching.held_too_long).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pgfleet.core.payload import MAX_ARGS_BYTES

# A claim takes at most this many jobs with prefetch auto (more threads still get one each).
AUTO_CLAIM_CAP = 1000
# The args prefetched jobs may hold, at the measured mean size (jobs of 1 MiB: 16 of them).
PREFETCH_BYTES = 16 * 1024 * 1024
# Weight of the newest measurement in the running means.
WEIGHT = 0.2
ROUND_TRIPS = 2.0
# Held nothing this long (seconds): what was measured no longer says what comes next.
STALE_AFTER = 1.0


def _mean(old: float | None, new: float) -> float:
    return new if old is None else old + WEIGHT * (new - old)


def claim_bytes(threads: int) -> int:
    """The args one claim may take with prefetch auto: a job of the largest args for each
    thread, and PREFETCH_BYTES for the jobs claimed ahead."""
    return PREFETCH_BYTES + threads * MAX_ARGS_BYTES


class AutoPrefetch:
    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.job_seconds: float | None = None
        self.trip_seconds: float | None = None
        self.args_bytes: float | None = None
        self.idle_since: float | None = None

    def jobs_ran(self, seconds: Sequence[float]) -> None:
        if seconds:
            self.job_seconds = _mean(self.job_seconds, sum(seconds) / len(seconds))

    def jobs_claimed(self, args_bytes: int, jobs: int) -> None:
        """A claim of `jobs` jobs whose args add up to `args_bytes`."""
        if jobs:
            # Memory: bigger args count at once, smaller ones gradually.
            mean = args_bytes / jobs
            self.args_bytes = max(mean, _mean(self.args_bytes, mean))

    def holding(self, jobs: int, now: float) -> None:
        """The worker holds `jobs` at `now` (each pass of its loop, before it claims)."""
        if jobs:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
        elif now - self.idle_since >= STALE_AFTER:
            self.job_seconds = self.args_bytes = None

    def round_trip(self, seconds: float) -> None:
        self.trip_seconds = _mean(self.trip_seconds, seconds)

    def value(self) -> int:
        room = max(0, AUTO_CLAIM_CAP - self.threads)
        if self.job_seconds is None or self.trip_seconds is None or not room:
            return 0
        per_trip = self.threads * ROUND_TRIPS * self.trip_seconds / max(self.job_seconds, 1e-6)
        # Rounded: under half a job per two round trips (long jobs) is none.
        fits = PREFETCH_BYTES // max(1, round(self.args_bytes or 0))
        return min(room, fits, math.floor(per_trip + 0.5))
