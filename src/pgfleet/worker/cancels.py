"""Task control on the worker's side: cancellations announced by NOTIFY, and the progress
running tasks report, both handled by the main thread in its database phase.

A cancellation reaches the worker two ways: a NOTIFY on pgfleet_cancel naming this worker
(within milliseconds; the listener thread only sets a flag), and the lease renewal, which
reports every cancelled job it renews (the fallback when notifications are off or lost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from pgfleet.sql import store
from pgfleet.worker.executor import Executor
from pgfleet.worker.listener import WAKE_ALL

# Progress is written at most this often per job: a task may report in a tight loop.
PROGRESS_EVERY = 1.0
# The shortest time between two cancel checks: any role may NOTIFY the channel, and a
# flood must not become a flood of queries.
CANCEL_CHECK_GAP = 0.05


class TaskControl:
    def __init__(self, *, worker_id: str, executor: Executor,
                 wake: Callable[[], None]) -> None:
        self.worker_id = worker_id
        self.executor = executor
        self.wake = wake
        self.check_due = False  # set by the listener thread, cleared by the main thread
        self.next_check = 0.0

    def on_cancel(self, payload: str) -> None:
        """The listener thread: a job of `payload`'s worker was cancelled (WAKE_ALL after
        a reconnect: notifications may have been lost meanwhile)."""
        if payload in (self.worker_id, WAKE_ALL) and not self.check_due:
            self.check_due = True
            self.wake()

    def database_work(self, conn: psycopg.Connection[Any] | None, now: float) -> None:
        """Cancel the jobs a notification announced; write the progress that is due."""
        if conn is None:
            return
        if self.check_due and now >= self.next_check:
            self.check_due = False
            self.next_check = now + CANCEL_CHECK_GAP
            running = self.executor.running
            for job_id in store.cancels_requested(conn, worker=self.worker_id,
                                                  ids=list(running)):
                if job_id in running:
                    self.executor.cancel(running[job_id])
        store.write_progress(conn, worker=self.worker_id,
                             reports=self.executor.progress_due(now, PROGRESS_EVERY))

    def wait_limit(self) -> float:
        """When the loop must wake next for a notified cancel check (inf: no need)."""
        return self.next_check if self.check_due else float("inf")
