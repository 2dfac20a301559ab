"""What the lease watch costs a maintenance pass (issue 12, rescue by beats).

    python -m bench.lease_watch [N ...]

For each N: N running jobs held by 50 workers; then maintenance's rescue work of one pass
(running_leases, LeaseWatch.stale, rescue_stale of what is stale: nothing here, as in a
healthy fleet) 50 times; prints the median, min and max per pass in milliseconds. The old
rescue (one UPDATE ... WHERE lease_expires_at < now()) read only expired rows; the watch
reads every running row, so its cost grows with the jobs running at once, not with the
backlog or history."""

from __future__ import annotations

import statistics
import sys
import time

from bench.common import Database
from pgfleet.maintenance.lease_watch import LeaseWatch
from pgfleet.sql import rescue as rescue_store

PASSES = 50


def measure(db: Database, running: int) -> list[float]:
    db.reset()
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, attempt, lease_holder,"
            " lease_expires_at, started_at) SELECT 'default', 'bench.noop', 'running', 1,"
            " 'host:' || (g %% 50) || ':bench', now() + interval '1 hour', now()"
            " FROM generate_series(1, %s) g", (running,))
        conn.execute("VACUUM ANALYZE pgfleet.jobs")
        watch = LeaseWatch(stale_after=60.0)
        times = []
        for _ in range(PASSES):
            start = time.perf_counter()
            stale = watch.stale(rescue_store.running_leases(conn), time.monotonic())
            rescue_store.rescue_stale(conn, leases=stale)
            times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [100, 1000, 10000]
    db = Database()
    db.create()
    try:
        for running in sizes:
            times = measure(db, running)
            print(f"{running:>6} running jobs: {statistics.median(times):7.2f} ms per pass"
                  f" (min {min(times):.2f}, max {max(times):.2f}, {PASSES} passes)")
    finally:
        db.drop()


if __name__ == "__main__":
    main()
