"""The lease watch's decision, on explicit monotonic times: stale only after a value was
seen unchanged for a whole lease; any renewal, new claim or new holder starts again."""

from __future__ import annotations

from pgfleet.maintenance.lease_watch import LeaseWatch
from pgfleet.sql.rows import Lease

A = Lease(id=1, holder="host-a:1:aa", fence=1, beats=5)


def test_a_lease_is_stale_only_after_a_whole_lease_unchanged() -> None:
    watch = LeaseWatch(stale_after=30.0)
    assert watch.stale([A], now=100.0) == []
    assert watch.stale([A], now=129.9) == []
    assert watch.stale([A], now=130.0) == [A]


def test_a_renewal_starts_the_watch_again() -> None:
    watch = LeaseWatch(stale_after=30.0)
    watch.stale([A], now=100.0)
    renewed = Lease(id=1, holder=A.holder, fence=1, beats=6)
    assert watch.stale([renewed], now=129.0) == []
    assert watch.stale([renewed], now=158.9) == []
    assert watch.stale([renewed], now=159.0) == [renewed]


def test_a_new_claim_or_holder_starts_the_watch_again() -> None:
    watch = LeaseWatch(stale_after=30.0)
    watch.stale([A], now=100.0)
    again = Lease(id=1, holder="host-b:2:bb", fence=2, beats=0)
    assert watch.stale([again], now=140.0) == []
    assert watch.stale([again], now=170.0) == [again]


def test_a_job_that_left_and_came_back_is_watched_afresh() -> None:
    watch = LeaseWatch(stale_after=30.0)
    watch.stale([A], now=100.0)
    watch.stale([], now=110.0)  # finished, or rescued by another host
    assert watch.stale([A], now=135.0) == []
    assert watch.stale([A], now=165.0) == [A]


def test_what_was_seen_before_the_watcher_lost_the_database_is_forgotten() -> None:
    """No holder could renew while the database was gone: after the outage a lease must be
    seen unchanged for a whole lease again, which leaves its holder's own supervisor the
    time to give its jobs back (refunded) first."""
    watch = LeaseWatch(stale_after=30.0)
    watch.stale([A], now=100.0)
    watch.forget()  # a maintenance pass failed: the database is out of reach
    assert watch.stale([A], now=160.0) == []
    assert watch.stale([A], now=190.0) == [A]
