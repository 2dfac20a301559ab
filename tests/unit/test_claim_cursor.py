"""Where a worker's claims start: past the last key of a full claim, from the head after a
short claim, on a notification and once per poll interval."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgfleet.sql import store
from pgfleet.worker.claim_cursor import ClaimCursor

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(id: int, priority: int = 0, seconds: int = 0) -> store.ClaimedJob:
    return store.ClaimedJob(id=id, task="t", args="{}", attempt=1, max_attempts=3,
                            args_size=2, wait_seconds=0.0, solo=False, priority=priority,
                            run_at=T0 + timedelta(seconds=seconds))


def test_a_full_claim_moves_the_cursor_to_its_greatest_key() -> None:
    cursor = ClaimCursor(head_every=1.0)
    assert cursor.start(10.0, notified=False) is None  # the first claim: the head
    cursor.claimed([job(7, seconds=5), job(3, priority=1), job(9, seconds=5)], limit=3)
    assert cursor.start(10.1, notified=False) == (1, T0, 3)


def test_a_short_claim_sends_the_next_one_to_the_head() -> None:
    cursor = ClaimCursor(head_every=1.0)
    cursor.start(10.0, notified=False)
    cursor.claimed([job(1), job(2)], limit=2)
    cursor.claimed([job(3)], limit=2)
    assert cursor.start(10.1, notified=False) is None


def test_a_notification_and_the_poll_interval_send_a_claim_to_the_head() -> None:
    cursor = ClaimCursor(head_every=1.0)
    cursor.start(10.0, notified=False)
    cursor.claimed([job(1)], limit=1)
    assert cursor.start(10.5, notified=True) is None
    cursor.claimed([job(2)], limit=1)
    assert cursor.start(11.0, notified=False) == (0, T0, 2)
    assert cursor.start(11.6, notified=False) is None  # 1.1 s after the last head claim
