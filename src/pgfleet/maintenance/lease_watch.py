"""Which leases are stale, judged without any wall clock.

A lease's expiry time is the server's clock plus the lease length; comparing it with the
server's now() would rescue live jobs when that clock jumps forward. The watch instead
remembers, per running job, its (holder, fence, beats) and when this process first saw
that exact value on its own monotonic clock. Every renewal advances `beats`, so a value
unchanged for a whole lease proves the holder renewed nothing for a lease: its own
watchdog ended its jobs before that (at 90 % of the lease, counted from when it sent its
last renewal, which is no later than when the watch first saw it). Jumps of the server's
clock, of the holder's or of the watcher's wall clock change none of this.

Forgotten on restart: a new watcher waits a whole lease before its first rescue.
"""

from __future__ import annotations

from pgfleet.sql.rows import Lease


class LeaseWatch:
    def __init__(self, stale_after: float) -> None:
        self.stale_after = stale_after
        # job id -> (the lease as last seen, monotonic time it was first seen so)
        self.seen: dict[int, tuple[Lease, float]] = {}

    def stale(self, leases: list[Lease], now: float) -> list[Lease]:
        """Record one look at every running lease, at monotonic time `now`; return those
        seen unchanged for at least `stale_after`. Jobs no longer running are forgotten."""
        seen: dict[int, tuple[Lease, float]] = {}
        found = []
        for lease in leases:
            before = self.seen.get(lease.id)
            since = before[1] if before is not None and before[0] == lease else now
            seen[lease.id] = (lease, since)
            if now - since >= self.stale_after:
                found.append(lease)
        self.seen = seen
        return found

    def forget(self) -> None:
        """Drop every observation: after this watcher lost the database, an unchanged
        lease says nothing about its holder, who could not renew either."""
        self.seen = {}
