"""Leases: renewed with every heartbeat; a job whose row is no longer this worker's is
stopped, and a worker that could not renew for most of a lease must stop running its
jobs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from pgfleet.runtime.child import exit_now
from pgfleet.runtime.exit_codes import EXIT_LEASE_LOST
from pgfleet.sql import fleet as fleet_store, store
from pgfleet.worker.executor import Executor, LeaseLost

log = logging.getLogger("pgfleet.worker")

# Past expiry another host may start these jobs; a worker that could not renew its
# leases for this fraction of the lease stops its jobs before that can happen.
LEASE_SAFETY = 0.8
# The watchdog thread's bound, for a main thread that is blocked: still inside the lease.
WATCHDOG_SAFETY = 0.9


class Leases:
    def __init__(self, *, worker_id: str, lease: float, heartbeat_interval: float,
                 on_give_up: Callable[[], None] | None = None) -> None:
        self.worker_id = worker_id
        # Marks the supervisor's beacon slot: this exit is the worker's own decision, so
        # the rescue gives the jobs back refunded instead of counting a crash.
        self.on_give_up = on_give_up
        self.lease = lease
        self.heartbeat_interval = heartbeat_interval
        self.renewed = time.monotonic()
        self.next_renewal = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next_renewal

    def renew(self, conn: psycopg.Connection[Any], executor: Executor,
              also: Mapping[int, int] | None = None) -> None:
        """Heartbeat the process row and renew every running job's lease in one
        transaction, and the leases `also` names ({id: fence}, held but not started);
        interrupt the jobs whose rows are no longer this worker's under their fence, and
        cancel those someone asked to cancel."""
        # Taken before the statement: the server's new expiry is at least this late.
        sent = time.monotonic()
        with conn.transaction():
            fleet_store.heartbeat_process(conn, self.worker_id)
            renewed = store.renew_leases(
                conn, worker=self.worker_id, lease=self.lease,
                fences={**{job_id: running.job.fence
                           for job_id, running in executor.running.items()}, **(also or {})})
        self.renewed = sent
        for job_id, running in list(executor.running.items()):
            if job_id not in renewed and not running.lost:
                executor.interrupt(running, LeaseLost)
            elif renewed.get(job_id):
                # Cancelled, and no NOTIFY reached this worker (notifications off, or lost).
                executor.cancel(running)
        self.next_renewal = time.monotonic() + self.heartbeat_interval

    def expiring(self, now: float, busy: int) -> bool:
        """True when jobs run on leases not renewed for LEASE_SAFETY of their length."""
        return busy > 0 and now - self.renewed > self.lease * LEASE_SAFETY

    def give_up(self, now: float, busy: int) -> None:
        """Say why the process is about to exit, and mark the exit as deliberate."""
        if self.on_give_up is not None:
            self.on_give_up()
        log.error("worker %s could not renew its leases for %.0fs (lease %.0fs); exiting "
                  "so that none of its %d job(s) can run twice", self.worker_id,
                  now - self.renewed, self.lease, busy)


def start_watchdog(leases: Leases, busy: Callable[[], int]) -> threading.Event:
    """A daemon thread that ends the process when its jobs run on leases not renewed for
    WATCHDOG_SAFETY of their length. It needs neither the database nor the main thread,
    which may be blocked in a database call that never returns (a network that drops
    packets): past expiry another host may start these jobs, so this process must be gone
    by then. The jobs stay leased; the supervisor's rescue (refunded, since give_up marks
    the exit as chosen) or the lease expiry returns them. It fires later than the main
    loop's own check (LEASE_SAFETY), which stops a responsive worker more gently. Set the
    returned event to end the watch."""
    done = threading.Event()  # set by the worker's main thread, never by a signal handler

    def watch() -> None:
        while not done.wait(min(0.25, leases.lease / 20)):
            now = time.monotonic()
            if busy() > 0 and now - leases.renewed > leases.lease * WATCHDOG_SAFETY:
                leases.give_up(now, busy())
                exit_now(EXIT_LEASE_LOST)

    threading.Thread(target=watch, name="pgfleet-lease-watchdog", daemon=True).start()
    return done
