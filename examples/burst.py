"""Enqueue a burst of the example app's work and watch it finish.

    python -m examples.burst [--count 200] [--no-wait] [--database-url URL]

The database is --database-url, else PGFLEET_DATABASE_URL or DATABASE_URL, else the
embedded server that `pgfleet dev -c examples/pgfleet.yaml` started from this directory
(this waits for it to come up). Exits 0 when every job of the burst has finished as
expected: all succeeded but the one order that does not exist, which is dead on purpose.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import date, timedelta
from typing import Any

import psycopg

import pgfleet
from examples.app import tasks
from pgfleet.dev import embedded
from pgfleet.sql.db import redact_dsn, resolve_dsn

PROGRESS = """
SELECT count(*) FILTER (WHERE state = 'queued')    AS queued,
       count(*) FILTER (WHERE state = 'running')   AS running,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'dead')      AS dead,
       coalesce(sum(jsonb_array_length(errors)), 0) AS failed_attempts
FROM pgfleet.jobs WHERE id = ANY(%s)
"""


def find_database(explicit: str | None, wait: float) -> str:
    dsn = resolve_dsn(explicit)
    if dsn:
        return dsn
    deadline = time.monotonic() + wait
    said = False
    while True:
        dsn = embedded.running_dsn()
        if dsn and _migrated(dsn):
            return dsn
        if time.monotonic() > deadline:
            sys.exit("no database: start `pgfleet dev -c examples/pgfleet.yaml` in another "
                     "terminal, or set PGFLEET_DATABASE_URL")
        if not said:
            print("waiting for `pgfleet dev -c examples/pgfleet.yaml` to start its database...")
            said = True
        time.sleep(0.5)


def _migrated(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            row = conn.execute("SELECT to_regclass('pgfleet.jobs') IS NOT NULL").fetchone()
            return bool(row and row[0])
    except psycopg.Error:
        return False


def burst(count: int) -> list[dict[str, Any]]:
    """The jobs of one burst: half welcome emails, the rest payments at the flaky
    provider, a few CSV reports, and one payment for an order that does not exist."""
    jobs: list[dict[str, Any]] = []
    stamp = int(time.time())
    for n in range(count):
        if n % 2 == 0:
            jobs.append({"task": tasks.send_welcome_email, "args": {"user_id": stamp + n}})
        else:
            jobs.append({"task": tasks.capture_payment, "args": {"order_id": stamp + n}})
    for back in range(1, max(2, count // 50) + 1):
        day = (date.today() - timedelta(days=back)).isoformat()
        jobs.append({"task": tasks.build_sales_report, "args": {"day": day},
                     "unique_key": f"sales-report-{day}"})
    jobs.append({"task": tasks.capture_payment, "args": {"order_id": 0}})
    return jobs


def watch(dsn: str, ids: list[int], expected_dead: int, timeout: float,
          hint: bool = True) -> int:
    started = time.monotonic()
    last = ""
    while True:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            row = conn.execute(PROGRESS, (ids,)).fetchone()
        assert row is not None
        queued, running, succeeded, dead, failed = row
        elapsed = time.monotonic() - started
        line = (f"queued {queued:>4}  running {running:>3}  succeeded {succeeded:>4}  "
                f"dead {dead}  failed attempts (retried) {failed}")
        if line != last:
            print(f"{elapsed:6.1f}s  {line}", flush=True)
            last = line
        if queued == 0 and running == 0:
            print(f"done in {elapsed:.1f}s: {succeeded} succeeded, {dead} dead, "
                  f"{failed} failed attempts along the way")
            if hint:
                print("look closer:  pgfleet jobs list --state dead   |   pgfleet status")
            return 0 if dead == expected_dead else 1
        if elapsed > timeout:
            print(f"not finished after {timeout:.0f}s; is the supervisor running?")
            return 1
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="emails + payments to enqueue")
    parser.add_argument("--database-url", help="PostgreSQL URL (default: see above)")
    parser.add_argument("--no-wait", action="store_true", help="enqueue and exit")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds to wait for the burst to finish")
    # make quickstart stops the server after the burst, so it prints hints of its own.
    parser.add_argument("--no-hint", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dsn = find_database(args.database_url, wait=120.0)
    jobs = burst(args.count)
    # One round trip per few thousand jobs, all in one transaction.
    ids = pgfleet.enqueue_many(dsn, jobs)
    print(f"enqueued {len(ids)} jobs into {redact_dsn(dsn)}: {args.count // 2 + args.count % 2} "
          f"welcome emails, {args.count // 2} payments at a flaky provider, "
          f"{len(jobs) - args.count - 1} sales reports, 1 payment for an unknown order")
    if args.no_wait:
        return 0
    return watch(dsn, ids, expected_dead=1, timeout=args.timeout, hint=not args.no_hint)


if __name__ == "__main__":
    sys.exit(main())
