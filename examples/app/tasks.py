"""The example app's tasks. Every one is safe to run twice: delivery is at least once."""

from __future__ import annotations

import csv
import logging
import random
import time
from datetime import UTC, date, datetime, timedelta

import pgfleet
from examples.app import services, settings

log = logging.getLogger("examples.app")


@pgfleet.task(queue="emails", max_attempts=10, timeout=30, backoff={"initial": 1, "max": 60})
def send_welcome_email(user_id: int) -> str:
    """Welcome a new user (the message goes to the outbox folder, not to the internet)."""
    path = services.deliver(
        settings.outbox(), key=f"welcome-{user_id}", to=f"user{user_id}@example.com",
        subject="Welcome to the shop", body=f"Hello user {user_id}, thanks for signing up!",
    )
    log.info("welcome email for user %s written to %s", user_id, path)
    return str(path)


@pgfleet.task(queue="payments", max_attempts=5, timeout=20,
              backoff={"initial": 0.5, "max": 5, "jitter": 0.2})
def capture_payment(order_id: int) -> str:
    """Capture an order's payment at a flaky provider: a 503 is retried with backoff, a
    404 fails the job for good (it goes to `dead` at once)."""
    job = pgfleet.current_job()
    attempt = job.attempt if job else 1
    try:
        receipt = services.capture_payment(order_id, attempt, settings.failure_rate())
    except services.UnknownOrder as exc:
        raise pgfleet.PermanentError(str(exc)) from exc
    # ProviderUnavailable propagates: the job fails this attempt and is retried.
    return receipt.status


@pgfleet.task(queue="reports", max_attempts=3, timeout=600)
def build_sales_report(day: str | None = None) -> str:
    """Write the sales of one day (default: yesterday, UTC) as CSV. The file is replaced
    atomically, so a rerun or a crash half-way never leaves a truncated report behind."""
    when = date.fromisoformat(day) if day else datetime.now(UTC).date() - timedelta(1)
    day = when.isoformat()
    rows = random.Random(day).randint(20, 60)
    path = settings.reports() / f"sales-{when.isoformat()}.csv"
    partial = path.with_suffix(".part")
    rng = random.Random(f"sales:{day}")
    with partial.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["order_id", "customer", "amount_eur", "paid_at"])
        for n in range(rows):
            paid = datetime.combine(when, datetime.min.time(), UTC) + timedelta(
                seconds=rng.randint(0, 86399))
            writer.writerow([f"{when:%Y%m%d}-{n:04d}", f"customer-{rng.randint(1, 500)}",
                             f"{rng.uniform(5, 250):.2f}", paid.isoformat()])
    partial.replace(path)
    return str(path)


@pgfleet.task(queue="default", timeout=300)
def cleanup_outbox(older_than_days: float = 7) -> int:
    """Nightly: delete sent messages older than `older_than_days`."""
    cutoff = time.time() - older_than_days * 86400
    removed = 0
    for message in settings.outbox().glob("*.eml"):
        if message.stat().st_mtime < cutoff:
            message.unlink(missing_ok=True)
            removed += 1
    log.info("cleanup removed %d old message(s)", removed)
    return removed
