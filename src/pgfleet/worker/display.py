"""What a worker shows of how busy it is: the busy gauge and its process title."""

from __future__ import annotations

from collections.abc import Callable

from pgfleet import metrics


def jobs_running(count: int) -> str:
    """The status part of a worker's process title: `0 jobs`, `1 job`, `3 jobs`."""
    return f"{count} job" if count == 1 else f"{count} jobs"


class BusyDisplay:
    """Writes only changes: the worker's loop can turn thousands of times a second."""

    def __init__(self, queue: str, title: Callable[[str], None] | None) -> None:
        self.queue = queue
        self.title = title
        self.busy = -1
        # The supervisor's count of this queue's workers changes with TTIN/TTOU, and the
        # title (set by the supervisor's run_child) shows it beside the jobs.
        self.peers = 0

    def show(self, busy: int, peers: int) -> None:
        if (busy, peers) == (self.busy, self.peers):
            return
        if busy != self.busy:
            metrics.workers_busy.labels(self.queue).set(busy)
        self.busy, self.peers = busy, peers
        if self.title is not None:
            self.title(jobs_running(busy))
